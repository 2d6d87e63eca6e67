"""The search logic on a transparent fake cost model (search_fake.py)."""

import pytest
from search_fake import FakeEvaluator

from trainplan.errors import TrainplanError
from trainplan.hardware import find_node
from trainplan.layout import check_layout
from trainplan.models import resolve
from trainplan.search import Query, search

B200 = (find_node("ml.p6-b200.48xlarge"),)
A100 = (find_node("ml.p4d.24xlarge"),)


def run(model, inst=B200, **kw):
    return search(Query(resolve(model), inst, **kw), FakeEvaluator())


def test_chosen_plan_is_a_valid_layout_and_fits():
    r = run("llama-3.1-8b")
    c = r.chosen
    check_layout(c.job, c.layout)
    assert c.metrics.memory_high_bytes <= c.metrics.capacity_bytes
    assert c.nodes == 1
    assert r.reasons and all(isinstance(x, str) for x in r.reasons)


def test_fp8_is_never_chosen_on_a100():
    for prio in ("throughput", "communication"):
        r = run("llama-3.1-8b", inst=A100, priority=prio)
        assert r.chosen.layout.precision == "bf16"
        assert all(c.layout.precision == "bf16" for c in r.runners_up)


def test_precision_flag_is_respected():
    r = run("llama-3.1-8b", precision="bf16")
    assert r.chosen.layout.precision == "bf16"
    assert r.reasons[1] == "precision bf16: as asked (--precision)"


def test_context_reaches_a_longer_sequence_than_throughput():
    t = run("llama-3.1-8b", nodes=1)
    c = run("llama-3.1-8b", nodes=1, seq_len=None, priority="context")
    assert c.chosen.seq_len > t.chosen.seq_len
    assert c.chosen.layout.cp > 1 or c.chosen.layout.ac in ("full", "offload")


def test_throughput_without_a_count_starts_at_the_fewest_nodes_that_fit_and_says_why_it_takes_more():
    r = run("llama-3.1-405b")
    first = max(n for _, n in r.stats.no_fit_counts) + 1  # the counts up to 8 are searched one by one
    assert r.chosen.nodes > first
    assert r.reasons[0].startswith(f"{r.chosen.nodes} nodes, not the fewest that fit ({first}): ")
    assert r.reasons[0].endswith(f"--nodes {first} plans on {first}")
    at_first = run("llama-3.1-405b", nodes=first).chosen
    assert r.chosen.tokens_per_s_per_gpu > at_first.tokens_per_s_per_gpu


def test_communication_keeps_tp_in_the_node_and_uses_no_more_nodes_than_needed():
    # the fewest nodes that fit: throughput's search starts there (it may go on to more)
    fewest = max((n for _, n in run("llama-3.1-70b").stats.no_fit_counts), default=0) + 1
    r = run("llama-3.1-70b", max_nodes=16, priority="communication")
    assert r.chosen.layout.tp <= 8
    assert r.chosen.nodes == fewest


def test_throughput_over_a_range_uses_more_nodes():
    r = run("llama-3.1-70b", max_nodes=8)
    assert r.chosen.nodes == 8


def test_risky_plans_are_set_aside_unless_allowed():
    safe = run("llama-3.1-70b", nodes=1)
    risky = run("llama-3.1-70b", nodes=1, allow_risk=True)
    assert safe.oom_risks > 0
    assert not safe.chosen.oom_risk
    assert risky.chosen.tokens_per_s >= safe.chosen.tokens_per_s


def test_budget_and_deadline_need_tokens():
    for kw, flag, what in (({"budget_usd": 100.0}, "--budget", "budget"), ({"days": 30.0}, "--days", "deadline")):
        with pytest.raises(TrainplanError) as e:
            run("llama-3.1-8b", nodes=1, **kw)
        assert str(e.value) == f"{flag} needs --tokens: the {what} is for training that many tokens (e.g. --tokens 1T)"


def test_a_budget_no_plan_meets_answers_with_the_nearest_and_by_how_much_it_misses():
    r = run("llama-3.1-8b", nodes=1, budget_usd=1.0, tokens=10**12, priority="cost")
    usd = r.chosen.usd_for(10**12)
    assert not r.sizing.meets and r.over_budget > 0
    assert r.reasons[0].startswith("no plan up to 1 nodes trains 1T tokens within $1: the nearest, 1 x ")
    assert f"misses by ${usd - 1:,.0f} over the $1 budget" in r.reasons[0]


def test_a_model_that_cannot_fit_says_what_to_do():
    with pytest.raises(TrainplanError) as e:
        run("llama-3.1-405b", nodes=1)
    assert str(e.value) == (
        "llama-3.1-405b does not fit at sequence 8192 on 1 x ml.p6-b200.48xlarge with any layout; "
        "add nodes (--nodes/--max-nodes), shorten --seq-len or use a larger instance")


def test_cost_chooses_instance_and_count():
    inst = (find_node("ml.p6-b200.48xlarge"), find_node("ml.p5.48xlarge"))
    r = run("llama-3.1-8b", inst=inst, max_nodes=4, priority="cost", tokens=10**12)
    best = min((c for c in [r.chosen, *r.runners_up]), key=lambda c: c.usd_per_million_tokens)
    assert r.chosen.usd_per_million_tokens == best.usd_per_million_tokens
    other = "p5.48xlarge" if r.chosen.instance == "ml.p6-b200.48xlarge" else "p6-b200.48xlarge"
    assert r.reasons[0].startswith("nodes by cost, up to 4: cheapest ")
    assert r.reasons[1].startswith(f"instance {r.chosen.instance}: cheapest plans of the others: {other} on ")
