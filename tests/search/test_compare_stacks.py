"""`plan` searches once more on the stack trainplan's refusals name and puts it first among the
reasons only when it is more than 10% better (search/other_stack.py compare_stacks); when the trainer
runs nothing that fits, it plans on that stack, the user's settings kept (search_runnable)."""

from dataclasses import dataclass, replace

import pytest

from trainplan.hardware import cluster
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.models import resolve
from trainplan.search import Counting, Query, model_evaluator
from trainplan.search.candidate import Candidate
from trainplan.search.other_stack import compare_stacks, search_runnable
from trainplan.stacks import stack


def _cand(layout, tokens_per_s):
    job = Job(resolve("llama-3.1-8b"), cluster("ml.p6-b200.48xlarge", 1), Workload(8192, layout.dp))
    c = Candidate(job, layout, Counting(model_evaluator()).evaluate(job, layout))
    return replace(c, metrics=replace(c.metrics, tokens_per_s=tokens_per_s))


@dataclass(frozen=True)
class _Result:
    chosen: Candidate
    reasons: tuple
    query: Query


@pytest.mark.parametrize("factor, first", [(2.0, True), (1.05, False)])
def test_plan_puts_the_other_stack_first_only_when_material(monkeypatch, factor, first):
    import trainplan.search as search_pkg

    mine = _cand(Layout(dp_shard=8, ac="full"), 1000.0)
    other = _cand(Layout(dp_shard=8, ac="full").with_stack("megatron", tp_comm_overlap=True), 1000.0 * factor)
    q = Query(resolve("llama-3.1-8b"), (mine.job.cluster.node,), nodes=1)
    asked = []

    def fake_search(query, ev=None, progress=None):
        asked.append(query.stack)
        return _Result(other, ("x",), query)

    monkeypatch.setattr(search_pkg, "search", fake_search)
    out = compare_stacks(_Result(mine, ("own reason",), q), None)
    assert asked == ["megatron"]  # one extra search, on the stack the refusals name
    assert out.reasons[0].startswith("--stack megatron: ") is first
    assert out.reasons[-1].startswith("--stack megatron compared") is not first
    assert "own reason" in out.reasons


def test_a_plan_on_the_complete_stack_searches_nothing_more(monkeypatch):
    import trainplan.search as search_pkg

    mine = _cand(Layout(dp_shard=8, ac="full").with_stack("megatron"), 1000.0)
    q = Query(resolve("llama-3.1-8b"), (mine.job.cluster.node,), nodes=1, stack="megatron")
    monkeypatch.setattr(search_pkg, "search", lambda *a, **k: pytest.fail("searched again"))
    assert compare_stacks(_Result(mine, ("own",), q), None).reasons == ("own",)


def _refusing_search(asked, answer):
    """search() that refuses every layout on the trainer's stack (naming megatron) and returns
    `answer` on any other, recording the stack and execution each call was asked for."""
    from trainplan.search import NoRunnablePlan

    def fake_search(query, ev=None, progress=None):
        asked.append((query.stack, query.execution))
        if query.stack == "trainplan":
            raise NoRunnablePlan("nothing runs", "megatron", "multi-head latent attention; use the HF model")
        return _Result(answer, ("theirs",), query)

    return fake_search


def test_a_refusal_is_planned_on_the_stack_it_names_with_the_users_settings_kept(monkeypatch):
    import trainplan.search as search_pkg

    other = _cand(Layout(dp_shard=8, ac="full").with_stack("megatron"), 1000.0)
    q = Query(resolve("llama-3.1-8b"), (other.job.cluster.node,), nodes=1)
    asked = []
    monkeypatch.setattr(search_pkg, "search", _refusing_search(asked, other))
    out = search_runnable(q, None, stack_chosen=False, settings={"moe_imbalance": 1.1})
    assert [s for s, _ in asked] == ["trainplan", "megatron"]  # no compare_stacks after the fallback
    assert asked[1][1] == stack("megatron").execution.with_(moe_imbalance=1.1)  # its preset, --set kept
    assert out.reasons[0].startswith("stack megatron: trainplan's trainer runs none of the layouts")
    assert "multi-head latent attention)" in out.reasons[0] and out.reasons[1:] == ("theirs",)


def test_a_refusal_on_a_chosen_stack_is_the_answer(monkeypatch):
    import trainplan.search as search_pkg
    from trainplan.search import NoRunnablePlan

    q = Query(resolve("llama-3.1-8b"), (cluster("ml.p6-b200.48xlarge", 1).node,), nodes=1)
    asked = []
    monkeypatch.setattr(search_pkg, "search", _refusing_search(asked, None))
    with pytest.raises(NoRunnablePlan):
        search_runnable(q, None, stack_chosen=True)
    assert [s for s, _ in asked] == ["trainplan"]
