"""The step-time terms (costs/step_terms.py): each a pure function of the slowest stage, composed by
steptime.step_time in its documented order (tp, cp, ep, pp, dp, offload), so every exposed field of
StepTime is its term's and the ledger is the terms' entries in that order."""

from __future__ import annotations

import pytest

from trainplan.costs import step_terms
from trainplan.costs.steptime import slowest_stage, step_time
from trainplan.hardware import Cluster, find_node
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.models import resolve
from trainplan.profile import Profile

PRIOR = Profile()
ORDER = ("tp", "cp", "ep", "pp", "dp", "offload")


def _job(model, nodes, gb):
    return Job(resolve(model), Cluster(find_node("ml.p5.48xlarge"), nodes), Workload(4096, gb))


CASES = [
    (_job("llama-3.1-70b", 4, 32), Layout(dp_shard=2, tp=4, pp=2, cp=2, grad_accum=4, ac="offload")),
    (_job("mixtral-8x7b", 2, 16), Layout(dp_shard=8, tp=2, ep=4, grad_accum=1)),
]


@pytest.mark.parametrize("j,L", CASES)
def test_step_time_is_its_terms_composed_in_the_documented_order(j, L):
    res, st = step_time(j, L, PRIOR), slowest_stage(j, L, PRIOR)
    terms = {"tp": step_terms.tp_term(st), "cp": step_terms.cp_term(st), "ep": step_terms.ep_term(st),
             "pp": step_terms.pp_term(st), "dp": step_terms.dp_term(st), "offload": step_terms.offload_term(st)}
    for name, term in terms.items():
        assert getattr(res.time, name) == term.exposed, name
        assert term.exposed == sum(e.exposed_seconds for e in term.entries), name
    assert res.comm == tuple(e for name in ORDER for e in terms[name].entries)
    # the layouts exercise more than one term each, so a reordering would show
    assert len({e.dimension for e in res.comm}) >= 3

