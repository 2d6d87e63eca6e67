"""SageMaker render for ml.p6e-gb300.36xlarge: refused and required exactly as ml.p6e-gb200.36xlarge is
(test_sagemaker_render.py), from the catalog's placement, cpu_arch and spot, no instance name in launch code."""

from __future__ import annotations

from dataclasses import replace

import pytest
from launch_fixtures import make_plan

from trainplan.errors import TrainplanError
from trainplan.launch import render
from trainplan.launch.sagemaker import SageMakerOptions

GB300 = "ml.p6e-gb300.36xlarge"
OK = SageMakerOptions(role="arn:aws:iam::123456789012:role/SageMakerTrainingRole", region="us-east-1",
                      bucket="my-bucket", image="123456789012.dkr.ecr.us-east-1.amazonaws.com/train:arm64")


@pytest.mark.parametrize("changes, msg", [
    ({}, ("ml.p6e-gb300.36xlarge is sold only inside UltraServers (NVLink domain of 72 GPUs), so the job needs "
          "an instance placement: pass --ultraserver ID:COUNT for each UltraServer of your training plan (and "
          "--training-plan ARN)")),
    ({"ultraserver": (("us-1", 1),)}, "--ultraserver counts add up to 1 instances but the plan has 2"),
    ({"ultraserver": (("us-1", 2),), "spot": True}, "ml.p6e-gb300.36xlarge has no Spot capacity; drop --spot"),
    ({"ultraserver": (("us-1", 2),), "image": ""},
     ("ml.p6e-gb300.36xlarge has arm64 CPUs and the default PyTorch image is x86_64: pass --image with an arm64 "
      "training image")),
])
def test_refusals_as_for_gb200(changes, msg):
    with pytest.raises(TrainplanError) as e:
        render("sagemaker", make_plan(GB300, nodes=2), replace(OK, **changes))
    assert str(e.value) == msg


def test_two_ultraservers_place_36_instances():
    plan = make_plan(GB300, nodes=36)
    opts = replace(OK, ultraserver=(("us-a", 18), ("us-b", 18)),
                   training_plan_arn="arn:aws:sagemaker:us-east-1:123456789012:training-plan/tp")
    t = render("sagemaker", plan, opts).request
    assert t["compute"]["instance_type"] == GB300 and t["compute"]["instance_count"] == 36
    assert t["compute"]["instance_placement_config"]["placement_specifications"] == [
        {"ultra_server_id": "us-a", "instance_count": 18}, {"ultra_server_id": "us-b", "instance_count": 18}]
    assert t["hyperparameters"]["nproc-per-node"] == 4
