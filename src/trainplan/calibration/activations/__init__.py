"""Activation calibration: what the analytic per-layer accounting (costs/activations.py) misses
against a trace of the real model code, as data.

`hf_eager.json` (schema `trainplan-activation-calibration/1`) holds, per architecture family and
checkpointing policy and layer kind, coefficients c of a linear correction in bytes per token:

    traced = layer_activations(spec, moe_layer, ctx, policy).total + sum_i c_i * x_i(spec, moe_layer)

with the features x_i of FEATURES below. They were fitted on traces of the Hugging Face eager code
(bf16, flash attention, no TP/SP/CP) at the shapes and settings stored in the file, with
leave-one-shape-out cross-validated error. Regenerate: `python -m trainplan.trace.calibrate`.

Pure Python: costs/memory.py may call `correction()` without torch.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from trainplan.models.layers import FULL, MAMBA2, NO_MIXER

SCHEMA = "trainplan-activation-calibration/1"
FILE = Path(__file__).with_name("hf_eager.json")
FEATURES = ("hidden", "q_dim", "kv_dim", "ffn", "topk_expert_ffn", "topk_hidden", "experts", "topk", "heads",
            "kv_heads", "q_lora", "kv_lora", "rope", "heads_nope", "heads_v",
            "ssm_inner", "ssm_bc", "ssm_heads", "ssm_heads_state", "ssm_heads_chunk", "ssm_state_per_chunk",
            "ssm_state_per_seq", "ssm_chunk_pairs", "one")
FAMILIES = ("dense_mha", "gqa_swiglu", "moe", "mla", "hybrid_ssm")
# The kinds a family's layers are fitted by: two-part layers are dense or MoE; a hybrid model's
# one-part blocks (Nemotron-H) are a Mamba-2 mixer, an attention mixer or an MLP alone.
BLOCKS = {(MAMBA2, False): "mamba2", (FULL, False): "attention", (NO_MIXER, True): "mlp"}


def family(spec) -> str:
    """dense_mha | gqa_swiglu | moe | mla | hybrid_ssm, from the spec's fields (never from ratios)."""
    if spec.mla is not None:
        return "mla"
    if spec.mamba is not None:
        return "hybrid_ssm"
    if spec.moe is not None:
        return "moe"
    if spec.gated_mlp:
        return "gqa_swiglu"
    return "dense_mha"


def kind(moe_layer: bool, block: tuple[str, bool] = (FULL, True)) -> str:
    """The calibration's kind of one layer: `block` is its (mixer, has an MLP) as
    costs.activations.saved_kinds names it; a one-part block is named by BLOCKS (an MoE block: moe)."""
    if moe_layer:
        return "moe"
    return BLOCKS.get(block, "dense")


def features(spec, moe_layer: bool, seq_len: int | None = None) -> dict[str, float]:
    """Per-layer shape features (elements per token) the correction is linear in. The ssm_ ones are
    the Mamba-2 mixer's: d_inner, the B and C widths, heads, heads x state (B and C repeated per head
    by a scan that does not group them), heads x chunk (the within-chunk decay matrix per token), the
    state per chunk per token (heads x head_dim x state / chunk), the state handed on once per
    sequence and the chunk-to-chunk decay matrix ((chunks + 1)^2 per head per sequence), per token
    (0 without a sequence length)."""
    h = spec.hidden_size
    a = spec.mla
    moe = spec.moe if moe_layer else None
    s = spec.mamba
    return {
        "hidden": h,
        "q_dim": spec.num_heads * (a.qk_nope_head_dim + a.qk_rope_head_dim) if a else spec.q_dim,
        "kv_dim": 0 if a else spec.kv_dim,
        "ffn": (moe.shared_expert_ffn_size if moe.num_shared_experts else 0) if moe else spec.ffn_size,
        "topk_expert_ffn": moe.experts_per_token * moe.expert_ffn_size if moe else 0,
        "topk_hidden": moe.experts_per_token * h if moe else 0,
        "experts": moe.num_experts if moe else 0,
        "topk": moe.experts_per_token if moe else 0,
        "heads": spec.num_heads,
        "kv_heads": 0 if a else spec.num_kv_heads,
        "q_lora": (a.q_lora_rank or 0) if a else 0,
        "kv_lora": a.kv_lora_rank if a else 0,
        "rope": a.qk_rope_head_dim if a else 0,
        "heads_nope": spec.num_heads * a.qk_nope_head_dim if a else 0,
        "heads_v": spec.num_heads * a.v_head_dim if a else 0,
        "ssm_inner": s.inner if s else 0,
        "ssm_bc": 2 * s.n_groups * s.state_size if s else 0,
        "ssm_heads": s.num_heads if s else 0,
        "ssm_heads_state": s.num_heads * s.state_size if s else 0,
        "ssm_heads_chunk": s.num_heads * s.chunk_size if s else 0,
        "ssm_state_per_chunk": s.inner * s.state_size / s.chunk_size if s else 0,
        "ssm_state_per_seq": s.inner * s.state_size / seq_len if s and seq_len else 0,
        "ssm_chunk_pairs": s.num_heads * (-(-seq_len // s.chunk_size) + 1) ** 2 / seq_len if s and seq_len else 0,
        "one": 1,
    }


@functools.cache
def load(path: str | None = None) -> dict:
    p = Path(path) if path else FILE
    data = json.loads(p.read_text())
    assert data.get("schema") == SCHEMA, f"{p}: not {SCHEMA}"
    return data


def correction(spec, moe_layer: bool, policy: str, data: dict | None = None,
               block: tuple[str, bool] = (FULL, True), seq_len: int | None = None) -> float:
    """Bytes per token to add to the analytic layer for this family/policy/kind (0 if not calibrated);
    `block`: the layer's (mixer, has an MLP), costs.activations.saved_kinds; `seq_len`: the traced
    sequence (the Mamba-2 scan's per-sequence state)."""
    data = data or (load() if FILE.exists() else {"families": {}})
    k = kind(moe_layer, block)
    entry = data["families"].get(family(spec), {}).get(policy, {}).get(k)
    if entry is None and k == "dense":
        # a dense layer of an MoE model (Jamba's, Llama 4's every other layer): the moe fit traced MoE
        # layers only; the dense layer is what family() names for a model without experts and its MLP
        dense = "gqa_swiglu" if spec.gated_mlp else "dense_mha"
        entry = data["families"].get(dense, {}).get(policy, {}).get(k)
    if entry is None:
        return 0.0
    x = features(spec, moe_layer, seq_len)
    return sum(c * x[f] for f, c in entry["coefficients"].items())
