"""Expert tensor parallelism (etp, layout.expert_groups): how many ranks share one expert's weights,
what that does to the expert states, the expert GEMMs and the expert exchange, and the stack's default
when a layout states none."""

import pytest

from trainplan.costs.compute import microbatch_compute
from trainplan.costs.flops import model_flops
from trainplan.costs.memory import memory_breakdown
from trainplan.costs.steptime import step_time
from trainplan.hardware import Cluster, find_gpu, find_node
from trainplan.job import Job, Workload
from trainplan.layout import Layout, expert_groups
from trainplan.models import resolve
from trainplan.models.params import count_params
from trainplan.precision import recipe
from trainplan.profile import Profile, default_profile

QWEN = resolve("qwen3-30b-a3b")  # 48 MoE layers, 128 experts, top-8, hidden 2048, no shared experts
P5 = find_node("ml.p5.48xlarge")  # 8 GPUs per NVLink domain


def job(nodes=2, gb=16):
    return Job(QWEN, Cluster(P5, nodes), Workload(4096, gb))


def layout(etp, ep=4, stack="megatron", settings=None, **kw):
    return Layout(tp=2, dp_shard=8, ep=ep, etp=etp, sequence_parallel=True, **kw).with_stack(stack, **(settings or {}))


def test_the_folding_gives_each_degree_and_stride():
    one, two = expert_groups(layout(1)), expert_groups(layout(2))
    # 16 ranks = etp x ep x edp_shard, etp innermost
    assert (one.weight_split, one.edp_shard, one.ep_stride, one.edp_stride, one.routed_share) == (4, 4, 1, 4, 0.5)
    assert (two.weight_split, two.edp_shard, two.ep_stride, two.edp_stride, two.routed_share) == (8, 2, 2, 8, 1.0)


@pytest.mark.parametrize("stack, ep, etp", [
    ("megatron", 4, 2),  # expert_tensor_parallel_size = tp when unset
    ("nemo", 4, 2),
    ("trainplan", 4, 2),  # the trainer splits experts over tp
    ("torchtitan", 4, 1),  # expert_tensor_parallel_degree = 1 ...
    ("torchtitan", 1, 2),  # ... which has no effect without ep: experts tensor-parallel over tp
])
def test_a_layout_without_etp_takes_its_stacks_default(stack, ep, etp):
    assert expert_groups(layout(None, ep=ep, stack=stack)).etp == etp


def test_whole_experts_hold_twice_the_weights_and_the_same_sharded_states():
    a, b = memory_breakdown(job(), layout(1, sharding="zero1")), memory_breakdown(job(), layout(2, sharding="zero1"))
    # Megatron's distributed optimizer keeps bf16 weights and gradients whole: etp=1 holds each
    # expert whole (1/4 of the layer's experts), etp=2 half of each of 1/4 (1/8)
    experts = count_params(QWEN).experts
    bf16 = recipe("bf16").param_bytes
    assert a.params - b.params == pytest.approx(experts * bf16 * (1 / 4 - 1 / 8))
    # the fp32 master and AdamW states are sharded over edp_shard, which grows by as much (4 vs 2)
    assert a.optimizer_states == pytest.approx(b.optimizer_states)
    assert a.master_params == pytest.approx(b.master_params)


def test_a_rank_keeps_the_routed_copies_it_runs():
    # Megatron with sequence parallel: etp=2 gathers the etp group's copies (T x k per rank), etp=1
    # runs its own T/tp x k; the expert intermediates are T x k x ffn / tp either way
    a, b = memory_breakdown(job(), layout(1)), memory_breakdown(job(), layout(2))
    h, k = QWEN.hidden_size, QWEN.moe.experts_per_token
    kept = 48 * 4096 * k * 2 * 2 * h  # layers x tokens x copies x (input + output) x bf16 x hidden
    assert b.activation_groups["moe_dispatch"] - a.activation_groups["moe_dispatch"] == pytest.approx(kept / 2)


def test_expert_gemms_split_over_etp_with_the_same_flops():
    kw = {"recipe": recipe("bf16"), "tokens": 4096, "seq_len": 4096, "tp": 2, "ep": 4, "layers_on_stage": 48,
          "head_on_stage": True, "recompute_frac": 0.0, "selective": False}
    gpu, mf, prof = find_gpu("h100-sxm-80gb"), model_flops(QWEN), Profile()
    whole = microbatch_compute(QWEN, mf, gpu, prof, etp=1, **kw)
    split = microbatch_compute(QWEN, mf, gpu, prof, etp=2, **kw)
    assert whole.model_flops == pytest.approx(split.model_flops)
    # etp=1: half the rows per expert through twice the width; the shapes, so the time, differ
    assert whole.gemm != pytest.approx(split.gemm, rel=1e-6)
    assert microbatch_compute(QWEN, mf, gpu, prof, **kw).gemm == split.gemm  # no etp: tp's split


def _ep(etp, stack="megatron", ep=4):
    return [e for e in step_time(job(), layout(etp, ep=ep, stack=stack, settings={"moe_dispatcher": "alltoall"}),
                                 default_profile()).comm if e.dimension == "ep"]


def test_routed_copies_are_gathered_over_etp_only_when_etp_is_above_one():
    assert {e.collective for e in _ep(1)} == {"all_to_all"}
    split = _ep(2)
    assert {e.collective for e in split} == {"all_to_all", "all_gather", "reduce_scatter"}
    a2a = next(e for e in split if e.collective == "all_to_all")
    ag = next(e for e in split if e.collective == "all_gather")
    # once per pass each (dispatch and combine: two all-to-alls), over 2 ranks: the gathered S is
    # etp x a rank's routed copies, of which (n - 1)/n = 1/2 is sent; the all-to-all sends 3/4 of S
    assert ag.count * 2 == a2a.count
    assert ag.bytes / ag.count == pytest.approx((a2a.bytes / a2a.count) / (3 / 4) * 2 / 2)


def test_the_ep_group_strides_over_etp_and_leaves_the_node():
    # ep=8 over etp=2: ranks 0, 2, ..., 14 span two 8-GPU nodes; over etp=1 they are one node
    assert sum(e.network_bytes for e in _ep(2, ep=8) if e.collective == "all_to_all") > 0
    assert sum(e.network_bytes for e in _ep(1, ep=8)) == 0


def test_dtensor_stacks_gather_the_block_input_instead():
    # torchtitan with etp = tp: the MoE block's input is made whole over tp (the tp term), so each
    # tp rank dispatches every token (2x Megatron's sequence-split copies) and nothing is gathered
    tt, mg = _ep(2, stack="torchtitan"), _ep(2)
    assert {e.collective for e in tt} == {"all_to_all"}
    a2a = next(e.bytes for e in mg if e.collective == "all_to_all")
    assert tt[0].bytes == pytest.approx(2 * a2a)


def test_moe_layers_drop_the_mlp_collective_of_the_tp_term_when_tokens_stay_split():
    def tp_calls(etp, stack="megatron"):
        r = step_time(job(), layout(etp, stack=stack), default_profile())
        return next(e.count for e in r.comm if e.dimension == "tp" and e.collective == "all_gather")

    passes = 2  # forward + backward, no recompute; one micro-batch
    assert tp_calls(2) == tp_calls(1) == 48 * passes  # attention only: every layer is MoE
    assert tp_calls(2, "torchtitan") == 2 * 48 * passes  # the block's input gathered like a dense MLP
