"""Compute model (costs/compute.py): rates never exceed their ceilings, and each physical term moves
the time the way its cause says (sequence, head dim, kernel generation, fusion, fp8 casts, MoE)."""

from dataclasses import replace

import pytest

from trainplan.costs.compute import (
    ATTN_KEYS_HALF,
    FA2_ON_NEWER,
    attention_eff,
    gemm_rate,
    microbatch_compute,
)
from trainplan.costs.flops import model_flops
from trainplan.hardware import find_gpu
from trainplan.models import resolve
from trainplan.precision import recipe, registry
from trainplan.profile import Profile

PRIOR = Profile()


def mb(model="llama-3.1-8b", gpu="h100-sxm-80gb", prof=PRIOR, precision="bf16", **kw):
    m = resolve(model)
    args = {"recipe": recipe(precision), "tokens": 8192, "seq_len": 8192, "tp": 1, "ep": 1,
            "layers_on_stage": m.num_layers, "head_on_stage": True, "recompute_frac": 0.0, "selective": False}
    args |= kw
    return microbatch_compute(m, model_flops(m), find_gpu(gpu), prof, **args)


@pytest.mark.parametrize("gpu", ["h100-sxm-80gb", "b200-180gb", "a100-sxm-80gb"])
def test_gemm_rate_never_exceeds_the_measured_matmul_ceiling(gpu):
    g = find_gpu(gpu)
    best = replace(PRIOR, gemm_eff=1.0)
    for r in registry().values():
        if r.runs_on(g):
            ceiling = g.peak(r.peak_key) * g.matmul_ceiling[r.ceiling_key]
            assert gemm_rate(r.matmul_ceiling(g), g, best) <= ceiling * (1 + 1e-12)


def test_attention_efficiency_saturates_with_keys_and_head_dim():
    # FlashAttention-2 (Dao 2023) fig. 4-5: half the long-sequence rate at ATTN_KEYS_HALF keys per query
    long = attention_eff(1e9, 1e9, PRIOR)
    assert long == pytest.approx(PRIOR.attn_eff, rel=1e-6)
    assert attention_eff(ATTN_KEYS_HALF, 1e9, PRIOR) == pytest.approx(PRIOR.attn_eff / 2, rel=1e-6)
    assert attention_eff(4096, 64, PRIOR) < attention_eff(4096, 128, PRIOR) < attention_eff(4096, 256, PRIOR)
    # FlashAttention-3 (Shah et al. 2024) abstract: FA2 35% vs FA3 75% utilisation on H100
    assert attention_eff(4096, 128, PRIOR, native=False) == pytest.approx(
        FA2_ON_NEWER * attention_eff(4096, 128, PRIOR))


def test_te_attention_helps_on_hopper_not_on_ampere():
    assert mb(te_attention=True).attention < mb().attention
    assert mb(gpu="a100-sxm-80gb", te_attention=True).attention == pytest.approx(mb(gpu="a100-sxm-80gb").attention)


def test_fused_elementwise_moves_fewer_bytes_than_eager():
    eager, fused = mb(), mb(fused=True)
    assert fused.nongemm < eager.nongemm and fused.gemm == eager.gemm


def test_compiled_loss_moves_fewer_bytes():
    assert mb(compiled_loss=True).nongemm < mb().nongemm


def test_fp8_is_bounded_and_pays_cast_bytes():
    bf16 = mb()
    fp8 = mb(precision="fp8_tensorwise")
    fp8_fused = mb(precision="fp8_tensorwise", fused=True)
    g = find_gpu("h100-sxm-80gb")
    ratio = g.peak("fp8") * g.matmul_ceiling["fp8"] / (g.peak("bf16") * g.matmul_ceiling["bf16"])
    assert fp8.gemm > bf16.gemm / ratio * 0.999  # the head stays bf16; linears at most the fp8 ceiling
    assert fp8.nongemm > bf16.nongemm  # casts, amax and transposes cost HBM traffic
    assert fp8_fused.nongemm < fp8.nongemm


def test_grouped_expert_gemms_run_at_moe_gemm_eff():
    fast, slow = mb("mixtral-8x7b", ep=8), mb("mixtral-8x7b", ep=8, prof=replace(PRIOR, moe_gemm_eff=0.5))
    assert slow.gemm > fast.gemm
    dense_fast, dense_slow = mb(), mb(prof=replace(PRIOR, moe_gemm_eff=0.5))
    assert dense_fast.gemm == dense_slow.gemm


def test_longer_sequence_raises_attention_share():
    short, long = mb(seq_len=2048), mb(seq_len=65536, tokens=65536)
    assert long.attention / long.total > short.attention / short.total
