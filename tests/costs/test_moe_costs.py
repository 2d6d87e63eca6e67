"""costs/moe.py: the dispatcher's bytes per moe_dispatcher and moe_imbalance, the router's
element-wise bytes, and the busiest expert-parallel rank setting the expert GEMM time."""

import pytest

from trainplan.costs.moe import dispatch_exchanges, router_bytes_per_token
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
    assert d.nbytes == x.nbytes and d.hidden == 0.5  # DeepEP: same bytes, overlapped


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
