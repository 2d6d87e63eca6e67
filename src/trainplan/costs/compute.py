"""Compute time of one micro-batch on the slowest pipeline stage: GEMMs, attention, non-GEMM work.

Every rate is a physical ceiling times an efficiency in (0, 1]; nothing runs faster than its ceiling.

  * GEMMs run at the recipe's matmul ceiling, peak(peak_key) x matmul_ceiling(ceiling_key) (the
    measured best-shape rate, "MAMF", HARDWARE_FACTS.md 1.2; precision.Recipe.matmul_ceiling)
    x profile.gemm_eff x shape_eff(M, K, N), where
    shape_eff = 1 / (1 + d_half/M + d_half/K + d_half/N): a saturating function of the GEMM
    dimensions (a dimension much larger than d_half costs nothing; one of size d_half halves the
    rate), because small GEMMs fill fewer SMs and waves and are bound by memory traffic.
    Only the linear layers run in the recipe's GEMM dtype; the LM head and attention stay in the
    compute dtype (bf16), as torchao and Transformer Engine leave them.
    Routed-expert (grouped) GEMMs run at profile.moe_gemm_eff of a dense GEMM of the same shape.
  * Attention core (flash attention): bf16 peak x profile.attn_eff x seq_eff x head_eff, with
    seq_eff = kpq / (kpq + ATTN_KEYS_HALF) (kpq = keys a query attends to, causal halving and
    sliding windows included) and head_eff = d / (d + ATTN_HEAD_HALF). The backward runs
    FA_BWD_FLOP_RATIO x the forward's matmul FLOPs (it recomputes P) at FA_BWD_RATE_RATIO of the
    forward's rate. Constants from Dao 2023 (FlashAttention-2, arXiv:2307.08691, sec. 4.1 and
    fig. 4-7: forward up to 73% and backward up to 63% of A100 peak; backward counted as 2.5x the
    forward FLOPs; the causal 512-token point runs at about half the 16k rate; head dim 64 runs at
    ~0.85x head dim 128); FlashAttention-3 (Shah et al. 2024, arXiv:2407.08608 fig. 5-6) shows the
    same shape on H100, so one attn_eff per model is fitted and the shape factors are fixed. FA2 on
    Hopper/Blackwell (PyTorch SDPA) runs at FA2_ON_NEWER of the generation's own kernel.
  * Non-GEMM work is memory-bound: bytes moved per op class (norms, residual adds, RoPE, activation
    functions, softmax statistics, MoE permutation, loss, low-precision casts and amax reductions,
    whose bytes per element are the recipe's: recipes.toml cast_bytes_*) over
    HBM bandwidth x profile.hbm_eff (achieved fraction of the datasheet bandwidth). Bytes are counted
    for fused kernels (each op class reads its inputs and writes its outputs once: Transformer
    Engine / Apex kernels in Megatron-family frameworks, or torch.compile); eager PyTorch runs
    each class as a chain of kernels, counted with EAGER_PASSES.

Where the profile carries a machine profile for the GPU (profile.machine_for, trainplan/machine) with
a table for a kernel, that kernel's rate is the table's (costs/measured.py) times the residual
`machine_compute` / `machine_hbm`, and every GEMM pass is priced at its own shape. A low-precision
dtype without GEMM rows of its own runs at the compute dtype's rows x the profile's cited per-shape
ratio (`gemm_ratio`), never above the dtype's ceiling, so that bf16 and fp8 are priced on one footing;
the formulas above apply to the kernels the profile does not cover (a dtype it has neither rows nor a
ratio for, attention with no table).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from trainplan.costs import measured
from trainplan.costs.flops import ModelFlops, layer_recompute
from trainplan.costs.moe import router_bytes_per_token
from trainplan.hardware.types import GPUSpec
from trainplan.memo import memoised
from trainplan.models.spec import ModelSpec
from trainplan.precision import Recipe
from trainplan.profile import Profile

BF16_BYTES = 2
FP32_BYTES = 4

# FlashAttention-2 (Dao 2023) sec. 4.1: "forward pass up to 73%, backward up to 63% of the
# theoretical maximum"; the backward does 2.5x the forward's matmul FLOPs (5 matmuls vs 2).
FA_BWD_FLOP_RATIO = 2.5
FA_BWD_RATE_RATIO = 63 / 73
# Keys per query at which flash attention reaches half its long-sequence rate: FA2 fig. 4-5 (A100,
# causal, head dim 128) run at ~0.5x their 16k rate at s = 512, i.e. 256 keys per query.
ATTN_KEYS_HALF = 256.0
# Head dimension at which the rate halves: FA2 fig. 4-7, head dim 64 at ~0.85x head dim 128.
ATTN_HEAD_HALF = 24.0
# A kernel written for an older generation leaves the newer tensor-core paths (wgmma, TMA) unused:
# "FlashAttention-2 ... achieves only 35% utilization on the H100 GPU", FlashAttention-3 "up to
# 75%" (Shah et al. 2024, abstract). PyTorch SDPA and the flash-attn 2 package run FA2 on Hopper
# and Blackwell; Transformer Engine (Megatron, NeMo, Megatron-Bridge) runs cuDNN / FA3-class
# kernels. Blackwell with FA2 is assumed to lose the same fraction (no published measurement).
FA2_ON_NEWER = 0.35 / 0.75
NATIVE_ATTENTION_ARCHS = frozenset({"ampere"})  # where FA2 is the generation's own kernel

# Extra HBM passes of an eager (unfused) PyTorch op class relative to one fused kernel, from the
# kernels eager PyTorch launches: RMSNorm = upcast, pow, mean, rsqrt-mul, weight-mul, downcast
# (~3x the bytes of one fused read + write); SwiGLU = silu then mul (5 vs 3 tensor passes);
# RoPE via complex multiply in fp32 (upcast, mul, downcast: ~3x); a residual add is one kernel.
EAGER_PASSES = {"norm": 3.0, "act": 5 / 3, "rope": 3.0, "residual": 1.0}
# The backward of an element-wise op reads its saved input(s) and the incoming gradient and writes
# the input gradient(s): about twice the forward's bytes (so fwd + bwd = 3x forward).
BWD_BYTES_RATIO = 2.0


@dataclass(frozen=True, slots=True)
class MicrobatchCompute:
    """Seconds of one micro-batch (forward + backward) on the slowest stage, by kind of work.

    gemm, attention and nongemm partition the non-recompute time; `total` adds the recompute.
    """

    gemm: float  # linear layers and LM head, forward + backward
    attention: float  # attention core, forward + backward
    nongemm: float  # element-wise work incl. fp8 casts, forward + backward
    recompute: float  # forward work re-run for activation checkpointing
    forward: float  # forward part of gemm + attention + nongemm (the window for forward comm)
    model_flops: float  # FLOPs of this micro-batch on this GPU, no recompute
    hardware_flops: float  # with recompute
    # lookups beyond a machine-profile table's range (the table's edge was used), one line each
    outside: tuple[str, ...] = ()
    # GEMMs priced as the compute dtype's measured rows x a cited ratio (costs/measured.py), one line
    # per ratio table, and the largest leave-one-out error of those tables (the band widens by it)
    derived: tuple[str, ...] = ()
    derived_error: float = 0.0

    @property
    def total(self) -> float:
        return self.gemm + self.attention + self.nongemm + self.recompute


def shape_eff(m: float, k: float, n: float, d_half: float) -> float:
    return 1.0 / (1.0 + d_half / max(m, 1.0) + d_half / max(k, 1.0) + d_half / max(n, 1.0))


def gemm_rate(ceiling: float, gpu: GPUSpec, prof: Profile) -> float:
    """Achieved large-GEMM rate (FLOP/s) before the shape factor: never above `ceiling`, the
    measured best-shape rate of the GEMM's dtype (precision.Recipe.matmul_ceiling)."""
    return ceiling * prof.gemm_eff * prof.arch_gemm_eff.get(gpu.arch, 1.0)


def attention_eff(kpq: float, head_dim: float, prof: Profile, native: bool = True) -> float:
    """Forward flash-attention rate as a fraction of bf16 peak (module docstring); `native`: a
    kernel built for this GPU generation (else FA2_ON_NEWER of it)."""
    gen = 1.0 if native else FA2_ON_NEWER
    return gen * prof.attn_eff * kpq / (kpq + ATTN_KEYS_HALF) * head_dim / (head_dim + ATTN_HEAD_HALF)


def _layer_nongemm_bytes(m: ModelSpec, gemms, is_moe: bool, fused: bool, tp: int) -> float:
    """HBM bytes per token of one layer's element-wise ops, forward, on one tp rank."""
    p = {k: 1.0 for k in EAGER_PASSES} if fused else EAGER_PASSES
    h = m.hidden_size
    # 2 norms (read h, write h), 2 residual adds (read 2h, write h): the residual stream is
    # replicated on tp ranks without sequence parallel, split with it (counted as split: the
    # caller's `tokens` already hold the local part for SP; close enough without it)
    e = p["norm"] * 2 * 2 * h + p["residual"] * 2 * 3 * h
    # RoPE reads and writes q and k; flash attention writes fp32 log-sum-exp per head
    e += (p["rope"] * 2 * (m.q_dim + m.kv_dim) + 2 * m.num_heads) / tp
    for k, n, c, kind in gemms:
        if n > k and kind != "attn":  # an up projection: the activation function reads it
            e += p["act"] * c * (1.5 * n if m.gated_mlp else 2 * n) / tp
    e *= BF16_BYTES
    if is_moe:  # router scores and top-k, permute and un-permute the routed copies (costs/moe.py)
        e += router_bytes_per_token(m)
    return e


@memoised()  # a pure function of the shape; the search asks for the same shapes many times (memo.py)
def microbatch_compute(
    m: ModelSpec, mf: ModelFlops, gpu: GPUSpec, prof: Profile, *, recipe: Recipe, tokens: float,
    seq_len: int, tp: int, ep: int, etp: int | None = None, layers_on_stage: float, head_on_stage: bool, recompute_frac: float,
    selective: bool, flash: bool = True, fused: bool = False, compiled_loss: bool = False,
    te_attention: bool = False, family: str = "pytorch", moe_load: float = 1.0, lowp_experts: bool = True,
) -> MicrobatchCompute:
    """`tokens` = tokens of the micro-batch on this GPU (micro_batch * seq_len / cp).

    `recompute_frac`: share of the stage's layers fully checkpointed; with `selective` the other
    layers run the selective policy. What a checkpointed layer re-runs depends on the framework
    `family` (flops.layer_recompute, flops.py steps 9-12): each re-run GEMM is charged at its own
    shape's rate, the attention core at its kernel's forward rate.
    `fused`: element-wise ops run as fused kernels (torch.compile or a TE-based framework).
    `te_attention`: Transformer Engine's attention (cuDNN / FA3-class) rather than PyTorch SDPA (FA2).
    `moe_load`: the busiest rank runs this many times the balanced routed rows through its experts
    (costs/moe.routed_load: imbalance under ep, capped or padded by a capacity factor); the step
    waits for it. It scales the expert GEMMs' times whichever way they are priced.
    `etp`: the expert tensor-parallel size (layout.expert_groups; None: tp). The routed-expert GEMMs
    split their matrices over etp instead of tp and run etp/tp of the micro-batch's routed rows
    (ExpertGroups.routed_share): the same FLOPs per rank, in other shapes.
    `lowp_experts`: a low-precision recipe runs the routed experts' GEMMs in it too (the stack's
    conventions.lowp_experts); else they run, and are priced, in the compute dtype, uncast.
    """
    etp = tp if etp is None else etp
    policies = [(p, share) for p, share in (("full", recompute_frac),
                                             ("selective", (1.0 - recompute_frac) if selective else 0.0))
                if share > 0]
    native = te_attention or gpu.arch in NATIVE_ATTENTION_ARCHS
    mach = prof.machine_for(gpu.name)
    notes: set[str] = set()
    derived: set[str] = set()  # low-precision GEMMs priced from the compute dtype's rows x a cited ratio
    derived_error = 0.0
    scale = layers_on_stage / mf.num_layers
    head_rate = gemm_rate(recipe.compute_matmul_ceiling(gpu), gpu, prof)
    rate = gemm_rate(recipe.matmul_ceiling(gpu), gpu, prof)
    d = prof.d_half
    lp = recipe.low_precision
    if lp is not None:
        cast_k, cast_n = lp.cast_bytes_fused if fused else lp.cast_bytes_eager
    head_dim = m.head_dim if m.mla is None else m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim
    gemm_fwd = gemm_bwd = attn_fwd = attn_bwd = ng_fwd_bytes = cast_bytes = flops_fwd = 0.0
    rec_time = rec_flops = rec_ng_bytes = 0.0  # recompute: seconds (GEMM + attention), FLOPs, HBM bytes
    for kind in mf.layers:
        count = kind.count * scale
        is_moe = any(g[3] == "expert" for g in kind.gemms)
        rec = [(share, layer_recompute(kind, p, family)) for p, share in policies]
        for i, (k, n, c, what) in enumerate(kind.gemms):
            row = n == m.hidden_size  # row-parallel (output to the residual stream): K is split
            split = etp if what == "expert" else tp
            kk, nn = (k / split, n) if row else (k, n / split)
            # rows this rank runs through the GEMM; an expert's: balanced routing over the ep ranks
            rows = tokens * c * (etp / tp if what == "expert" else 1.0)
            mm = rows * ep / m.moe.num_experts if what == "expert" else tokens
            f = 2.0 * tokens * c * k * n / tp
            lowp = lp is not None and (what != "expert" or lowp_experts)
            passes = _gemm_passes(mach, recipe.gemm_dtype if lowp else recipe.compute_dtype, f, mm, kk, nn,
                                  what == "expert", m.moe.num_experts / ep if what == "expert" else 1, prof,
                                  recipe.compute_dtype, recipe.matmul_ceiling(gpu))
            if passes is None:
                eff = shape_eff(mm, kk, nn, d) * (prof.moe_gemm_eff if what == "expert" else 1.0)
                g_rate = rate if lowp or lp is None else head_rate  # uncast experts: the compute dtype's
                passes = measured.PassTimes(f / (g_rate * eff), 2 * f / (g_rate * eff))
            if what == "expert" and moe_load != 1.0:
                passes = replace(passes, fwd=passes.fwd * moe_load, bwd=passes.bwd * moe_load)
            notes.update(passes.notes)
            derived.update(passes.derived)
            derived_error = max(derived_error, passes.derived_error)
            gemm_fwd += count * passes.fwd
            gemm_bwd += count * passes.bwd
            flops_fwd += count * f
            for share, r in rec:
                rec_time += share * r.gemms[i] * count * passes.fwd
                rec_flops += share * r.gemms[i] * count * f
            if lowp:  # quantisation terms (module docstring); weights once per micro-batch
                n_w = m.moe.num_experts / ep if what == "expert" else c  # weight matrices held here
                cast_bytes += count * (n_w * kk * nn * lp.weight_cast_bytes + rows * (kk * cast_k + nn * cast_n))
        kpq = kind.keys_per_query(seq_len)
        af = count * tokens * kind.attn_pair_flops * kpq / tp
        seqs = tokens / seq_len  # sequences (of this GPU's share of a sequence) in the micro-batch
        if af > 0:  # an MLP-only block (NO_MIXER) attends to nothing: no kernel, no rate to ask for
            rates = measured.attention_rates(
                mach, te_attention, 1.0 if native else FA2_ON_NEWER, min(seq_len, 2 * kpq),
                m.num_heads / tp * seqs, max(1.0, m.num_kv_heads / tp) * seqs, head_dim, prof.machine_compute)
            if rates is None:
                a_rate = gpu.peak(recipe.compute_dtype) * attention_eff(kpq, head_dim, prof, native)
                a_bwd_rate = a_rate * FA_BWD_RATE_RATIO
            else:
                a_rate, a_bwd_rate, a_notes = rates
                notes.update(a_notes)
        else:
            a_rate = a_bwd_rate = math.inf
        attn_fwd += af / a_rate
        attn_bwd += FA_BWD_FLOP_RATIO * af / a_bwd_rate
        flops_fwd += af
        layer_ng = count * tokens * _layer_nongemm_bytes(m, kind.gemms, is_moe, fused, tp)
        scores = 0.0
        if not flash:  # materialised scores: the full s x s is written, soft-maxed (read + write), read
            heads = m.num_heads / tp
            scores = count * tokens * heads * kind.keys_per_query(seq_len, causal=False) * 4 * BF16_BYTES
        ng_fwd_bytes += layer_ng + scores
        for share, r in rec:
            rec_time += share * r.attention * af / a_rate
            rec_flops += share * r.attention * af
            # the materialised softmax belongs to the attention core (what Megatron's selective re-runs)
            rec_ng_bytes += share * (r.nongemm * layer_ng + max(r.nongemm, r.attention) * scores)
    layers_ng_fwd = ng_fwd_bytes
    loss_bytes = 0.0
    if head_on_stage:
        f = tokens * mf.head_per_token / tp
        nv = m.vocab_size / tp
        passes = _gemm_passes(mach, recipe.compute_dtype, f, tokens, m.hidden_size, nv, False, 1, prof,
                              recipe.compute_dtype, recipe.compute_matmul_ceiling(gpu))
        if passes is None:
            fwd_t = f / (head_rate * shape_eff(tokens, m.hidden_size, nv, d))
            passes = measured.PassTimes(fwd_t, 2 * fwd_t)
        notes.update(passes.notes)
        gemm_fwd += passes.fwd
        gemm_bwd += passes.bwd
        flops_fwd += f
        # fp32 logits written, soft-max read + written, gradient written (4 passes); a compiled
        # loss upcasts inside one kernel: bf16 logits read once, gradient written (2 bf16 passes)
        loss_bytes = tokens * m.vocab_size / tp * (2 * BF16_BYTES if compiled_loss else 4 * FP32_BYTES)
    bw = measured.elementwise_bandwidth(mach, "default", prof.machine_hbm) or gpu.hbm_bandwidth * prof.hbm_eff
    loss_bw = measured.elementwise_bandwidth(mach, "cross_entropy", prof.machine_hbm) or bw
    ng_layers_fwd = layers_ng_fwd / bw
    # forward bytes x (1 + BWD_BYTES_RATIO); fp8 cast bytes are already forward + backward
    nongemm = (ng_layers_fwd * (1 + BWD_BYTES_RATIO)) + loss_bytes / loss_bw + cast_bytes / bw
    ng_fwd = ng_layers_fwd + loss_bytes / loss_bw / 2
    recompute = rec_time + rec_ng_bytes / bw  # the LM head is never re-run
    return MicrobatchCompute(
        gemm=gemm_fwd + gemm_bwd, attention=attn_fwd + attn_bwd, nongemm=nongemm, recompute=recompute,
        forward=gemm_fwd + attn_fwd + ng_fwd, model_flops=3 * flops_fwd,
        hardware_flops=3 * flops_fwd + rec_flops, outside=tuple(sorted(notes)),
        derived=tuple(sorted(derived)), derived_error=derived_error,
    )


def _gemm_passes(mach, dtype: str, f: float, mm: float, kk: float, nn: float, expert: bool, experts: float,
                 prof: Profile, base: str, ceiling: float) -> measured.PassTimes | None:
    """The machine profile's times of one GEMM's three passes (None: no table, the formula applies).
    `dtype`'s own rows first; else the `base` (compute dtype) rows x the profile's dtype:base ratio,
    capped at `ceiling` FLOP/s (costs/measured.py)."""
    own = _table_passes(mach, dtype, f, mm, kk, nn, expert, experts, prof, None)
    if own is not None:
        return own
    ratio = measured.ratio_for(mach, dtype, base, ceiling)
    return None if ratio is None else _table_passes(mach, base, f, mm, kk, nn, expert, experts, prof, ratio)


def _table_passes(mach, dtype: str, f: float, mm: float, kk: float, nn: float, expert: bool, experts: float,
                  prof: Profile, ratio: measured.Ratio | None) -> measured.PassTimes | None:
    """A routed-expert GEMM reads the grouped-GEMM tables, else the dense table at moe_gemm_eff."""
    r = prof.machine_compute
    if expert:
        g = measured.grouped_gemm(mach, dtype, f, experts, mm, kk, nn, r, ratio)
        if g is not None:
            return g
        r *= prof.moe_gemm_eff
    return measured.dense_gemm(mach, dtype, f, mm, kk, nn, r, ratio)
