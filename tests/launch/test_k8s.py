"""Target k8s: the PyTorchJob manifest (Kubeflow training operator, kubeflow.org/v1)."""

from __future__ import annotations

import json

import pytest
from launch_fixtures import check_golden, make_plan

from trainplan.errors import TrainplanError
from trainplan.launch import render
from trainplan.launch.k8s import K8sOptions
from trainplan.plan import plan_from_dict

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/trainplan:0.1.0"


def _job(r):
    return next(i for i in r.request["items"] if i["kind"] == "PyTorchJob")


def test_manifest_golden(plan4):
    # Fields as the training operator's PyTorchJob v1 API defines them (pytorchReplicaSpecs Master/
    # Worker, nprocPerNode) and the EFA/NVIDIA device-plugin resource names.
    r = render("k8s", plan4, K8sOptions(image=IMAGE, steps=50))
    check_golden("k8s_p6-b200_x4.json", r.text)
    assert json.loads(r.text) == r.request


def test_one_pod_per_node_with_all_gpus_and_efa(plan4):
    job = _job(render("k8s", plan4, K8sOptions(image=IMAGE)))
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["replicas"] == 1 and specs["Worker"]["replicas"] == 3
    c = specs["Worker"]["template"]["spec"]["containers"][0]
    assert c["resources"]["limits"] == {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "8"}
    assert {"name": "FI_PROVIDER", "value": "efa"} in c["env"]
    assert c["command"][c["command"].index("--rdzv-endpoint") + 1] == "trainplan-llama-3-1-8b-master-0:29500"
    assert specs["Worker"]["template"]["spec"]["nodeSelector"] == {"node.kubernetes.io/instance-type": "p6-b200.48xlarge"}


def test_the_configmap_carries_the_plan_unchanged(plan4):
    r = render("k8s", plan4, K8sOptions(image=IMAGE))
    cm = next(i for i in r.request["items"] if i["kind"] == "ConfigMap")
    assert plan_from_dict(json.loads(cm["data"]["plan.json"])) == plan4


def test_dollar_in_paths_is_not_expanded_by_kubernetes(plan4):
    r = render("k8s", plan4, K8sOptions(image=IMAGE, checkpoint_dir="/ck $(HOME) 'x'"))
    cmd = _job(r)["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["command"]
    assert cmd[cmd.index("--checkpoint-dir") + 1] == "/ck $$(HOME) 'x'"


@pytest.mark.parametrize("opts, msg", [
    (K8sOptions(), "launch k8s needs --image: a container image with trainplan and its torch extra installed"),
    (K8sOptions(image=IMAGE, job_name="my job $(x)"),
     ("k8s job name 'my job $(x)' is not valid here: use letters, digits and '-' (no leading or trailing '-'), "
     "at most 48 characters (--job-name)")),
    (K8sOptions(image=IMAGE, namespace="Team A"),
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
        render("k8s", plan, K8sOptions(image=IMAGE))
    c = _job(render("k8s", plan, K8sOptions(image=IMAGE, efa_devices=17)))
    assert c["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["resources"]["limits"][
        "vpc.amazonaws.com/efa"] == "17"


def test_a_plan_too_large_for_a_configmap_is_refused(plan4):
    from dataclasses import replace

    big = replace(plan4, reasons=("x" * (1 << 20),))
    with pytest.raises(TrainplanError, match=r"more than a ConfigMap holds \(1 MiB\)"):
        render("k8s", big, K8sOptions(image=IMAGE))


def _pod(r):
    return _job(r)["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]


def test_checkpoints_default_to_a_claim_that_outlives_the_pod(plan4):
    """Not the container's writable layer: a ReadWriteMany claim every pod mounts at /checkpoints,
    sized for the three checkpoints the trainer has on disk at once (12 bytes/param each)."""
    r = render("k8s", plan4, K8sOptions(image=IMAGE))
    pvc = next(i for i in r.request["items"] if i["kind"] == "PersistentVolumeClaim")
    assert pvc["metadata"]["name"] == "trainplan-llama-3-1-8b-checkpoints"
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    from trainplan.models.params import count_params

    params = count_params(plan4.job.model).total
    assert pvc["spec"]["resources"]["requests"]["storage"] == f"{-(-3 * 12 * params // (1 << 30))}Gi"
    pod = _pod(r)
    assert {"name": "checkpoints", "persistentVolumeClaim": {"claimName": pvc["metadata"]["name"]}} in pod["volumes"]
    assert {"name": "checkpoints", "mountPath": "/checkpoints"} in pod["containers"][0]["volumeMounts"]
    cmd = pod["containers"][0]["command"]
    assert cmd[cmd.index("--checkpoint-dir") + 1] == "/checkpoints/trainplan-llama-3-1-8b"


def test_an_existing_claim_fsx_for_lustre(plan4):
    r = render("k8s", plan4, K8sOptions(image=IMAGE, checkpoint_pvc="fsx-claim"))
    assert [i["kind"] for i in r.request["items"]] == ["ConfigMap", "PyTorchJob"]
    assert {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "fsx-claim"}} in _pod(r)["volumes"]


def test_storage_class_and_size_of_the_created_claim(plan4):
    r = render("k8s", plan4, K8sOptions(image=IMAGE, storage_class="fsx-sc", checkpoint_gib=900))
    pvc = next(i for i in r.request["items"] if i["kind"] == "PersistentVolumeClaim")
    assert pvc["spec"]["storageClassName"] == "fsx-sc" and pvc["spec"]["resources"]["requests"]["storage"] == "900Gi"


def test_a_checkpoint_dir_off_the_volume_is_noted(plan4):
    r = render("k8s", plan4, K8sOptions(image=IMAGE, checkpoint_dir="/tmp/ck"))
    assert "/tmp/ck is outside the checkpoint volume (/checkpoints): it is lost when a pod restarts" in r.notes


def test_ranks_get_the_grace_period_to_save(plan4):
    pod = _pod(render("k8s", plan4, K8sOptions(image=IMAGE, grace_s=300)))
    assert pod["terminationGracePeriodSeconds"] == 300
    assert {"name": "TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "value": "300"} in pod["containers"][0]["env"]


def test_a_claim_name_kubernetes_would_refuse_is_refused_here(plan4):
    with pytest.raises(TrainplanError, match=r"^--checkpoint-pvc 'FSx Claim' is not a claim name"):
        render("k8s", plan4, K8sOptions(image=IMAGE, checkpoint_pvc="FSx Claim"))
