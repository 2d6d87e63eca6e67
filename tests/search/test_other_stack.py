"""Another stack named first among a plan's reasons when it is more than 10% better on the
priority's metric (search/other_stack.py)."""

from dataclasses import replace

import pytest

from trainplan.hardware import cluster
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.models import resolve
from trainplan.search import Counting, model_evaluator
from trainplan.search.candidate import Candidate
from trainplan.search.objectives import OBJECTIVES
from trainplan.search.other_stack import MATERIAL, METRICS, advantage, other_stack_reason


def _cand(layout, tokens_per_s=None, nodes=1, model="llama-3.1-8b"):
    job = Job(resolve(model), cluster("ml.p6-b200.48xlarge", nodes), Workload(8192, layout.dp))
    c = Candidate(job, layout, Counting(model_evaluator()).evaluate(job, layout))
    return c if tokens_per_s is None else replace(c, metrics=replace(c.metrics, tokens_per_s=tokens_per_s))


MINE = Layout(dp_shard=8, ac="full")
OTHER = Layout(dp_shard=8, ac="full").with_stack("megatron", tp_comm_overlap=True)


def test_every_priority_has_a_metric():
    assert set(METRICS) == set(OBJECTIVES)


@pytest.mark.parametrize("priority", ["throughput", "cost", "time"])
def test_more_than_ten_percent_better_is_material_and_says_it_in_numbers(priority):
    a, b = _cand(MINE, 1000.0), _cand(OTHER, 1000.0 * (1 + MATERIAL) * 1.5)
    text, material = other_stack_reason(a, b, priority)
    assert material and advantage(a, b, priority) == pytest.approx((1 + MATERIAL) * 1.5)
    word = "cheaper" if priority == "cost" else "faster"
    assert text.startswith("--stack megatron: ") and f"1.65x {word} than trainplan's" in text
    assert "cross_entropy=" not in text and "tp_comm_overlap=true" in text  # what the other plan runs


def test_within_ten_percent_is_not_material():
    a, b = _cand(MINE, 1000.0), _cand(OTHER, 1000.0 * (1 + MATERIAL) * 0.99)
    text, material = other_stack_reason(a, b, "cost")
    assert not material and text.startswith("--stack megatron compared: $")
    assert text.endswith("not more than 10% better")


def test_a_layout_the_trainer_refuses_is_named_with_the_refusal():
    a = _cand(Layout(dp_shard=16, ac="full"), 1000.0, nodes=2)
    b = _cand(Layout(tp=2, dp_shard=8, ac="full", sharding="zero1").with_stack("megatron"), 2000.0, nodes=2)
    text, material = other_stack_reason(a, b, "throughput")
    assert material
    assert "(it runs tp=2 sharding=zero1 grad_reduce_overlap=false param_gather_overlap=false, which " \
           "trainplan's trainer refuses: sharding zero1 (DDP + ZeroRedundancyOptimizer) runs with tp = pp" in text
    assert "moe_dispatcher" not in text and "cp_comm" not in text  # a dense model, cp = 1: nothing to act on
