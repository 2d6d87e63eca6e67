"""`plan` searches once more on the stack trainplan's refusals name and puts it first among the
reasons only when it is more than 10% better (commands/plan.compare_stacks, search/other_stack.py)."""

from dataclasses import dataclass, replace

import pytest

from trainplan.commands import plan as plan_cmd
from trainplan.hardware import cluster
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.models import resolve
from trainplan.search import Counting, Query, model_evaluator
from trainplan.search.candidate import Candidate


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
    out = plan_cmd.compare_stacks(_Result(mine, ("own reason",), q), None)
    assert asked == ["megatron"]  # one extra search, on the stack the refusals name
    assert out.reasons[0].startswith("--stack megatron: ") is first
    assert out.reasons[-1].startswith("--stack megatron compared") is not first
    assert "own reason" in out.reasons


def test_a_plan_on_the_complete_stack_searches_nothing_more(monkeypatch):
    import trainplan.search as search_pkg

    mine = _cand(Layout(dp_shard=8, ac="full").with_stack("megatron"), 1000.0)
    q = Query(resolve("llama-3.1-8b"), (mine.job.cluster.node,), nodes=1, stack="megatron")
    monkeypatch.setattr(search_pkg, "search", lambda *a, **k: pytest.fail("searched again"))
    assert plan_cmd.compare_stacks(_Result(mine, ("own",), q), None).reasons == ("own",)
