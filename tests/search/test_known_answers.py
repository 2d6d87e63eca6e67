"""Checks with known answers (issue 5), on trainplan's own cost model."""

from trainplan.hardware import find_node
from trainplan.models import resolve
from trainplan.search import Query, model_evaluator, search
from trainplan.search.engine import run_search

P6 = (find_node("ml.p6-b200.48xlarge"),)
P5 = (find_node("ml.p5.48xlarge"),)  # 8x H100 80 GB
P4D = (find_node("ml.p4d.24xlarge"),)


def test_llama_8b_fits_one_h100_node_with_fsdp_and_no_tp():
    pool, _, _ = run_search(Query(resolve("llama-3.1-8b"), P5, nodes=1), model_evaluator())
    assert any(c.layout.tp == 1 and c.layout.sharding == "fsdp" and c.layout.dp_shard == 8 for c in pool)


def test_llama_70b_bf16_adamw_fits_one_p6_b200_node():
    r = search(Query(resolve("llama-3.1-70b"), P6, nodes=1, precision="bf16"))
    assert r.chosen.nodes == 1 and r.chosen.layout.precision == "bf16"
    assert r.chosen.metrics.memory_high_bytes <= r.chosen.metrics.capacity_bytes


def test_llama_405b_needs_several_p6_b200_nodes():
    r = search(Query(resolve("llama-3.1-405b"), P6))
    assert r.chosen.nodes > 1
    assert ("ml.p6-b200.48xlarge", 1) in r.stats.no_fit_counts


def test_fp8_is_never_chosen_on_a100():
    r = search(Query(resolve("llama-3.1-8b"), P4D, nodes=1))
    assert {c.layout.precision for c in (r.chosen, *r.runners_up, *r.pareto)} == {"bf16"}


def test_context_reaches_a_longer_sequence_than_throughput():
    m = resolve("llama-3.1-8b")
    t = search(Query(m, P6, nodes=1))
    c = search(Query(m, P6, nodes=1, seq_len=None, priority="context"))
    assert c.chosen.seq_len > t.chosen.seq_len
    assert c.chosen.layout.cp > 1 or c.chosen.layout.ac in ("full", "offload")


def test_communication_keeps_tp_in_a_node_and_no_more_nodes_than_needed():
    m = resolve("llama-3.1-70b")
    # the fewest nodes that fit: throughput's search starts there (it may go on to more)
    fewest = max((n for _, n in search(Query(m, P5)).stats.no_fit_counts), default=0) + 1
    r = search(Query(m, P5, max_nodes=8, priority="communication"))
    assert r.chosen.layout.tp <= 8
    assert r.chosen.nodes == fewest
