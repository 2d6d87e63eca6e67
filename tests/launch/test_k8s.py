"""Target k8s: the PyTorchJob manifest (Kubeflow training operator, kubeflow.org/v1)."""

from __future__ import annotations

import json

import pytest
from launch_fixtures import check_golden, make_plan

from trainplan.errors import TrainplanError
from trainplan.launch import LaunchOptions, render
from trainplan.plan import plan_from_dict

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/trainplan:0.1.0"


def _job(r):
    return next(i for i in r.request["items"] if i["kind"] == "PyTorchJob")


def test_manifest_golden(plan4):
    # Fields as the training operator's PyTorchJob v1 API defines them (pytorchReplicaSpecs Master/
    # Worker, nprocPerNode) and the EFA/NVIDIA device-plugin resource names.
    r = render("k8s", plan4, LaunchOptions(image=IMAGE, steps=50))
    check_golden("k8s_p6-b200_x4.json", r.text)
    assert json.loads(r.text) == r.request


def test_one_pod_per_node_with_all_gpus_and_efa(plan4):
    job = _job(render("k8s", plan4, LaunchOptions(image=IMAGE)))
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["replicas"] == 1 and specs["Worker"]["replicas"] == 3
    c = specs["Worker"]["template"]["spec"]["containers"][0]
    assert c["resources"]["limits"] == {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "8"}
    assert {"name": "FI_PROVIDER", "value": "efa"} in c["env"]
    assert c["command"][c["command"].index("--rdzv-endpoint") + 1] == "trainplan-llama-3-1-8b-master-0:29500"
    assert specs["Worker"]["template"]["spec"]["nodeSelector"] == {"node.kubernetes.io/instance-type": "p6-b200.48xlarge"}


def test_the_configmap_carries_the_plan_unchanged(plan4):
    r = render("k8s", plan4, LaunchOptions(image=IMAGE))
    cm = next(i for i in r.request["items"] if i["kind"] == "ConfigMap")
    assert plan_from_dict(json.loads(cm["data"]["plan.json"])) == plan4


def test_dollar_in_paths_is_not_expanded_by_kubernetes(plan4):
    r = render("k8s", plan4, LaunchOptions(image=IMAGE, checkpoint_dir="/ck $(HOME) 'x'"))
    cmd = _job(r)["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["command"]
    assert cmd[cmd.index("--checkpoint-dir") + 1] == "/ck $$(HOME) 'x'"


@pytest.mark.parametrize("opts, msg", [
    (LaunchOptions(), "launch k8s needs --image: a container image with trainplan and its torch extra installed"),
    (LaunchOptions(image=IMAGE, job_name="my job $(x)"),
     ("k8s job name 'my job $(x)' is not valid here: use letters, digits and '-' (no leading or trailing '-'), "
     "at most 48 characters (--job-name)")),
    (LaunchOptions(image=IMAGE, namespace="Team A"),
     ("k8s namespace 'Team A' is not valid here: use letters, digits and '-' (no leading or trailing '-'), "
     "at most 63 characters (--namespace)")),
])
def test_bad_k8s_options(plan4, opts, msg):
    with pytest.raises(TrainplanError) as e:
        render("k8s", plan4, opts)
    assert str(e.value) == msg


def test_unknown_efa_count_asks_for_it():
    plan = make_plan("ml.p6e-gb200.36xlarge", nodes=2)
    with pytest.raises(TrainplanError, match=r"EFA devices of ml.p6e-gb200.36xlarge is not known: pass --efa-devices N"):
        render("k8s", plan, LaunchOptions(image=IMAGE))
    c = _job(render("k8s", plan, LaunchOptions(image=IMAGE, efa_devices=17)))
    assert c["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["resources"]["limits"][
        "vpc.amazonaws.com/efa"] == "17"


def test_a_plan_too_large_for_a_configmap_is_refused(plan4):
    from dataclasses import replace

    big = replace(plan4, reasons=("x" * (1 << 20),))
    with pytest.raises(TrainplanError, match=r"more than a ConfigMap holds \(1 MiB\)"):
        render("k8s", big, LaunchOptions(image=IMAGE))
