"""Pareto set and the priority registry, on synthetic candidates."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainplan.errors import TrainplanError
from trainplan.hardware import Cluster, find_node
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.models import resolve
from trainplan.search import OBJECTIVES, Candidate, Metrics, objective
from trainplan.search.pareto import _axes, _dominates, pareto_front

M = resolve("llama-3.1-8b")
NODE = find_node("ml.p6-b200.48xlarge")


def cand(tps, mem=100e9, inter=0.0, nodes=1, seq=8192, mb=1, total=None):
    job = Job(M, Cluster(NODE, nodes), Workload(seq, 8 * nodes))
    m = Metrics(tokens_per_s=tps, step_time_s=1.0, memory_bytes=mem, memory_high_bytes=mem,
                capacity_bytes=NODE.gpu.memory_bytes, inter_node_bytes_per_token=inter,
                gpu_bytes_per_token=inter if total is None else total, mfu=0.4, binding="compute")
    return Candidate(job, Layout(micro_batch=mb, dp_shard=8 * nodes), m)


triples = st.lists(st.tuples(st.integers(1, 5), st.integers(1, 5), st.integers(0, 5)), min_size=1, max_size=25)


@given(triples)
def test_front_is_exactly_the_non_dominated_set(points):
    cs = [cand(t * 1000.0, mem=m * 1e10, inter=float(i)) for t, m, i in points]
    front = pareto_front(cs)
    fa = {_axes(c) for c in front}
    for c in cs:
        dominated = any(_dominates(_axes(o), _axes(c)) for o in cs)
        assert (_axes(c) in fa) == (not dominated)
    assert len(fa) == len(front)  # no duplicates


def test_throughput_ties_go_to_less_communication():
    a, b = cand(1000, inter=5), cand(1000, inter=1)
    assert objective("throughput").rank([a, b], 0, 0.05)[0] is b


def test_communication_takes_fewest_network_bytes_within_tolerance_on_the_same_nodes():
    fast = cand(10_000, inter=100, nodes=2)
    one_fast = cand(5_000, inter=0, total=50, nodes=1)
    one_near = cand(4_800, inter=0, total=10, nodes=1)  # within 5% of the best on 1 node
    one_slow = cand(4_000, inter=0, total=0, nodes=1)  # outside
    ranked = objective("communication").rank([fast, one_slow, one_fast, one_near], 0, 0.05)
    assert ranked[:3] == [one_near, one_fast, fast]
    two_quiet = cand(9_900, inter=50, nodes=2)
    assert objective("communication").rank([fast, two_quiet], 0, 0.05)[0] is two_quiet


def test_context_prefers_the_longer_sequence():
    short, long_ = cand(9000, seq=8192), cand(1000, seq=65536)
    assert objective("context").rank([short, long_], 0, 0.05)[0] is long_


def test_cost_ranks_by_dollars_per_token():
    one, two = cand(1000, nodes=1), cand(1900, nodes=2)  # two nodes: 2x price, 1.9x throughput
    assert objective("cost").rank([two, one], 10**12, 0.05)[0] is one
    assert objective("time").rank([one, two], 10**12, 0.05)[0] is two


def test_unknown_priority_lists_the_known_ones():
    with pytest.raises(TrainplanError) as e:
        objective("speed")
    assert str(e.value) == f"unknown priority 'speed': known: {', '.join(sorted(OBJECTIVES))}."
    assert OBJECTIVES and all(objective(name) is o and o.name == name for name, o in OBJECTIVES.items())
