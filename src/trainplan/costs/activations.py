"""Activation memory: an explicit per-layer accounting of the tensors saved for backward.

Every term is bytes per token of one transformer layer on one GPU, for one micro-batch; multiply
by the tokens a GPU holds (micro_batch * seq_len / cp) to get bytes. Tensor groups are named so that
a trace of the real model (issue 3) can check each one:

  residual       inputs of the pre-attention and pre-MLP norms (the residual stream; the residual
                 adds themselves save nothing) + the fp32 1/rms (or mean, 1/std) per token, as a
                 fused norm kernel keeps them (aten._fused_rms_norm, compiled norms; an eager
                 decomposed RMSNorm also keeps fp32 copies of its input, ~6 more bytes per element)
  attn_input     the norm output that feeds the q/k/v projections
  qkv            q, k, v after the projections (GQA: k and v have num_kv_heads heads); with
                 qk-norm also the pre-norm q and k and their fp32 1/rms per head
  attn_core      what the attention kernel keeps beyond q, k, v: flash attention keeps only the
                 fp32 log-sum-exp per head; materialised attention keeps the softmax output
                 (and, with dropout, its mask and the dropped-out probabilities)
  attn_output    attention output = the input of the output projection (flash also keeps it)
  mlp_input      the norm output that feeds the MLP (or router and experts)
  mlp_hidden     MLP intermediates: GELU keeps its input and output; SwiGLU keeps gate, up,
                 silu(gate) and their product (the down-projection input)
  dropout_masks  one byte per element for the two hidden-state dropouts (none in modern models)
  moe_routing    router logits / probabilities (fp32) and the chosen expert ids and weights
  moe_dispatch   the token copies sent to experts (tokens * top_k), the experts' intermediates and
                 their outputs before the weighted combine; routing is assumed balanced (an
                 expert-parallel rank receives tokens * top_k copies) times `moe_load`, what a
                 capacity factor keeps or pads to (costs/moe.routed_load)
  mla_latents    DeepSeek MLA: the compressed q and kv latents and their norms

Reference: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
Models" (arXiv:2205.05198), section 4 and Table 2. Under the paper's assumptions (16-bit
activations, LayerNorm, GELU MLP of 4h, multi-head attention, dropout, materialised attention)
this accounting gives exactly sbh(34 + 5as/h) per layer, and the TP/SP/selective variants of
Table 2 (tests/costs/test_memory_activations.py checks them).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from trainplan.models import layers as L
from trainplan.models.spec import ModelSpec

GROUPS = ("residual", "attn_input", "qkv", "attn_core", "attn_output", "mlp_input", "mlp_hidden",
          "dropout_masks", "moe_routing", "moe_dispatch", "mla_latents")

FP32 = 4
INDEX = 8  # int64 expert ids (torch.topk returns int64)


@dataclass(frozen=True, slots=True)
class LayerActivations:
    """Bytes saved for backward per token of one layer on one GPU (named groups, see module doc)."""

    residual: float = 0.0
    attn_input: float = 0.0
    qkv: float = 0.0
    attn_core: float = 0.0
    attn_output: float = 0.0
    mlp_input: float = 0.0
    mlp_hidden: float = 0.0
    dropout_masks: float = 0.0
    moe_routing: float = 0.0
    moe_dispatch: float = 0.0
    mla_latents: float = 0.0

    # The field list is read once (dataclasses.fields() per call dominated the search's profile).

    def values(self) -> tuple[float, ...]:
        return tuple(getattr(self, g) for g in GROUPS)

    @property
    def total(self) -> float:
        return sum(self.values())

    def scaled(self, k: float) -> LayerActivations:
        return LayerActivations(*(v * k for v in self.values()))

    def plus(self, o: LayerActivations) -> LayerActivations:
        return LayerActivations(*(a + b for a, b in zip(self.values(), o.values())))

    def to_dict(self) -> dict:
        return dict(zip(GROUPS, self.values()))


assert GROUPS == tuple(f.name for f in fields(LayerActivations))  # values() relies on the order


@dataclass(frozen=True, slots=True)
class ActivationContext:
    """What besides the architecture decides the saved bytes of a layer."""

    seq_len: int  # full sequence length (attention scores are s x s/cp per rank)
    tp: int = 1
    sequence_parallel: bool = True
    cp: int = 1
    # rows a rank's routed experts run, as a share of its micro-batch's tokens x top_k
    # (layout.ExpertGroups.routed_share: etp / tp)
    routed_share: float = 1.0
    # bf16/fp16 activations. fp8 recipes keep this: torchao's float8 linear saves its high-precision
    # input for backward (torchao/float8/float8_linear.py, matmul_with_hp_or_float8_args:
    # save_for_backward(input_hp, weight_hp_t)). Transformer Engine saves fp8 copies of linear
    # inputs instead; that saving (~1 byte on 4 of the ~9 tensors of a layer) is not modelled.
    elem_bytes: int = 2
    flash_attention: bool = True
    dropout: bool = False  # Korthikanti's GPT has attention and hidden dropout; Llama-era models none
    fused_pointwise: bool = False  # torch.compile: silu/mul recomputed in backward (min-cut partitioner)
    norm_stats: bool = True  # count the fp32 per-token norm statistics (Korthikanti neglects them)
    # With SP, Megatron saves the sequence-sharded norm output and all-gathers it again in backward
    # (Korthikanti 4.2.2); DTensor sequence parallelism (torchtitan) saves the all-gathered input
    # of the column-parallel matmuls, which is not divided by tp.
    sp_saves_gathered: bool = False
    # Which 'selective' policy runs with flash attention: torchtitan's per-op policy (True) or
    # Megatron's --recompute-granularity selective with its default --recompute-modules core_attn
    # (False), which with a fused attention kernel has nothing large left to drop.
    per_op_selective: bool = True
    # RMSNorm implementation. "fused" (torchtitan/Megatron/TE kernels, aten._fused_rms_norm): the bf16
    # input and an fp32 1/rms per token. "eager": the decomposed norm of Hugging Face modeling code
    # (x.float(), pow, mean, rsqrt, mul, .to(bf16), * weight) keeps an fp32 copy of the input (saved
    # by pow and mul) and the bf16 normalised tensor before the weight multiply (saved by the weight
    # mul), i.e. fp32 + bf16 per element instead of bf16. LayerNorm is an aten kernel either way.
    norm_impl: str = "fused"
    # Megatron's fused bias-SwiGLU (megatron/core/fusions/fused_bias_swiglu.py) saves the fc1 output
    # (gate and up, 2f) and the fc2 layer its input (f): 3 f-wide tensors instead of eager's 4.
    fused_swiglu: bool = False
    # Transformer Engine fp8 linears save a low-precision copy of their input for the weight-gradient
    # GEMM instead of the bf16 tensor: the norm outputs and the fc2 input shrink; the attention
    # output is kept twice (bf16 by the attention kernel, low-precision by the output projection).
    fp8_linear_inputs: bool = False
    # bytes per element of that copy: the recipe's format, scales included (recipes.toml
    # weight_bytes: fp8 1, MXFP8 1 + 1/32, NVFP4 0.5 + 1/16)
    lowp_bytes: float = 1.0
    # Mamba-1 scan implementation. "kernel": mamba_ssm's selective_scan and causal_conv1d (what a GPU
    # run uses, transformers picks them when installed); "reference": transformers' PyTorch fallback
    # (mamba_selective_scan, causal_conv1d_fn), which keeps the discretised tensors and every step's
    # state: what `trainplan trace` runs on CPU (_mamba1_reference).
    mamba_scan: str = "kernel"
    # Routed copies this GPU holds over the balanced tokens * top_k (costs/moe.routed_load with
    # balanced routing): below 1 when a capacity factor < 1 drops copies, c when padded to capacity.
    moe_load: float = 1.0


def _heads_per_rank(n: int, tp: int) -> float:
    # tp larger than the kv-head count replicates kv heads: each rank still holds one head.
    return max(n / tp, 1.0)


def layer_none(m: ModelSpec, moe_layer: bool, c: ActivationContext, mixer: str = L.FULL,
               mlp: bool = True) -> LayerActivations:
    """Bytes/token saved by one layer with no recomputation (the 'none' policy).

    Tensor parallelism divides what lives inside the TP region (q/k/v, attention, MLP hidden);
    sequence parallelism also divides what lives outside it (norm inputs and outputs, dropout masks),
    Korthikanti section 4.2.2. Without SP those are replicated on every TP rank.
    `mixer`: the layer's attention variant (models/layers.py); the linear-attention and Mamba mixers
    keep their own tensors (_deltanet, _mamba1, _mamba2), a block without a mixer none. `mlp` False: a block
    without an MLP (Nemotron-H's mixer blocks).
    """
    if mixer == L.NO_MIXER or not mlp:
        return _one_block(m, layer_none(m, moe_layer, c, L.FULL if mixer == L.NO_MIXER else mixer), mixer, mlp)
    linear = mixer == L.LINEAR
    mamba = mixer in (L.MAMBA, L.MAMBA2)
    e, t = c.elem_bytes, c.tp
    sp = t if (c.sequence_parallel and t > 1) else 1  # divisor for the sequence-parallel region
    h = m.hidden_size
    # Two pre-norm inputs (the residual stream) + fp32 rstd (RMSNorm) or mean and rstd (LayerNorm).
    stats = FP32 * (2 if m.norm == "layernorm" else 1) if c.norm_stats else 0
    norm_in = _norm_input_bytes(m, e, c)
    residual = 2 * (norm_in * h + stats) / sp
    if m.norms_per_layer == 4:  # Gemma 2/3 post-norms keep their inputs too
        residual += 2 * (norm_in * h + stats) / sp
    gathered = 1 if c.sp_saves_gathered else sp
    e_in = c.lowp_bytes if c.fp8_linear_inputs else e  # what a linear layer saves of its input
    attn_input = e_in * h / gathered  # the q/k/v (column-parallel) matmul input
    mlp_input = e_in * h / gathered
    q_heads = m.num_heads / t
    s_rank = c.seq_len  # each query attends over the full sequence (CP exchanges k/v chunks)
    mla = 0.0
    if m.mla is not None:
        a = m.mla
        qk_head = a.qk_nope_head_dim + a.qk_rope_head_dim
        qkv = e * q_heads * (2 * qk_head + a.v_head_dim)  # per-head q, k (nope+rope) and v
        out_dim = q_heads * a.v_head_dim
        # latents are computed before the TP split (replicated across TP ranks unless SP)
        q_lat = 2 * e * a.q_lora_rank if a.q_lora_rank else 0  # q_a output and its norm output
        kv_lat = e * (a.kv_lora_rank + a.qk_rope_head_dim) + e * a.kv_lora_rank
        mla = (q_lat + kv_lat) / sp
    elif linear:
        qkv, attn_core_linear, out_dim = _deltanet(m, e, t)
    elif mixer == L.MAMBA:
        qkv, attn_core_linear, out_dim = _mamba1(m, e, t, c)
    elif mamba:
        qkv, attn_core_linear, out_dim = _mamba2(m, e, t, c.seq_len)
    else:
        kv_heads = _heads_per_rank(m.num_kv_heads, t)
        qkv = e * m.head_dim * (q_heads + 2 * kv_heads)
        if m.attention_output_gate:  # the sigmoid gate's input, out of q_proj (Qwen3-Next)
            qkv += e * m.head_dim * q_heads
        if m.qk_norm:
            # per-head RMSNorm on q and k (Qwen3, Gemma 3) keeps its input and an fp32 1/rms per head
            qkv += (norm_in * m.head_dim + (FP32 if c.norm_stats else 0)) * (q_heads + kv_heads)
        out_dim = q_heads * m.head_dim
    attn_output = e * out_dim + (c.lowp_bytes * out_dim if c.fp8_linear_inputs else 0)
    if linear or mamba:
        attn_core = attn_core_linear
    elif c.flash_attention:
        attn_core = FP32 * q_heads  # log-sum-exp per head per query
    else:
        # softmax output (e per score) [+ dropout mask (1 byte) + dropped-out probs (e)]
        per_score = e + ((1 + e) if c.dropout else 0)
        attn_core = per_score * q_heads * s_rank
    dropout_masks = (2 * h / sp) if c.dropout else 0.0

    routing = dispatch = 0.0
    if moe_layer:
        moe = m.moe
        k, E = moe.experts_per_token, moe.num_experts
        # router logits and softmax probabilities in fp32, top-k ids and weights
        routing = (2 * FP32 * E + (INDEX + FP32) * k) / sp
        # each token is copied top_k times: gathered expert inputs, expert intermediates, outputs
        # (etp < tp: a rank runs etp/tp of them, each through the whole expert width / etp), times
        # what a capacity factor keeps or pads to (moe_load); copies travel at the experts' width, and a
        # latent MoE keeps its up projection's input (the combined latent output) besides
        dispatch = c.moe_load * k * (2 * e * m.expert_dim * c.routed_share
                                     + _mlp_hidden(m, moe.expert_ffn_size / t, e, c))
        dispatch += e * moe.latent_size
        hidden = _mlp_hidden(m, moe.shared_expert_ffn_size / t, e, c) if moe.num_shared_experts else 0.0
    else:
        hidden = _mlp_hidden(m, m.ffn_size / t, e, c)
    return LayerActivations(
        residual=residual, attn_input=attn_input, qkv=qkv, attn_core=attn_core, attn_output=attn_output,
        mlp_input=mlp_input, mlp_hidden=hidden, dropout_masks=dropout_masks,
        moe_routing=routing, moe_dispatch=dispatch, mla_latents=mla,
    )


# flash-linear-attention's chunked gated delta rule keeps one dk x dv state per value head and chunk
# of this many tokens for its backward (fla/ops/gated_delta_rule/chunk.py, chunk_size 64), in fp32
DELTANET_CHUNK = 64


def _deltanet(m: ModelSpec, e: int, t: int) -> tuple[float, float, float]:
    """(qkv, attn_core, out_dim) bytes per token of a gated DeltaNet layer (Qwen3-Next): the in_proj
    outputs (q, k, v, the output gate z, beta and the decay input), the depthwise conv's output over
    q, k, v, and the fp32 chunk states and per-head decay and beta the kernel keeps; the gated norm's
    input feeds the output projection (out_dim wide). Heads split over tp as attention heads do."""
    a = m.linear_attention
    proj = 2 * a.key_dim + 2 * a.value_dim + 2 * a.num_value_heads
    conv = 2 * a.key_dim + a.value_dim
    qkv = e * (proj + conv) / t
    states = FP32 * a.num_value_heads * a.key_head_dim * a.value_head_dim / DELTANET_CHUNK
    core = (states + 2 * FP32 * a.num_value_heads) / t
    return qkv, core, a.value_dim / t


def saved_kinds(m: ModelSpec) -> tuple[tuple[str, bool], ...]:
    """Per layer of `m` (models/layers.py), what decides its saved tensors besides MoE: its mixer
    (the DeltaNet and Mamba mixers and the mixer-less block keep their own; every attention
    variant keeps attention's, as FULL) and whether it has an MLP: the `mixer, mlp` arguments of
    layer_activations, for the memory model and the tracer's comparison alike."""
    own = (L.LINEAR, L.MAMBA, L.MAMBA2, L.NO_MIXER)
    return tuple((k.attention if k.attention in own else L.FULL, k.mlp != L.NO_MLP) for k in L.layer_pattern(m))


def _one_block(m: ModelSpec, both: LayerActivations, mixer: str, mlp: bool) -> LayerActivations:
    """A Nemotron-H block holds one mixer or one MLP behind one norm: what a two-part layer keeps,
    less the part it lacks and half the residual stream (one norm input of the two)."""
    d = both.to_dict()
    d["residual"] /= 2
    if mixer == L.NO_MIXER:
        for g in ("attn_input", "qkv", "attn_core", "attn_output", "mla_latents"):
            d[g] = 0.0
    if not mlp:
        for g in ("mlp_input", "mlp_hidden", "moe_routing", "moe_dispatch"):
            d[g] = 0.0
    return LayerActivations(**d)


def _mamba2(m: ModelSpec, e: int, t: int, seq_len: int) -> tuple[float, float, float]:
    """(qkv, attn_core, out_dim) bytes per token of a Mamba-2 mixer (Dao & Gu 2024; mamba_ssm's
    mamba_chunk_scan_combined and HF NemotronHMamba2Mixer): the in_proj output (z, x, B, C, dt), the
    causal conv's activated output over x, B, C; the scan kernel's fp32 dt and cumulative decay per
    head, its output y (the gated norm's input) with the norm's fp32 1/rms per group, the fp32 SSM
    state at each chunk boundary (H x P x N per chunk of chunk_size tokens) and the conv state (the
    conv_kernel - 1 tokens before each sequence's end, per conv channel); the gated norm's output
    feeds out_proj (out_dim wide). Heads, groups and channels split over tp (Megatron's Mamba TP)."""
    a = m.mamba
    proj = a.inner + a.conv_dim + a.num_heads
    qkv = e * (proj + a.conv_dim) / t
    ssm_state = FP32 * a.num_heads * a.head_dim * a.state_size / a.chunk_size
    conv_state = e * a.conv_dim * (a.conv_kernel - 1) / max(1, seq_len)
    core = (2 * FP32 * a.num_heads + e * a.inner + FP32 * a.n_groups + ssm_state + conv_state) / t
    return qkv, core, a.inner / t


# mamba_ssm's selective-scan kernel (csrc/selective_scan, selective_scan_fwd) runs the sequence in
# chunks of this many tokens and keeps each chunk's last state for its backward, in fp32
MAMBA1_SCAN_CHUNK = 2048


def _mamba1(m: ModelSpec, e: int, t: int, c: ActivationContext) -> tuple[float, float, float]:
    """(qkv, attn_core, out_dim) bytes per token of a Mamba-1 mixer as HF JambaMambaMixer runs it with
    the mamba_ssm / causal_conv1d kernels (Gu & Dao 2023 sec. 3.3.2: the scan's states are recomputed
    in backward, not stored): the in_proj output (x and z, 2 d_inner; the conv keeps x, the scan z),
    the conv's activated output u (x_proj's input and the scan's), the x_proj output (dt, B, C: the
    three RMSNorms' inputs, with their fp32 1/rms), the normed dt (dt_proj's input), B and C (the
    scan's), dt_proj's output delta (the scan's); the scan's output before its gate and its fp32 state
    at the end of each MAMBA1_SCAN_CHUNK tokens (d_inner x state_size, twice: selective_scan_fwd keeps
    x as d x n_chunks x 2N), and the conv state (conv_kernel - 1 tokens per channel per sequence); the
    gated output feeds out_proj (out_dim wide). The d_inner channels split over tp; dt, B and C (one
    per token, x_proj's all-reduced output) would not."""
    a, seq_len = m.mamba1, c.seq_len
    if c.mamba_scan == "reference":
        return _mamba1_reference(m, e, t, seq_len)
    d, small = a.inner, a.dt_rank + 2 * a.state_size
    # x and z, u, delta; x_proj's output and (Jamba) its normed copy with the norms' fp32 1/rms
    qkv = e * (2 * d + d + d) / t + (2 * e * small + 3 * FP32 if a.dt_bc_norms else e * small)
    states = FP32 * d * 2 * a.state_size / MAMBA1_SCAN_CHUNK
    conv_state = e * d * (a.conv_kernel - 1) / max(1, seq_len)
    core = (e * d + states + conv_state) / t
    return qkv, core, d / t


def _mamba1_reference(m: ModelSpec, e: int, t: int, seq_len: int) -> tuple[float, float, float]:
    """(qkv, attn_core, out_dim) bytes per token of a Mamba-1 mixer in transformers' PyTorch fallback
    (5.24 modeling_jamba.py: causal_conv1d_fn, the eager JambaRMSNorm, mamba_selective_scan's sequential
    loop), what the backward's autograd graph holds, for d channels of N states:
      per (channel, state): exp(dt A) and dt B in fp32 (4 + 4), each step's fp32 state (4, the first
        step's a zero bf16 one) and its bf16 copy for the read-out matmul (2);
      per channel: the in_proj output x and z (2 e: the conv and the gate's SiLU keep views of it),
        the conv output before its SiLU (e, over seq_len + K - 1 positions), u (e) and u in fp32 (4),
        dt_proj's output plus bias (e, kept by softplus) and dt (e), the scan output plus D u in fp32
        (4), SiLU(z) (e) and out_proj's input (e);
      per x_proj output column (R + 2N): each eager RMSNorm's fp32 input copy and bf16 normalised copy
        (4 + e) and one fp32 1/rms per norm; dt_proj's input (R e), B in fp32 (4 N), C (N e);
      per sequence: A = -exp(A_log) and exp's output, fp32 d x N each, and D in fp32 (d).
    Unsplit over tp (the trace has none)."""
    a = m.mamba1
    d, n, r, k, s = a.inner, a.state_size, a.dt_rank, a.conv_kernel, max(1, seq_len)
    norms = ((FP32 + e) * (r + 2 * n) + 3 * FP32) if a.dt_bc_norms else 0
    qkv = d * (2 * e + e * (s + k - 1) / s + e + FP32 + 2 * e) + norms + r * e + FP32 * n + n * e
    states = d * n * (FP32 + FP32 + FP32 * (s - 1) / s + e * (s + 1) / s) + FP32 * d * (2 * n + 1) / s
    core = states + d * (FP32 + e)
    return qkv / t, core / t, d / t


def _norm_input_bytes(m: ModelSpec, e: int, c: ActivationContext) -> float:
    """Bytes per element a norm keeps of its input (see ActivationContext.norm_impl)."""
    if c.norm_impl == "eager" and m.norm == "rmsnorm":
        return FP32 + e
    return e


def _mlp_hidden(m: ModelSpec, f: float, e: int, c: ActivationContext) -> float:
    """Bytes/token of the MLP intermediates of width f (already divided by tp).

    GELU: its input (up output) and output (down input), 2 tensors (paper: 8sbh + 8sbh at f = 4h).
    Gated (SwiGLU/GeGLU) in eager mode: gate and up outputs, act(gate) and the product, 4 tensors;
    compiled, the pointwise act and product are recomputed from gate and up, 2 tensors; Megatron's
    fused bias-SwiGLU keeps gate and up and the fc2 input, 3 tensors. The down-projection input is
    an fp8 copy under Transformer Engine fp8.
    """
    down_in = f * (c.lowp_bytes if c.fp8_linear_inputs else e)
    if m.gated_mlp:
        if c.fused_pointwise:
            return 2 * e * f
        if c.fused_swiglu:
            return 2 * e * f + down_in
        return 3 * e * f + down_in
    return e * f + down_in


def layer_selective(m: ModelSpec, moe_layer: bool, c: ActivationContext, mixer: str = L.FULL,
                    mlp: bool = True) -> LayerActivations:
    """Bytes/token saved with selective recomputation.

    Megatron (and any run with materialised attention): attention-core recompute (Korthikanti
    section 5): everything but the s x s softmax/dropout tensors is kept; Table 2 gives sbh*34/t
    with TP+SP. With flash attention that is almost the 'none' memory.
    Flash attention with c.per_op_selective (the core has nothing large to drop): torchtitan's per-op policy
    (torchtitan/distributed/activation_checkpoint.py `_custom_policy`): keep the layer input, the
    attention output with its log-sum-exp, and the outputs of every second matmul (q, v, MLP gate,
    MLP down); recompute norms, rope, the other matmuls and all element-wise ops.
    """
    full = layer_none(m, moe_layer, c, mixer, mlp)
    if mixer in (L.LINEAR, L.MAMBA, L.MAMBA2) or mixer == L.NO_MIXER or not mlp:
        # no per-op policy is modelled for the DeltaNet and Mamba mixers nor for Nemotron-H's
        # one-part blocks: they keep what 'none' keeps
        return full
    if not (c.flash_attention and c.per_op_selective):
        return LayerActivations(**{**full.to_dict(), "attn_core": 0.0})
    e, t = c.elem_bytes, c.tp
    sp = t if (c.sequence_parallel and t > 1) else 1
    h = m.hidden_size
    q_heads = m.num_heads / t
    if m.mla is not None:
        a = m.mla
        # q_a / kv_a latents (1st, 3rd matmul) kept; q and kv up-projections alternate
        qkv = e * q_heads * (a.qk_nope_head_dim + a.qk_rope_head_dim + a.v_head_dim)
        mla = full.mla_latents / 2
    else:
        qkv = e * m.head_dim * (q_heads + _heads_per_rank(m.num_kv_heads, t))  # wq and wv outputs
        mla = 0.0
    if moe_layer:
        moe = m.moe
        f_shared = moe.shared_expert_ffn_size / t if moe.num_shared_experts else 0.0
        mlp_hidden = e * f_shared  # shared-expert gate output kept
        # grouped expert GEMMs: gathered inputs and gate outputs kept, act/product/up recomputed
        dispatch = c.moe_load * moe.experts_per_token * (e * m.expert_dim * c.routed_share
                                                         + e * moe.expert_ffn_size / t) + e * moe.latent_size
        routing = full.moe_routing
    else:
        mlp_hidden = e * m.ffn_size / t  # w1 (gate) output; w3 recomputed
        dispatch = routing = 0.0
    return LayerActivations(
        residual=(e * h) / sp,  # the layer input (norms recomputed from it)
        qkv=qkv,
        attn_core=full.attn_core,
        attn_output=full.attn_output,  # the attention output; wo (the 4th matmul) is recomputed
        # + the down-projection output, which eager SAC caches for the re-run forward; a compiled
        # block saves only what backward reads, and nothing reads it (torchtitan's Dec 2024
        # benchmark: compile lowers the peak of the same run by about this tensor)
        mlp_hidden=mlp_hidden + (0.0 if c.fused_pointwise else e * h / sp),
        moe_routing=routing, moe_dispatch=dispatch, mla_latents=mla,
    )


def layer_full(m: ModelSpec, c: ActivationContext) -> LayerActivations:
    """Full recomputation keeps only the layer input (Korthikanti Table 2: 2sbh at 16 bits).

    With sequence parallelism the input is sharded over tp (Megatron keeps the SP shard).
    """
    sp = c.tp if (c.sequence_parallel and c.tp > 1) else 1
    return LayerActivations(residual=c.elem_bytes * m.hidden_size / sp)


def layer_activations(m: ModelSpec, moe_layer: bool, c: ActivationContext, policy: str,
                      mixer: str = L.FULL, mlp: bool = True) -> LayerActivations:
    """Bytes/token kept by one layer under a per-layer policy: 'none', 'selective', 'full', 'offload';
    `mixer`: the layer's attention variant (the DeltaNet and Mamba mixers keep other tensors),
    `mlp` False: a block without an MLP."""
    if policy == "none":
        return layer_none(m, moe_layer, c, mixer, mlp)
    if policy == "selective":
        return layer_selective(m, moe_layer, c, mixer, mlp)
    if policy == "full":
        return layer_full(m, c)
    if policy == "offload":
        return LayerActivations()  # the layer input lives in host memory
    raise AssertionError(f"unknown per-layer policy {policy}")


def microbatches_in_flight(pp: int, stage: int, grad_accum: int, schedule: str, vp: int) -> float:
    """Micro-batches whose activations a pipeline stage holds at its peak, in units of the whole stage.

    1F1B (Narayanan et al. 2021, PipeDream-Flush): stage i (0-based) runs pp - i forwards before its
    first backward, so it holds min(pp - i, grad_accum) micro-batches.
    Interleaved with vp chunks per rank (Megatron-LM schedules.py warm-up count): rank i holds
    2 (pp - i - 1) + (vp - 1) pp + 1 chunks of 1/vp stage each; for rank 0 that is
    pp (1 + (pp - 1) / (pp vp)) stages' worth (Korthikanti section 4.2.3).
    GPipe: every micro-batch of the step.
    """
    if pp == 1:
        return 1.0
    if schedule == "gpipe":
        return float(grad_accum)
    if schedule == "interleaved" and vp > 1:
        chunks = min(2 * (pp - stage - 1) + (vp - 1) * pp + 1, grad_accum * vp)
        return chunks / vp
    return float(min(pp - stage, grad_accum))


def layer_backward_grads(m: ModelSpec, moe_layer: bool, c: ActivationContext) -> float:
    """Bytes/token of activation gradients alive at once inside one layer's backward.

    The gradient entering and leaving the block (residual stream, sharded with SP) and the
    gradients of the MLP intermediates being formed: gated MLPs hold d(gate) and d(up) together,
    GELU MLPs one tensor; routed experts hold them for each of the top_k token copies. Transient
    (one layer at a time), whatever the checkpointing policy.
    """
    e, t = c.elem_bytes, c.tp
    sp = t if (c.sequence_parallel and t > 1) else 1
    per_f = 2 if m.gated_mlp else 1
    if moe_layer:
        moe = m.moe
        f = c.moe_load * moe.experts_per_token * moe.expert_ffn_size + \
            (moe.shared_expert_ffn_size if moe.num_shared_experts else 0)
    else:
        f = m.ffn_size
    return 2 * e * m.hidden_size / sp + per_f * e * f / t
