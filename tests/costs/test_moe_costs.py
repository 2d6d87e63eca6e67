"""costs/moe.py: the dispatcher's bytes per moe_dispatcher and moe_imbalance, the router's
element-wise bytes, and the busiest expert-parallel rank setting the expert GEMM time."""

import pytest

from trainplan.costs.moe import (
    dispatch_exchanges,
    reached_nodes,
    routed_load,
    router_bytes_per_token,
)
from trainplan.costs.steptime import step_time
from trainplan.hardware import Cluster, find_node
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.models import resolve
from trainplan.profile import default_profile

QWEN = resolve("qwen3-30b-a3b")  # 128 experts, top-8, hidden 2048


def test_alltoall_bytes_are_the_routed_copies_times_the_imbalance():
    (x,) = dispatch_exchanges(QWEN, "alltoall", 1.0, 4096, 8, moe_layers=48, passes=3, hidden_overlap=0.5)
    assert (x.op, x.nbytes, x.calls, x.hidden) == ("all_to_all", 4096 * 8 * 2048 * 2, 2 * 48 * 3, 0.0)
    (y,) = dispatch_exchanges(QWEN, "alltoall", 1.5, 4096, 8, 48, 3, 0.5)
    assert y.nbytes == pytest.approx(1.5 * x.nbytes)
    (d,) = dispatch_exchanges(QWEN, "deepep", 1.0, 4096, 8, 48, 3, 0.5)
    assert d.nbytes == x.nbytes and d.hidden == 0.5  # DeepEP inside a node: same bytes, overlapped


def test_deepep_across_nodes_sends_a_token_once_per_node_then_forwards_over_nvlink():
    # ep = 32 on 4 nodes of 8: the rail all-to-all (one GPU per node, stride 8) carries T x D copies,
    # D = 4 (1 - (3/4)^8) expected distinct nodes of a token's 8 experts; NVLink carries the 8 copies.
    rail, fwd = dispatch_exchanges(QWEN, "deepep", 1.0, 4096, 32, 48, 3, 0.5, ep_nodes=4, per_node=8)
    d = 4 * (1 - (3 / 4) ** 8)
    assert (rail.ranks, rail.stride, fwd.ranks, fwd.stride) == (4, 8, 8, 1)
    assert rail.nbytes == pytest.approx(4096 * d * 2048 * 2)
    assert fwd.nbytes == 4096 * 8 * 2048 * 2
    assert rail.calls == fwd.calls == 2 * 48 * 3 and rail.hidden == fwd.hidden == 0.5


def test_node_limited_routing_caps_the_nodes_a_token_reaches():
    ds = resolve("deepseek-v3")  # n_group 8, topk_group 4: "at most 4 nodes" (arXiv:2412.19437 3.2.2)
    assert (ds.moe.num_groups, ds.moe.topk_groups) == (8, 4)
    assert reached_nodes(ds, 8) == pytest.approx(4 * (1 - (3 / 4) ** 8))
    assert reached_nodes(QWEN, 8) == pytest.approx(8 * (1 - (7 / 8) ** 8))  # no groups: uniform over 8
    assert reached_nodes(QWEN, 1) == 1.0


def test_deepep_moves_fewer_bytes_over_the_network_than_alltoall_across_nodes():
    job = Job(QWEN, Cluster(find_node("ml.p6-b200.48xlarge"), 4), Workload(4096, 64))
    base = Layout(dp_shard=32, ep=32, micro_batch=1, grad_accum=2)
    prof = default_profile()

    def net(dispatcher):
        r = step_time(job, base.with_stack("megatron", moe_dispatcher=dispatcher), prof)
        return sum(e.network_bytes for e in r.comm if e.dimension == "ep")

    tokens = 4096 * 8 * 2048 * 2  # the alltoall's S: T x k copies
    calls = 2 * 48 * 2 * 2  # dispatch + combine, layers, fwd + bwd, micro-batches
    assert net("alltoall") == pytest.approx(tokens * 24 / 32 * calls)  # (n - g)/n of S leaves the node
    assert net("deepep") == pytest.approx(4096 * reached_nodes(QWEN, 4) * 2048 * 2 * 3 / 4 * calls)


def test_batch_level_ep_overlap_hides_the_all_to_alls_behind_other_micro_batches():
    job = Job(QWEN, Cluster(find_node("ml.p6-b200.48xlarge"), 4), Workload(4096, 64))
    prof = default_profile()

    def ep(ga, overlap):
        L = Layout(dp_shard=32, ep=32, micro_batch=1, grad_accum=ga).with_stack("megatron", moe_dispatcher="alltoall",
                                                                                ep_comm_overlap=overlap)
        return step_time(job, L, prof).time.ep

    assert ep(2, True) < ep(2, False)
    assert ep(1, True) == ep(1, False)  # one micro-batch: no other micro-batch to hide behind


def test_allgather_moves_the_whole_group_whatever_the_routing():
    ag, rs = dispatch_exchanges(QWEN, "allgather", 1.5, 4096, 8, 48, 3, 0.0)
    assert (ag.op, rs.op) == ("all_gather", "reduce_scatter")
    assert ag.nbytes == rs.nbytes == 4096 * 8 * 2048 * 2  # T * ep * h bf16, not the imbalance


def test_router_bytes_grow_with_the_experts():
    ds = resolve("deepseek-v3")  # 256 experts, top-8
    assert router_bytes_per_token(ds) - 4 * 8 * ds.hidden_size * 2 == 4 * 256 * 4


def test_imbalance_slows_the_step_through_experts_and_dispatch():
    job = Job(QWEN, Cluster(find_node("ml.p5.48xlarge"), 1), Workload(4096, 8))
    base = Layout(dp_shard=8, ep=8, micro_batch=1)
    prof = default_profile()
    even = step_time(job, base, prof)
    busy = step_time(job, base.with_stack("trainplan", moe_imbalance=1.3), prof)
    a2a = [sum(e.bytes for e in r.comm if e.dimension == "ep") for r in (even, busy)]
    assert a2a[1] == pytest.approx(1.3 * a2a[0])
    assert busy.microbatch.gemm > even.microbatch.gemm and busy.time.total > even.time.total
    # without ep every rank holds every expert: nothing to be uneven about
    no_ep = Layout(dp_shard=8, micro_batch=1)
    assert step_time(job, no_ep.with_stack("trainplan", moe_imbalance=1.3), prof).time.total == \
        step_time(job, no_ep, prof).time.total


# ---- capacity factor (costs/moe.routed_load) ---------------------------------------------------

@pytest.mark.parametrize("imbalance,capacity,pad,ep,load", [
    (1.3, None, False, 8, 1.3),   # dropless: the busiest rank's whole excess
    (1.3, None, False, 1, 1.0),   # no ep: every rank holds every expert
    (1.3, 1.1, False, 8, 1.1),    # capacity caps the busiest expert at c x its balanced share
    (1.05, 1.25, False, 8, 1.05),  # a cap above the imbalance changes nothing
    (1.0, 0.5, False, 8, 0.5),    # c < 1 drops even balanced rows
    (1.0, 0.5, False, 1, 0.5),
    (1.0, 1.25, True, 8, 1.25),   # Megatron's pad_to_capacity: exactly c x balanced
    (1.3, 0.8, True, 1, 0.8),
])
def test_routed_load_is_the_imbalance_capped_by_the_capacity_or_padded_to_it(imbalance, capacity, pad, ep, load):
    assert routed_load(imbalance, capacity, pad, ep) == pytest.approx(load)


def _ep8(instance="ml.p5.48xlarge"):
    return (Job(QWEN, Cluster(find_node(instance), 1), Workload(4096, 8)),
            Layout(dp_shard=8, ep=8, micro_batch=1).with_stack("megatron", moe_dispatcher="alltoall"))


def _ep_bytes(r):
    return sum(e.bytes for e in r.comm if e.dimension == "ep")


def test_a_capacity_factor_caps_what_the_imbalance_costs():
    job, base = _ep8()
    prof = default_profile()
    t = {name: step_time(job, base.with_stack("megatron", moe_dispatcher="alltoall", **kw), prof) for name, kw in {
        "even": {}, "busy": {"moe_imbalance": 1.3}, "capped": {"moe_imbalance": 1.3, "moe_capacity_factor": 1.1},
        "at_cap": {"moe_imbalance": 1.1}}.items()}
    assert _ep_bytes(t["capped"]) == pytest.approx(1.1 * _ep_bytes(t["even"]))
    assert t["capped"].microbatch.gemm == pytest.approx(t["at_cap"].microbatch.gemm)
    assert t["even"].microbatch.gemm < t["capped"].microbatch.gemm < t["busy"].microbatch.gemm
    assert t["capped"].time.total < t["busy"].time.total


def test_padding_to_capacity_costs_c_times_balanced_whatever_the_routing():
    job, base = _ep8()
    prof = default_profile()

    def run(**kw):
        return step_time(job, base.with_stack("megatron", moe_dispatcher="alltoall", **kw), prof)

    even, padded = run(), run(moe_capacity_factor=1.25, moe_pad_to_capacity=True)
    assert _ep_bytes(padded) == pytest.approx(1.25 * _ep_bytes(even))
    assert padded.microbatch.gemm == pytest.approx(run(moe_imbalance=1.25).microbatch.gemm)
    # unpadded, the same factor costs nothing under balanced routing: no expert reaches its cap
    assert run(moe_capacity_factor=1.25).time.total == pytest.approx(even.time.total)


def test_the_machine_profile_path_prices_the_busiest_rank_too():
    # B200 has grouped-GEMM tables (machine profile): the load scales those times as it does the formula's
    job, base = _ep8("ml.p6-b200.48xlarge")
    prof = default_profile()
    even = step_time(job, base, prof).microbatch.gemm
    busy = step_time(job, base.with_stack("megatron", moe_dispatcher="alltoall", moe_imbalance=1.3), prof)
    dropping = step_time(job, base.with_stack("megatron", moe_dispatcher="alltoall", moe_capacity_factor=0.5), prof)
    assert dropping.microbatch.gemm < even < busy.microbatch.gemm


def test_dispatched_copies_in_memory_follow_the_capacity():
    from trainplan.costs.memory import memory_breakdown

    job = Job(QWEN, Cluster(find_node("ml.p6-b200.48xlarge"), 1), Workload(4096, 8))
    base = Layout(dp_shard=8, ep=8, micro_batch=1)

    def dispatch(**kw):
        return memory_breakdown(job, base.with_stack("megatron", moe_dispatcher="alltoall", **kw)) \
            .activation_groups["moe_dispatch"]

    even = dispatch()
    assert even > 0
    assert dispatch(moe_capacity_factor=0.5) == pytest.approx(0.5 * even)  # dropped copies are not kept
    assert dispatch(moe_capacity_factor=1.25) == pytest.approx(even)  # balanced: nothing reaches the cap
    assert dispatch(moe_capacity_factor=1.25, moe_pad_to_capacity=True) == pytest.approx(1.25 * even)
