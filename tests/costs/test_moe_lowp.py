"""Which GEMMs a low-precision recipe runs in low precision for the routed experts (stacks.toml
conventions.lowp_experts): Megatron-Core's TE GroupedLinear runs them in fp8 with the block; the
trainer's GroupedExperts (torch._grouped_mm) and torchtitan's default converters leave them in bf16.
The step time and the fp8 weight copies follow the stack."""

from dataclasses import replace

import pytest

from trainplan import layout as layout_mod
from trainplan.costs.compute import microbatch_compute
from trainplan.costs.flops import model_flops
from trainplan.costs.memory import memory_breakdown
from trainplan.costs.states import stage_params
from trainplan.hardware import Cluster, find_gpu, find_node
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.models import resolve
from trainplan.precision import recipe
from trainplan.profile import Profile
from trainplan.stacks import stack

QWEN = resolve("qwen3-30b-a3b")  # 48 MoE layers, 128 experts, no shared experts
LLAMA = resolve("llama-3.1-8b")
H100 = find_gpu("h100-sxm-80gb")
KW = {"tokens": 4096, "seq_len": 4096, "tp": 1, "ep": 8, "layers_on_stage": 48, "head_on_stage": True,
      "recompute_frac": 0.0, "selective": False}


def test_the_stacks_say_where_the_experts_run_in_fp8():
    assert {n: stack(n).conventions.lowp_experts for n in ("trainplan", "torchtitan", "megatron", "nemo",
                                                            "megatron_bridge")} == \
        {"trainplan": False, "torchtitan": False, "megatron": True, "nemo": True, "megatron_bridge": True}


def test_uncast_experts_run_at_the_compute_dtypes_rate_and_the_rest_in_fp8():
    mf, prof = model_flops(QWEN), Profile()
    fp8, bf16 = recipe("fp8_tensorwise"), recipe("bf16")
    cast = microbatch_compute(QWEN, mf, H100, prof, recipe=fp8, **KW)
    uncast = microbatch_compute(QWEN, mf, H100, prof, recipe=fp8, lowp_experts=False, **KW)
    whole_bf16 = microbatch_compute(QWEN, mf, H100, prof, recipe=bf16, **KW)
    # uncast - cast is what the experts lose (their fp8 -> bf16), bf16 - uncast what the rest does;
    # Qwen3-30B's active expert weights (8 x 3 x 2048 x 768) are twice its attention's: the larger
    assert cast.gemm < uncast.gemm < whole_bf16.gemm
    assert uncast.gemm - cast.gemm > whole_bf16.gemm - uncast.gemm
    # and they are not quantised: fewer cast bytes than when they are
    assert uncast.nongemm < cast.nongemm
    assert uncast.model_flops == cast.model_flops
    # a dense model has no experts: nothing changes
    d = model_flops(LLAMA)
    kw = {**KW, "ep": 1, "layers_on_stage": 32}
    assert microbatch_compute(LLAMA, d, H100, prof, recipe=fp8, lowp_experts=False, **kw).gemm == \
        microbatch_compute(LLAMA, d, H100, prof, recipe=fp8, **kw).gemm


def test_uncast_experts_have_no_fp8_weight_copies(monkeypatch):
    with_experts = stage_params(QWEN, 1, 8, 1)[0]
    without = stage_params(QWEN, 1, 8, 1, lowp_experts=False)[0]
    assert with_experts.fp8_linear - without.fp8_linear == pytest.approx(with_experts.experts)
    assert without.experts == with_experts.experts  # the weights are still held, only not cast
    # the memory model reads the stack's convention: trainplan's (false) against the same stack told true
    job = Job(QWEN, Cluster(find_node("ml.p5.48xlarge"), 1), Workload(4096, 8))
    L = Layout(ep=8, dp_shard=8, precision="fp8_tensorwise", sharding="zero2").with_stack("trainplan")
    uncast = memory_breakdown(job, L)
    real = layout_mod.stack_conventions  # what Layout.conventions resolves through
    monkeypatch.setattr(layout_mod, "stack_conventions", lambda lay: replace(real(lay), lowp_experts=True))
    cast = memory_breakdown(job, L.with_())  # a new layout resolves its conventions again
    assert uncast.fp8_weights < cast.fp8_weights
    assert uncast.params == cast.params and uncast.optimizer_states == cast.optimizer_states
