"""What each decoder layer is, derived once from the spec (as Megatron's layer specs).

A model is a sequence of layers, each with a kind (`LayerKind`): its attention variant (and the
window or chunk that bounds it) and its MLP (dense of its width, MoE, none), plus the explicit
multi-token-prediction modules after the last layer (`mtp_kinds`). A uniform model is the case
whose layers are all alike.

Every consumer that treats layers differently asks here: the parameter counts (models/params.py),
the memory model (costs/activations.py, costs/memory.py), the FLOPs (costs/flops.py), the stage
split's per-stage kinds (costs/states.py), the reference trainer (runtime/model.py) and the
tracer's layer kinds (trace/config.py). Two copies of the rule once disagreed: Qwen3-MoE's
`mlp_only_layers` made 46 MoE layers in the parameter count and 48 in the memory model.

Which attention each layer runs comes from `ModelSpec.attention_layers` when the layers differ
(the adapters write it: Gemma 2/3 and gpt-oss local and global layers, Llama 4's chunked and NoPE
layers, Qwen3-Next's linear and full ones); a spec written before it (an older plan.json, a
validation record) says only how many layers use a sliding window (`sliding_window_layers`): those
layers are then taken to be the first ones.

Which MLP each layer has comes from `ModelSpec.mlp_layers` when the config says it per block
(Nemotron-H: a block is a Mamba-2 mixer, attention or an MLP alone, so a mixer block has NO_MLP and
an MLP block the NO_MIXER variant; Nemotron 3's MoE blocks are NO_MIXER with MOE), else from the MoE
rule (is_moe_layer).

A new layer kind is one row of ATTENTION (what the variant is) plus one cost function
(costs/flops.py KEYS_PER_QUERY: how many keys a query attends to); tests/models/test_layers.py adds
a fake one. Weights and saved tensors of a new mixer (as the linear attention's) are its own
functions in models/params.py and costs/activations.py.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from trainplan.memo import memoised

if TYPE_CHECKING:
    from trainplan.models.spec import ModelSpec, MoESpec

# MLP variants
DENSE = "dense"
MOE = "moe"
NO_MLP = "none"

# Attention variants
FULL = "full"  # causal attention over the whole sequence, RoPE
SLIDING = "sliding"  # causal, the last `window` keys (Mistral, Gemma local layers, gpt-oss banded)
CHUNKED = "chunked"  # causal inside fixed chunks of `window` tokens (Llama 4 local layers)
NOPE = "nope"  # global causal attention without rotary positions (Llama 4's every 4th layer, Jamba's)
MLA = "mla"  # DeepSeek multi-head latent attention, full causal
LINEAR = "linear"  # gated DeltaNet linear attention: a recurrent state, no key/value cache (Qwen3-Next)
MAMBA = "mamba"  # Mamba-1 selective-scan (S6) mixer in place of attention (Jamba's Mamba layers)
MAMBA2 = "mamba2"  # Mamba-2 selective state-space mixer in place of attention (Nemotron-H "M" blocks)
NO_MIXER = "none"  # no token mixer: the block is an MLP only (Nemotron-H "-" blocks)


@dataclass(frozen=True, slots=True)
class AttentionVariant:
    """One row of the attention table: what the cost model and the trainer need to know."""

    bounded: bool  # a query sees at most `window` keys (the variant needs a window size)
    rope: bool  # rotary positions applied to q and k
    doc: str  # where the variant comes from


ATTENTION: dict[str, AttentionVariant] = {
    FULL: AttentionVariant(False, True, "causal attention over the whole sequence"),
    SLIDING: AttentionVariant(True, True, "Beltagy et al. 2020 (Longformer) sliding window; HF sliding_attention"),
    CHUNKED: AttentionVariant(True, True, "Llama 4 local attention in chunks of attention_chunk_size; HF "
                                          "chunked_attention (transformers 5.24 configuration_llama4.py)"),
    NOPE: AttentionVariant(False, False, "Llama 4 global layers without RoPE (no_rope_layers 0)"),
    MLA: AttentionVariant(False, True, "DeepSeek-V2 sec. 2.1 multi-head latent attention"),
    LINEAR: AttentionVariant(False, False, "Yang et al. 2024 gated delta networks (arXiv:2412.06464); HF "
                                           "linear_attention (transformers 5.24 modeling_qwen3_next.py)"),
    MAMBA: AttentionVariant(False, False, "Gu & Dao 2023 (arXiv:2312.00752) Mamba selective scan (S6); HF "
                                          "JambaMambaMixer (transformers 5.24 modeling_jamba.py)"),
    MAMBA2: AttentionVariant(False, False, "Dao & Gu 2024 (arXiv:2405.21060) Mamba-2 SSD mixer; HF "
                                           "NemotronHMamba2Mixer (transformers 5.24 modeling_nemotron_h.py)"),
    NO_MIXER: AttentionVariant(False, False, "a block without a token mixer (Nemotron-H MLP-only blocks)"),
}


@dataclass(frozen=True, slots=True)
class LayerKind:
    """What one decoder layer is: attention variant and its bound, MLP variant and width."""

    attention: str  # a key of ATTENTION
    window: int | None  # keys a query sees at most (sliding window, chunk size); None: unbounded
    mlp: str  # DENSE | MOE | NO_MLP
    ffn_size: int  # dense-MLP intermediate size (0 for MOE and NO_MLP layers)

    @property
    def is_moe(self) -> bool:
        return self.mlp == MOE


def is_moe_layer(moe: MoESpec | None, index: int) -> bool:
    """Whether decoder layer `index` (0-based) has the routed-expert FFN, as HF builds it.

    Dense below `first_dense_layers` (DeepSeek first_k_dense_replace), then every
    `moe_layer_freq`-th layer (Qwen decoder_sparse_step, Llama 4 interleave_moe_layer_step:
    (index + 1) % step == 0), except the explicit dense layers (Qwen mlp_only_layers)."""
    return (
        moe is not None
        and index >= moe.first_dense_layers
        and (index + 1) % moe.moe_layer_freq == 0
        and index not in moe.dense_layers
    )


@functools.lru_cache(maxsize=256)
def ffn_kinds(moe: MoESpec | None, num_layers: int) -> tuple[str, ...]:
    """DENSE or MOE for each decoder layer, in order (before a ModelSpec exists: the adapters)."""
    return tuple(MOE if is_moe_layer(moe, i) else DENSE for i in range(num_layers))


def _attention_of(m: ModelSpec) -> tuple[tuple[str, int | None], ...]:
    """(variant, window) per layer."""
    if m.attention_layers:
        return tuple((a, m.attention_chunk_size if a == CHUNKED else m.sliding_window if a == SLIDING else None)
                     for a in m.attention_layers)
    base = MLA if m.mla is not None else FULL
    windowed = m.sliding_window_layers if m.sliding_window else 0
    return tuple((SLIDING, m.sliding_window) if i < windowed else (base, None) for i in range(m.num_layers))


@memoised()  # the cost model asks per layout; the answer is the model's
def layer_pattern(m: ModelSpec) -> tuple[LayerKind, ...]:
    """The kind of each decoder layer of `m`, in order."""
    ffn = m.mlp_layers or ffn_kinds(m.moe, m.num_layers)  # mlp_layers: the config says it per layer
    return tuple(LayerKind(a, w, f, m.ffn_size if f == DENSE else 0)
                 for (a, w), f in zip(_attention_of(m), ffn, strict=True))


@memoised()
def mtp_kinds(m: ModelSpec) -> tuple[LayerKind, ...]:
    """The multi-token-prediction modules' transformer blocks, module after module (DeepSeek-V3
    sec. 2.2: each module is one block like the model's last layer, after a projection of
    [norm(h); norm(emb)]; Nemotron 3 Super: the blocks its config lists, mtp_attention_layers and
    mtp_mlp_layers). Transformers does not build them; they add parameters, FLOPs and memory to the
    last pipeline stage."""
    if not m.mtp_layers:
        return ()
    if not m.mtp_mlp_layers:
        return (layer_pattern(m)[-1],) * m.mtp_layers
    windows = {CHUNKED: m.attention_chunk_size, SLIDING: m.sliding_window}
    module = tuple(LayerKind(a, windows.get(a), f, m.ffn_size if f == DENSE else 0)
                   for a, f in zip(m.mtp_attention_layers, m.mtp_mlp_layers, strict=True))
    return module * m.mtp_layers


@memoised()
def layer_kinds(m: ModelSpec) -> tuple[str, ...]:
    """DENSE or MOE for each decoder layer of `m`, in order."""
    return tuple(k.mlp for k in layer_pattern(m))


@memoised()
def moe_flags(m: ModelSpec) -> tuple[bool, ...]:
    """True for each MoE layer of `m`, in order (the memory model's per-layer switch)."""
    return tuple(k.is_moe for k in layer_pattern(m))


@memoised()  # the step time asks per candidate (costs/flops.py, steptime.py); the answer is the model's
def kind_counts(m: ModelSpec) -> Mapping[LayerKind, int]:
    """Each distinct layer kind of `m` and how many layers have it, in order of first occurrence
    (read-only: the one answer is shared by every caller)."""
    out: dict[LayerKind, int] = {}
    for k in layer_pattern(m):
        out[k] = out.get(k, 0) + 1
    return MappingProxyType(out)


@memoised()
def model_features(m: ModelSpec) -> tuple[str, ...]:
    """The architecture features a plan's band asks were ever measured (band.py): the FFN kind and
    each departure from plain (grouped-query or multi-head) attention that the cost model prices:
    MLA, sliding windows, and the other attention variants of the layer pattern (chunked, NoPE,
    linear, Mamba-1, Mamba-2; a block without a mixer is an MLP, no departure), plus MTP modules."""
    out = [MOE if m.moe is not None else DENSE]
    out += ["mla"] * (m.mla is not None) + ["sliding-window"] * (m.sliding_window_layers > 0)
    out += sorted({k.attention for k in layer_pattern(m)} - {FULL, MLA, SLIDING, NO_MIXER})
    out += ["mtp"] * (m.mtp_layers > 0)
    return tuple(out)
