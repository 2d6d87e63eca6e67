"""Compute time of one micro-batch on the slowest pipeline stage: GEMMs, attention, non-GEMM work.

Rates:
  * GEMMs run at peak(dtype) x matmul_ceiling(dtype) (the measured best-shape rate, "MAMF",
    HARDWARE_FACTS.md 1.2) x profile.gemm_eff x shape_eff(M, K, N), where
    shape_eff = 1 / (1 + d_half/M + d_half/K + d_half/N): a saturating function of the GEMM
    dimensions (a dimension much larger than d_half costs nothing; one of size d_half halves the
    rate), because small GEMMs fill fewer SMs and waves and are bound by memory traffic.
    Linear layers run in the recipe's GEMM dtype; the LM head and attention stay in bf16 (as
    torchao and Transformer Engine leave them).
  * Attention core (flash attention): bf16 peak x profile.attn_eff.
  * Non-GEMM work (norms, residual adds, RoPE, activation functions, MoE permutation, loss, fp8
    casts) is memory-bound: bytes moved / HBM bandwidth x profile.nongemm.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainplan.calibration.profile import Profile
from trainplan.costs.flops import ModelFlops, keys_per_query
from trainplan.hardware.types import GPUSpec
from trainplan.models.spec import ModelSpec

BF16_BYTES = 2
FP32_BYTES = 4


@dataclass(frozen=True, slots=True)
class MicrobatchCompute:
    """Seconds of one micro-batch (forward + backward) on the slowest stage, by kind of work."""

    gemm: float  # linear layers and LM head, forward + backward
    attention: float  # attention core, forward + backward
    nongemm: float  # element-wise work, forward + backward
    recompute: float  # forward work re-run for activation checkpointing
    forward: float  # forward part of gemm + attention + nongemm (the window for forward comm)
    model_flops: float  # FLOPs of this micro-batch on this GPU, no recompute
    hardware_flops: float  # with recompute

    @property
    def total(self) -> float:
        return self.gemm + self.attention + self.nongemm + self.recompute


def shape_eff(m: float, k: float, n: float, d_half: float) -> float:
    return 1.0 / (1.0 + d_half / max(m, 1.0) + d_half / max(k, 1.0) + d_half / max(n, 1.0))


def gemm_rate(gpu: GPUSpec, dtype: str, prof: Profile) -> float:
    """Achieved large-GEMM rate (FLOP/s) before the shape factor."""
    key = {"mxfp8": "fp8", "nvfp4": "fp8", "fp4": "fp8"}.get(dtype, dtype)
    ceiling = gpu.matmul_ceiling.get(key, gpu.matmul_ceiling.get("bf16", 0.75))
    rate = gpu.peak(dtype) * ceiling * prof.gemm_eff * prof.arch_gemm_eff.get(gpu.arch, 1.0)
    return rate * (prof.fp8_gemm_eff if dtype not in ("bf16", "fp16") else 1.0)


def _layer_nongemm_elems(m: ModelSpec, gemms, is_moe: bool) -> float:
    """Elements read + written per token by one layer's element-wise ops, forward."""
    h = m.hidden_size
    e = 4 * h + 6 * h + 2 * (m.q_dim + 2 * m.kv_dim)  # 2 norms, 2 residual adds, RoPE on q and k
    for k, n, c, kind in gemms:
        if n > k and kind != "attn":  # an up projection: the activation function reads it
            e += c * 1.5 * n if m.gated_mlp else c * 2 * n
    if is_moe:
        e += 4 * m.moe.experts_per_token * h  # permute and un-permute the routed copies
    return e


def microbatch_compute(
    m: ModelSpec, mf: ModelFlops, gpu: GPUSpec, prof: Profile, *, gemm_dtype: str, tokens: float,
    seq_len: int, tp: int, ep: int, layers_on_stage: float, head_on_stage: bool, recompute_frac: float,
    selective: bool, fp8: bool, flash: bool = True,
) -> MicrobatchCompute:
    """`tokens` = tokens of the micro-batch on this GPU (micro_batch * seq_len / cp)."""
    scale = layers_on_stage / mf.num_layers
    bf16 = gemm_rate(gpu, "bf16", prof)
    rate = gemm_rate(gpu, gemm_dtype, prof)
    d = prof.d_half
    gemm_fwd = attn_fwd = ng_fwd_bytes = flops_fwd = 0.0
    for kind in mf.layers:
        count = kind.count * scale
        is_moe = any(g[3] == "expert" for g in kind.gemms)
        for k, n, c, what in kind.gemms:
            row = n == m.hidden_size  # row-parallel (output to the residual stream): K is split
            kk, nn = (k / tp, n) if row else (k, n / tp)
            if what == "expert":
                mm = tokens * c * ep / m.moe.num_experts  # tokens per local expert, balanced routing
                f = 2.0 * tokens * c * k * n / tp
            else:
                mm = tokens
                f = 2.0 * tokens * c * k * n / tp
            gemm_fwd += count * f / (rate * shape_eff(mm, kk, nn, d))
            flops_fwd += count * f
            if fp8:  # cast the weight to fp8 (and its transpose for backward): read 2 B, write 2 x 1 B
                # per weight and micro-batch; activation casts are fused into the producing
                # kernels (Transformer Engine norms, torch.compile) and not counted
                ng_fwd_bytes += count * c * kk * nn * 4 / 3
        af = count * tokens * kind.attn_pair_flops * keys_per_query(seq_len, kind.window) / tp
        attn_fwd += af / (gpu.peak("bf16") * prof.attn_eff)
        flops_fwd += af
        ng_fwd_bytes += count * tokens * _layer_nongemm_elems(m, kind.gemms, is_moe) * BF16_BYTES / tp
        if not flash:  # materialised scores: the full s x s is written, soft-maxed (read + write), read
            heads = m.num_heads / tp
            ng_fwd_bytes += count * tokens * heads * keys_per_query(seq_len, kind.window, causal=False) * 4 * BF16_BYTES
    layers_fwd = gemm_fwd + attn_fwd  # for recompute (the head is never recomputed)
    layers_flops_fwd = flops_fwd
    if head_on_stage:
        f = tokens * mf.head_per_token / tp
        gemm_fwd += f / (bf16 * shape_eff(tokens, m.hidden_size, m.vocab_size / tp, d))
        flops_fwd += f
        # logits written, soft-max read/written, gradient written, in fp32 (unfused loss)
        ng_fwd_bytes += tokens * m.vocab_size / tp * FP32_BYTES * 4 / 3
    ng_fwd = ng_fwd_bytes / gpu.hbm_bandwidth * prof.nongemm
    recompute = recompute_frac * (layers_fwd + ng_fwd)
    if selective and recompute_frac < 1.0:
        recompute += (1.0 - recompute_frac) * attn_fwd  # Megatron: attention core re-run
    rec_flops = recompute_frac * layers_flops_fwd
    return MicrobatchCompute(
        gemm=3 * gemm_fwd, attention=3 * attn_fwd, nongemm=3 * ng_fwd, recompute=recompute,
        forward=gemm_fwd + attn_fwd + ng_fwd, model_flops=3 * flops_fwd,
        hardware_flops=3 * flops_fwd + rec_flops,
    )
