"""The checkpoint interval that maximises goodput reaches the trainer: `plan` writes it into
train.checkpoint_every, every target ships that plan.json unchanged, the trainer saves by it."""

from __future__ import annotations

import json

from launch_fixtures import make_plan

from trainplan.chosen import to_plan
from trainplan.estimate import estimate
from trainplan.launch import render
from trainplan.launch.k8s import K8sOptions
from trainplan.plan import plan_from_dict


class _Result:
    """The search result fields to_plan reads, around one candidate."""

    def __init__(self, plan):
        from types import SimpleNamespace

        e = estimate(plan.job, plan.layout)
        self.chosen = SimpleNamespace(job=plan.job, layout=plan.layout, estimate=e)
        self.reasons, self.runners_up, self.pareto = [], [], []
        self.query = SimpleNamespace(hf_config=None)


def test_the_goodput_interval_travels_in_the_shipped_plan():
    plan = to_plan(_Result(make_plan(nodes=4)))
    n = plan.estimate.goodput.checkpoint_interval_steps
    # 8B on 32 GPUs: a failure every ~1,600 h, a 100 GB checkpoint in 1 s: thousands of steps,
    # not the default 500
    assert plan.train.checkpoint_every == n and n > 1000
    r = render("k8s", plan, K8sOptions(image="example.com/trainplan:0.1.0"))
    shipped = next(i for i in r.request["items"] if i["kind"] == "ConfigMap")["data"]["plan.json"]
    assert plan_from_dict(json.loads(shipped)).train.checkpoint_every == n
