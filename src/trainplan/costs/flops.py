"""FLOPs of one training step, from the architecture.

Convention (the one `Estimate.mfu` uses): **model FLOPs** = the matmuls a step must do, counted as
2 FLOP per multiply-add, with causal attention counted at half the s x s work (what a causal flash
kernel executes), the LM head included, embeddings (a lookup) excluded, and recompute excluded.
This is torchtitan's "6N + attention" with N = matmul parameters a token goes through, except that
torchtitan and Megatron (Narayanan et al. 2021 eq. 3) count the full s x s attention; pass
`causal=False` to get theirs. **Hardware FLOPs** add the recompute of the checkpointing policy.

Derivation, per token of a sequence of length s, one layer, forward pass:
  1. A linear layer with a K x N weight does M x K x N multiply-adds for M tokens: 2*K*N FLOP per
     token, i.e. 2 FLOP per weight.
  2. Attention projections: q (h -> heads*d), k and v (h -> kv_heads*d), o (heads*d -> h):
     2*h*(q_dim + 2*kv_dim) + 2*q_dim*h. MLA (DeepSeek-V2 sec. 2.1): q down/up (or plain q), the
     joint kv down projection h -> kv_lora + rope, the kv up projection kv_lora -> heads*(nope + v),
     and o: 2 FLOP per weight of each.
  3. Attention core: scores q.k^T cost 2*heads*d_qk per (query, key) pair, the weighted sum of
     values 2*heads*d_v. A query sees s keys without a mask, (s+1)/2 on average with a causal
     mask (~s/2), and with a causal sliding window w < s: (w*s - w^2/2)/s on average.
  4. MLP: 2 FLOP per weight: 2*h*ff*3 for gated (SwiGLU/GeGLU), 2*h*ff*2 otherwise.
  5. MoE layer: the router (2*h*E), the top-k routed experts a token goes through
     (k * expert MLP) and the shared experts (always on). A latent MoE (Nemotron 3, moe_latent_size
     l) adds the projections h -> l before the experts and l -> h after them (2*h*l each), and its
     experts work between l features, not h.
  6. LM head: 2*h*V per token (the loss itself is element-wise: non-GEMM work).
  7. Backward = 2 x forward (grad w.r.t. inputs and grad w.r.t. weights, each a matmul of the same
     size; the attention core's backward also does 2 x its forward: dQ, dK, dV with a recomputed
     P in flash attention are counted as recompute-free here, as all published MFU conventions do).
  8. Step = 3 x forward x tokens. Recompute adds forward work again, and how much depends on the
     policy and on the framework family that runs it (`layer_recompute`, steps 9-12 below);
     `partial` applies full checkpointing to ac_layers of each stage's layers, none to the rest.

Recompute (hardware FLOPs, and the time compute.py charges for it), per checkpointed layer:
  9. Megatron family (megatron, nemo, megatron_bridge), full (`recompute_granularity=full`, method
     uniform): `tensor_parallel.checkpoint` (megatron/core/tensor_parallel/random.py,
     CheckpointFunction) runs the layers under no_grad and, in backward, calls the wrapped forward
     again as a whole: every GEMM, the attention core and the element-wise work re-run.
 10. PyTorch family (torchtitan, FSDP/HF, Composer, KempnerForge, fms: non-reentrant
     `torch.utils.checkpoint`), full: the re-run forward stops as soon as the last tensor backward
     needs has been rebuilt, so the work after it never runs again. In a dense layer that is the
     MLP down projection (its input is what backward needs; its output only feeds the residual add).
     A MoE layer scales the routed experts' outputs by the router scores after the down projection,
     and that product's backward needs them: the whole MoE layer is re-run. Traced (`trainplan trace
     --model llama-3.1-8b --seq-len 8192 --micro-batch 1 --ac full`): 8.36e13 matmul FLOP re-run,
     exactly the layers' matmuls less w2 (1.14e14 with w2). The reentrant variant
     (`use_reentrant=True`, e.g. Composer's FSDPConfig default; llm-foundry's YAMLs turn it off)
     re-runs the whole layer like step 9: pass family 'megatron' for it.
 11. PyTorch family, selective = torchtitan's per-op policy (torchtitan/distributed/
     activation_checkpoint.py, `_custom_policy` with its mm counter): the outputs of attention and of
     the 1st, 3rd, 5th... `aten.mm` of a layer are saved; the 2nd, 4th, ... matmuls are re-run with
     all element-wise ops. In Llama execution order (q, k, v, o, gate, up, down) that re-runs k, o
     and up; attention is not re-run. Routed experts run as grouped GEMMs, which the counter does not
     count and the policy saves. Traced (`--ac selective`, same model): 4.18e13 matmul FLOP, 0
     attention.
 12. Megatron family, selective (default `recompute_modules=["core_attn"]`, Korthikanti et al. 2022
     sec. 4.2): the attention core softmax(QK^T)V is re-run, once per layer, as a forward; with a
     fused (flash) kernel its backward recomputes the probabilities on its own anyway (counted in
     compute.FA_BWD_FLOP_RATIO), so the checkpoint adds exactly one forward attention kernel.
 13. Attention FLOPs stay causal here (steps 3, 7), in model FLOPs (the MFU convention) and in the
     recompute: flash kernels skip the fully masked blocks, so causal is what they execute.
     torch.utils.flop_counter counts s x s and a 2.5x flash backward; `trainplan trace` numbers are
     compared with `causal=False` (the forward attention of the trace above, 3.52e13, is
     attention_per_token(8192, causal=False) x 8192 tokens).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from trainplan.models import layers as L
from trainplan.models.spec import ModelSpec


@dataclass(frozen=True, slots=True)
class LayerFlops:
    """Forward FLOPs per token of one layer kind, split by what runs them.

    `gemms` lists (K, N, count, kind) of each linear: a token does 2*K*N FLOP in it; `kind` is
    'attn' (projections), 'mlp' (dense or shared MLP and router) or 'expert' (routed, per active
    expert: count = top-k). Shapes let compute.py pick an efficiency per GEMM.
    """

    gemms: tuple[tuple[int, int, int, str], ...]
    attn_pair_flops: int  # FLOP per (query, key) pair, all heads: 2*heads*(d_qk + d_v)
    window: float | None  # sliding window or chunk (keys per query at most), the mixers' key count, or None
    count: int  # how many layers of this kind
    # Per GEMM, the output widths of the separate matmuls it stands for, in the execution order of
    # the reference (torchtitan / Hugging Face) code: q, k, v for a fused qkv; gate, up for a fused
    # gate/up. Empty for routed experts (grouped GEMMs). Used by the per-op selective policy (step 11).
    parts: tuple[tuple[int, ...], ...] = ()
    attention: str = L.FULL  # the layers' attention variant (models/layers.py ATTENTION)

    @property
    def linear_per_token(self) -> int:
        return sum(2 * k * n * c for k, n, c, _ in self.gemms)

    def keys_per_query(self, seq_len: int, causal: bool = True) -> float:
        """Average keys a query of this kind attends to (step 3), by its attention variant."""
        return KEYS_PER_QUERY[self.attention](seq_len, self.window, causal)


@dataclass(frozen=True, slots=True)
class ModelFlops:
    """Per-model constants, computed once per ModelSpec (cached)."""

    layers: tuple[LayerFlops, ...]
    head_per_token: int  # 2*h*V
    num_layers: int

    def linear_per_token(self) -> int:
        return sum(x.linear_per_token * x.count for x in self.layers)

    def attention_per_token(self, seq_len: int, causal: bool = True) -> float:
        return sum(x.attn_pair_flops * x.keys_per_query(seq_len, causal) * x.count for x in self.layers)

    def forward_per_token(self, seq_len: int, causal: bool = True) -> float:
        return self.linear_per_token() + self.attention_per_token(seq_len, causal) + self.head_per_token

    def model_per_token(self, seq_len: int, causal: bool = True) -> float:
        """Model FLOPs per trained token: 3 x forward (step 7-8 above), no recompute."""
        return 3.0 * self.forward_per_token(seq_len, causal)


def keys_per_query(s: int, window: int | None, causal: bool = True) -> float:
    """Average keys a query attends to (step 3)."""
    if not causal:
        return float(s if window is None else min(s, window))
    if window is None or window >= s:
        return s / 2.0
    return (window * s - window * window / 2.0) / s


def chunked_keys_per_query(s: int, chunk: int | None, causal: bool = True) -> float:
    """Average keys a query sees when attention stays inside chunks of `chunk` tokens (Llama 4 local
    layers): s = n chunk + r gives n full chunks and one of r tokens; a causal chunk of c tokens is
    c^2/2 (query, key) pairs (the s/2 convention of step 3), a non-causal one c^2."""
    n, r = divmod(s, chunk)
    pairs = n * chunk * chunk + r * r
    return pairs / s if not causal else pairs / (2.0 * s)


def _full_keys(s: int, _window: int | None, causal: bool = True) -> float:
    return keys_per_query(s, None, causal)


# How many keys a query of each attention variant attends to (the one cost function a new variant
# adds, besides its row in models/layers.py ATTENTION).
KEYS_PER_QUERY: dict[str, Callable[[int, int | None, bool], float]] = {
    L.FULL: _full_keys,
    L.NOPE: _full_keys,
    L.MLA: _full_keys,
    L.SLIDING: keys_per_query,
    L.CHUNKED: chunked_keys_per_query,
    L.LINEAR: lambda _s, keys, _causal=True: float(keys),  # LayerFlops.window holds _linear_keys
    L.MAMBA: lambda _s, keys, _causal=True: float(keys),  # LayerFlops.window holds _mamba1_keys
    L.MAMBA2: lambda _s, keys, _causal=True: float(keys),  # LayerFlops.window holds _mamba2_keys
    L.NO_MIXER: lambda _s, _w, _causal=True: 0.0,  # an MLP-only block attends to nothing
}


def _parts(gemms, split: dict | None = None) -> tuple[tuple[int, ...], ...]:
    """Matmuls behind each GEMM (LayerFlops.parts): one each, unless `split` (index -> widths)."""
    split = split or {}
    return tuple(split.get(i, (() if g[3] == "expert" else (g[1],))) for i, g in enumerate(gemms))


# Gated DeltaNet's chunked form (Yang et al. 2024, arXiv:2412.06464 sec. 3.3; flash-linear-attention
# chunk_gated_delta_rule, chunks of 64 tokens): per token and value head, causal attention inside its
# chunk (~C/2 keys for QK^T and for the value sum, and again for the WY representation's K K^T and
# its products: ~C keys in all) plus the state's read-out, correction and update (3 products of the
# dk x dv state: 6 dk dv FLOP). Counted as that many (query, key) pairs at 2 (dk + dv) FLOP each:
# C + 3 dk dv / (dk + dv), a constant per token whatever the sequence (what makes it linear).
# No measured DeltaNet kernel rate exists in the machine profiles: compute.py prices these pairs as
# flash attention at that key count, a datasheet-class fallback.
DELTANET_CHUNK = 64


def _linear_keys(m: ModelSpec) -> int:
    a = m.linear_attention
    return round(DELTANET_CHUNK + 3 * a.key_head_dim * a.value_head_dim / (a.key_head_dim + a.value_head_dim))


def mamba2_scan_per_token(m: ModelSpec) -> float:
    """Forward FLOPs per token of the Mamba-2 SSD scan in its chunked form (Dao & Gu 2024,
    arXiv:2405.21060 sec. 6: the semiseparable matrix cut into chunks of Q tokens), H heads of P
    channels, B and C of N per group (G groups), 2 FLOP per multiply-add:
      1. diagonal blocks, inside each chunk: C B^T per group (N per (query, key) pair) and its
         decay-masked product with x per head (P per pair), causal: Q/2 keys on average (the s/2
         convention of step 3): G N Q + H P Q;
      2. right factors, each chunk's state B^T x per head: 2 H N P;
      3. centre, the states passed from chunk to chunk: 2 H N P once per chunk, / Q per token;
      4. left factors, the output read from the state before the chunk, C h per head: 2 H N P.
    Linear in the sequence: a constant per token."""
    a = m.mamba
    q, n, p, h, g = a.chunk_size, a.state_size, a.head_dim, a.num_heads, a.n_groups
    return g * n * q + h * p * q + 4 * h * n * p + 2 * h * n * p / q


def _mamba2_pair_flops(m: ModelSpec) -> int:
    """The Mamba-2 scan counted as (query, key) pairs at 2 H (N + P) FLOP each (as the DeltaNet core)."""
    a = m.mamba
    return 2 * a.num_heads * (a.state_size + a.head_dim)


def _mamba2_keys(m: ModelSpec) -> float:
    """Keys per query that make pairs x _mamba2_pair_flops the scan's FLOPs (mamba2_scan_per_token).
    No machine-profile microbenchmark exists for the SSD kernels: compute.py prices these pairs as
    flash attention at this key count, a datasheet-class fallback."""
    return mamba2_scan_per_token(m) / _mamba2_pair_flops(m)


def mamba1_scan_per_token(m: ModelSpec) -> float:
    """Forward FLOPs per token of a Mamba-1 mixer outside its four GEMMs (in_proj, x_proj, dt_proj,
    out_proj), counted from Gu & Dao 2023 (arXiv:2312.00752) Algorithm 2 as HF JambaMambaMixer runs it
    (transformers 5.24 modeling_jamba.py causal_conv1d_fn and mamba_selective_scan), d_inner channels
    of N states, 2 FLOP per multiply-add, 1 per lone multiply or add (exp, softplus and SiLU, which are
    not multiply-adds, are left out, as the MFU conventions leave out element-wise work):
      1. the causal depthwise conv1d over x: K taps per channel, 2 K d;
      2. discretisation per (channel, state): dt A (1) and (dt u) B (1), with dt u once per channel (1);
      3. the recurrence h = exp(dt A) h + dt B u per (channel, state): 2;
      4. the read-out y = C h per (channel, state): 2;
      5. per channel the skip D u (2) and the gate y silu(z) (1).
    d (2 K + 6 N + 4): linear in the sequence, a constant per token."""
    a = m.mamba1
    return a.inner * (2 * a.conv_kernel + 6 * a.state_size + 4)


def _mamba1_pair_flops(m: ModelSpec) -> int:
    """The Mamba-1 scan counted as (query, key) pairs of one multiply-add per channel (2 d FLOP)."""
    return 2 * m.mamba1.inner


def _mamba1_keys(m: ModelSpec) -> float:
    """Keys per query that make pairs x _mamba1_pair_flops the conv and scan FLOPs (mamba1_scan_per_token).
    No machine-profile microbenchmark exists for mamba_ssm's selective-scan kernel: compute.py prices
    these pairs as flash attention at this key count, a datasheet-class fallback (as for Mamba-2)."""
    return mamba1_scan_per_token(m) / _mamba1_pair_flops(m)


def _attention_gemms(m: ModelSpec, attention: str = L.FULL) -> tuple[tuple[tuple[int, int, int, str], ...], int]:
    h = m.hidden_size
    if attention == L.MAMBA2:  # in_proj (z, x, B, C, dt) and out_proj
        a = m.mamba
        return ((h, a.inner + a.conv_dim + a.num_heads, 1, "attn"), (a.inner, h, 1, "attn")), _mamba2_pair_flops(m)
    if attention == L.MAMBA:  # in_proj (x, z), x_proj (dt, B, C), dt_proj and out_proj
        a = m.mamba1
        return ((h, 2 * a.inner, 1, "attn"), (a.inner, a.dt_rank + 2 * a.state_size, 1, "attn"),
                (a.dt_rank, a.inner, 1, "attn"), (a.inner, h, 1, "attn")), _mamba1_pair_flops(m)
    if attention == L.NO_MIXER:
        return (), 0
    if attention == L.LINEAR:
        a = m.linear_attention
        gemms = ((h, 2 * a.key_dim + 2 * a.value_dim, 1, "attn"), (h, 2 * a.num_value_heads, 1, "attn"),
                 (a.value_dim, h, 1, "attn"))
        return gemms, 2 * a.num_value_heads * (a.key_head_dim + a.value_head_dim)
    if m.mla is not None:
        a = m.mla
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        if a.q_lora_rank is None:
            q = ((h, m.num_heads * qk, 1, "attn"),)
        else:
            q = ((h, a.q_lora_rank, 1, "attn"), (a.q_lora_rank, m.num_heads * qk, 1, "attn"))
        kv = ((h, a.kv_lora_rank + a.qk_rope_head_dim, 1, "attn"),
              (a.kv_lora_rank, m.num_heads * (a.qk_nope_head_dim + a.v_head_dim), 1, "attn"))
        o = ((m.num_heads * a.v_head_dim, h, 1, "attn"),)
        return q + kv + o, 2 * m.num_heads * (qk + a.v_head_dim)
    q_out = m.q_dim * (2 if m.attention_output_gate else 1)  # q and its output gate
    gemms = ((h, q_out + 2 * m.kv_dim, 1, "attn"), (m.q_dim, h, 1, "attn"))
    return gemms, 2 * m.num_heads * 2 * m.head_dim


def _mlp_gemms(m: ModelSpec, ff: int, count: int, kind: str, width: int | None = None,
               ) -> tuple[tuple[int, int, int, str], ...]:
    h = width or m.hidden_size  # a latent expert's: the latent size
    up = 2 * ff if m.gated_mlp else ff  # gate and up fused into one GEMM
    return ((h, up, count, kind), (ff, h, count, kind))


def _layer_parts(m: ModelSpec, gemms, attention: str = L.FULL) -> tuple[tuple[int, ...], ...]:
    """Split the fused qkv and gate/up GEMMs into the matmuls the reference code runs."""
    split = {}
    if m.mla is None and attention not in (L.LINEAR, L.MAMBA, L.MAMBA2, L.NO_MIXER):
        split[0] = (m.q_dim * (2 if m.attention_output_gate else 1), m.kv_dim, m.kv_dim)
    for i, (k, n, _, kind) in enumerate(gemms):
        if kind == "mlp" and m.gated_mlp and k == m.hidden_size and n % 2 == 0 and i + 1 < len(gemms) \
                and gemms[i + 1][0] * 2 == n:
            split[i] = (n // 2, n // 2)
    return _parts(gemms, split)


def _kind_gemms(m: ModelSpec, kind: L.LayerKind, attn) -> tuple[tuple[int, int, int, str], ...]:
    """The GEMMs of one layer of `kind`: attention projections, then its MLP (step 4) or MoE (step 5)."""
    if kind.mlp == L.DENSE:
        return attn + _mlp_gemms(m, kind.ffn_size, 1, "mlp")
    if kind.mlp == L.NO_MLP:
        return attn
    e = m.moe
    g = attn + ((m.hidden_size, e.num_experts, 1, "mlp"),)
    if e.num_shared_experts:
        g += _mlp_gemms(m, e.shared_expert_ffn_size, 1, "mlp")
    routed = _mlp_gemms(m, e.expert_ffn_size, e.experts_per_token, "expert", m.expert_dim)
    if not e.latent_size:
        return g + routed
    h, lat = m.hidden_size, e.latent_size  # fc1_latent_proj, the experts, fc2_latent_proj
    return g + ((h, lat, 1, "mlp"),) + routed + ((lat, h, 1, "mlp"),)


# The recurrent mixers' key count per query (LayerFlops.window): their cost per token, as pairs.
_MIXER_KEYS: dict[str, Callable[[ModelSpec], float]] = {
    L.LINEAR: _linear_keys, L.MAMBA: _mamba1_keys, L.MAMBA2: _mamba2_keys,
}


def _flops_of(m: ModelSpec, counts: dict, num_layers: int) -> ModelFlops:
    """One LayerFlops per distinct layer kind of `counts` (kind -> layers), dense kinds first and,
    within an MLP variant, windowed before unbounded attention (the order the sums have always run in)."""
    kinds = []
    for k in sorted(counts, key=lambda k: (k.is_moe, k.window is None)):
        attn, pair = _attention_gemms(m, k.attention)
        gemms = _kind_gemms(m, k, attn)
        window = _MIXER_KEYS[k.attention](m) if k.attention in _MIXER_KEYS else k.window
        kinds.append(LayerFlops(gemms, pair, window, counts[k], _layer_parts(m, gemms, k.attention), k.attention))
    return ModelFlops(tuple(kinds), 2 * m.hidden_size * m.vocab_size, num_layers)


@functools.lru_cache(maxsize=256)
def model_flops(m: ModelSpec) -> ModelFlops:
    """The whole model's layer kinds (models/layers.py) with their counts."""
    return _flops_of(m, L.kind_counts(m), m.num_layers)


@functools.lru_cache(maxsize=4096)
def stage_flops(m: ModelSpec, layers: tuple[int, ...]) -> ModelFlops:
    """The layer kinds of the decoder layers `layers` (one pipeline stage): a stage's cost is the sum
    of its layers, so a stage of dense layers, or of chunked-attention ones, costs what they cost."""
    pattern = L.layer_pattern(m)
    counts: dict = {}
    for i in layers:
        counts[pattern[i]] = counts.get(pattern[i], 0) + 1
    return _flops_of(m, counts, len(layers))


def recompute_fraction(ac: str, ac_layers: int, layers_per_stage: int) -> float:
    """Share of a stage's layers that are fully checkpointed (step 8); what each of them re-runs is
    `layer_recompute`'s answer. Also the share of per-layer collectives issued again (steptime)."""
    if ac in ("full", "offload"):
        return 1.0
    if ac == "partial":
        return min(1.0, ac_layers / max(1, layers_per_stage))
    return 0.0


def megatron_flops_per_step(batch: int, seq_len: int, layers: int, hidden: int, vocab: int) -> float:
    """Narayanan et al. 2021 eq. 3 (= Korthikanti et al. 2022 eq. 7 model FLOPs):
    72 B s l h^2 (1 + s/(6h) + V/(12 l h)), a GPT with a 4h GELU MLP and full (non-causal) attention."""
    B, s, l, h, V = batch, seq_len, layers, hidden, vocab
    return 72.0 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))


# The family (steps 9-12) is the stack's: stacks.toml `recompute_family`, "megatron" for the
# Megatron-Core stacks, "pytorch" (torch.utils.checkpoint, non-reentrant) for the others and for
# trainplan's own trainer (stacks.FAMILIES).


@dataclass(frozen=True, slots=True)
class LayerRecompute:
    """What one checkpointed layer re-runs in backward: the fraction of each GEMM of
    LayerFlops.gemms, of the attention core's forward and of the layer's forward element-wise work."""

    gemms: tuple[float, ...]
    attention: float
    nongemm: float


def _sac_fractions(kind: LayerFlops) -> tuple[float, ...]:
    """Step 11: fraction of each GEMM's FLOPs that the per-op policy re-runs (every 2nd matmul)."""
    out, n_mm = [], 0
    for parts in kind.parts:
        if not parts:  # grouped GEMM: saved, not counted
            out.append(0.0)
            continue
        rerun = 0
        for width in parts:
            n_mm += 1
            rerun += width if n_mm % 2 == 0 else 0
        out.append(rerun / sum(parts))
    return tuple(out)


def layer_recompute(kind: LayerFlops, policy: str, family: str) -> LayerRecompute:
    """Recompute of one layer under a per-layer policy ('none', 'selective', 'full'; 'offload' checkpoints
    like 'full') in a framework family (stacks.FAMILIES), steps 9-12."""
    n = len(kind.gemms)
    if policy in ("full", "offload"):
        frac = [1.0] * n
        is_moe = any(g[3] == "expert" for g in kind.gemms)
        if family == "pytorch" and not is_moe:
            frac[-1] = 0.0  # step 10: the down projection, the layer's last matmul
        return LayerRecompute(tuple(frac), 1.0, 1.0)
    if policy == "selective":
        if family == "megatron":
            return LayerRecompute((0.0,) * n, 1.0, 0.0)  # step 12
        return LayerRecompute(_sac_fractions(kind) if kind.parts else (0.0,) * n, 0.0, 1.0)  # step 11
    return LayerRecompute((0.0,) * n, 0.0, 0.0)


def layer_policies(ac: str, ac_layers: int, layers_per_stage: int) -> tuple[tuple[str, float], ...]:
    """(per-layer policy, fraction of a stage's layers under it) for a layout's ac setting."""
    if ac in ("full", "offload", "selective"):
        return ((ac, 1.0),)
    if ac == "partial":
        f = recompute_fraction(ac, ac_layers, layers_per_stage)
        return (("full", f), ("none", 1.0 - f))
    return (("none", 1.0),)


@dataclass(frozen=True, slots=True)
class RecomputeFlops:
    """Forward FLOPs re-run per trained token, all layers: matmuls and attention core."""

    linear: float
    attention: float

    @property
    def total(self) -> float:
        return self.linear + self.attention


def recompute_per_token(mf: ModelFlops, seq_len: int, ac: str, family: str, ac_layers: int = 0,
                        causal: bool = True) -> RecomputeFlops:
    """Recompute FLOPs per token of a whole model (one stage = all layers) for a layout's ac setting."""
    linear = attention = 0.0
    for policy, share in layer_policies(ac, ac_layers, mf.num_layers):
        for kind in mf.layers:
            r = layer_recompute(kind, policy, family)
            linear += share * kind.count * sum(2 * k * n * c * f for (k, n, c, _), f in zip(kind.gemms, r.gemms))
            attention += share * kind.count * r.attention * kind.attn_pair_flops * kind.keys_per_query(
                seq_len, causal)
    return RecomputeFlops(linear, attention)
