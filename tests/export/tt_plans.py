"""Plans for the torchtitan export tests: one from a layout text, and the known-answer suite's
queries (tests/search/test_known_answers.py) run with --stack torchtitan."""

from __future__ import annotations

import functools

from trainplan.estimate import estimate
from trainplan.hardware import Cluster, find_node
from trainplan.job import Job, Workload
from trainplan.layout import check_layout, parse_layout
from trainplan.models import resolve
from trainplan.plan import Plan, TrainSettings
from trainplan.search import Query, search

P5 = (find_node("ml.p5.48xlarge"),)
P6 = (find_node("ml.p6-b200.48xlarge"),)


def plan_of(text: str, model: str = "llama-3.1-8b", instance: str = "ml.p5.48xlarge", nodes: int = 1,
            seq_len: int = 8192, **train) -> Plan:
    L = parse_layout(text)
    job = Job(resolve(model), Cluster(find_node(instance), nodes), Workload(seq_len=seq_len, global_batch=L.global_batch))
    check_layout(job, L)
    return Plan(job=job, layout=L, train=TrainSettings(**train), estimate=estimate(job, L))


@functools.cache
def known_answer_plans() -> tuple[Plan, ...]:
    """Chosen, runners-up and Pareto plans of two known-answer queries with stack torchtitan."""
    out = []
    for q in (Query(resolve("llama-3.1-8b"), P5, nodes=1, stack="torchtitan"),
              Query(resolve("llama-3.1-70b"), P6, nodes=1, precision="bf16", stack="torchtitan")):
        r = search(q)
        out += [Plan(job=c.job, layout=c.layout, train=TrainSettings(checkpoint_every=100))
                for c in (r.chosen, *r.runners_up, *r.pareto)]
    return tuple(out)
