"""Every manifest the k8s and hyperpod-eks targets render, validated against published schemas (#26 item 3).

- Kubernetes' own objects (ConfigMap, PersistentVolumeClaim) and every pod template inside a custom
  resource (as a core/v1 PodTemplate, with the resource's metadata as its ObjectMeta) against the
  Kubernetes OpenAPI JSON schemas that kubernetes-validate 1.37.0 ships, in strict mode (a field the
  schema does not name is an error), for Kubernetes K8S_VERSION; a JobSet's Job template as a
  batch/v1 Job. The `v1` List around them is kubectl's client-side kind (metav1.List: TypeMeta and
  items), which has no schema of its own: its envelope is checked here.
- The PyTorchJob against the Kubeflow training-operator SDK's generated models (kubeflow-training
  1.9.4: KubeflowOrgV1PyTorchJob and below, which reach the Kubernetes client's V1PodTemplateSpec),
  walked field by field through each model's openapi_types / attribute_map: a field no model has,
  a value of the wrong type, or a model refusing its arguments fails.
- A JobSet's own fields against jobset.toml [crd] (kubernetes-sigs/jobset v0.12.0's json names), a
  ComputeDomain's against compute_domain.toml [crd] (NVIDIA/k8s-dra-driver-gpu's v1beta1 types).

Both packages are in the `dev` extra (so `make install` installs them and CI runs this); each test
skips, saying which, only where its package is absent.
"""

from __future__ import annotations

import importlib.util
import re

import pytest
from framework_plans import megatron_moe_plan, megatron_plan, torchtitan_plan
from launch_fixtures import make_plan

from trainplan.launch import find_target, jobset, k8s, render
from trainplan.launch.hyperpod_eks import HyperPodEksOptions
from trainplan.launch.k8s import JOBSET, K8sOptions

# The oldest Kubernetes minor version the clouds' current channels run, so that a field added later
# is refused: 1.31. GKE's release notes (docs.cloud.google.com/kubernetes-engine/docs/release-notes,
# late 2026) list 1.34 up in the Rapid, Regular and Stable channels and 1.31 to 1.36 in the Extended
# channel; Amazon EKS keeps 1.32 in extended support until 23 Mar 2027, 1.34 up in standard (1.34 to 2 Dec 2026)
# (docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html); AKS supports its GA minor and
# the two before it (learn.microsoft.com/azure/aks/supported-kubernetes-versions). Kubernetes adds
# fields within v1 and does not remove them, so a manifest valid here is valid on every newer cluster.
# It is also the first whose PodResourceClaim has resourceClaimTemplateName (the IMEX channel claim of
# an NVL72 job; 1.29 and 1.30 refuse it), and DRA itself is beta from 1.32 and GA from 1.34.
K8S_VERSION = "1.31"
IMAGE = "registry.example.com/trainplan:0.1.0"
GKE_AKS = ["a4-highgpu-8g", "a4x-highgpu-4g", "a4x-maxgpu-4g-metal", "a3-ultragpu-8g", "Standard_ND128isr_GB200_v6",
           "Standard_ND128isr_GB300_v6", "Standard_ND96isr_H100_v5", "Standard_ND96isr_H200_v5"]


def _needs(module: str) -> None:
    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package is absent too (kubeflow for kubeflow.training)
        found = False
    if not found:
        pytest.skip(f"{module} is not installed (pip install -e '.[dev]' installs it)")


def manifests():
    """(name, rendered) for every manifest the launch tests render with the k8s and hyperpod-eks targets."""
    plan = make_plan()
    yield "eks-p6-b200x4", render("k8s", plan, K8sOptions(image=IMAGE, steps=50))
    yield "eks-fsx-claim", render("k8s", plan, K8sOptions(image=IMAGE, checkpoint_pvc="fsx-claim"))
    yield "eks-storage-class", render("k8s", plan, K8sOptions(image=IMAGE, storage_class="fsx-sc", checkpoint_gib=900,
                                                              grace_s=300, namespace="training"))
    yield "eks-probe", render("k8s", plan, K8sOptions(image=IMAGE, probe=True))
    yield "eks-one-node", render("k8s", make_plan(nodes=1), K8sOptions(image=IMAGE))
    yield "eks-gb200-efa", render("k8s", make_plan("ml.p6e-gb200.36xlarge", nodes=2),
                                  K8sOptions(image=IMAGE, efa_devices=17))
    for instance in GKE_AKS:
        yield instance, render("k8s", make_plan(instance, nodes=2), K8sOptions(image=IMAGE))
    yield "megatron", render("k8s", megatron_plan(), K8sOptions())
    yield "torchtitan", render("k8s", torchtitan_plan(), K8sOptions())
    yield "queue", render("k8s", make_plan("a4-highgpu-8g", nodes=2), K8sOptions(image=IMAGE, queue="a4"))
    for instance in ("a4-highgpu-8g", "a4x-highgpu-4g", "a4x-maxgpu-4g-metal", "Standard_ND128isr_GB200_v6",
                     "ml.p6-b200.48xlarge"):
        yield f"jobset-{instance}", render("k8s", make_plan(instance, nodes=2),
                                           K8sOptions(image=IMAGE, api=JOBSET, queue="a4"))
    # more nodes than one A4X NVLink sub-block: Kueue's preferred topology annotation instead of required
    yield "jobset-a4x-20-nodes", render("k8s", make_plan("a4x-highgpu-4g", nodes=20),
                                        K8sOptions(image=IMAGE, api=JOBSET, queue="a4x"))
    yield "jobset-megatron", render("k8s", megatron_plan(), K8sOptions(api=JOBSET))
    yield "hyperpod-megatron-moe", render("hyperpod-eks", megatron_moe_plan(), HyperPodEksOptions())
    yield "hyperpod-megatron", render("hyperpod-eks", megatron_plan(), HyperPodEksOptions(checkpoint_pvc="fsx-claim"))
    yield "hyperpod-torchtitan", render("hyperpod-eks", torchtitan_plan(), HyperPodEksOptions(image=IMAGE))
    yield "hyperpod-trainplan", render("hyperpod-eks", make_plan(), HyperPodEksOptions(image=IMAGE, steps=50))
    yield "hyperpod-gb200", render("hyperpod-eks", make_plan("ml.p6e-gb200.36xlarge", nodes=2),
                                   HyperPodEksOptions(image=IMAGE, efa_devices=17))


MANIFESTS = dict(manifests())


def pod_templates(item: dict) -> list[dict]:
    """The pod templates (core/v1 PodTemplateSpec) inside a custom resource."""
    spec = item["spec"]
    if item["kind"] == "PyTorchJob":
        return [r["template"] for r in spec["pytorchReplicaSpecs"].values()]
    if item["kind"] == "HyperPodPyTorchJob":
        return [r["template"] for r in spec["replicaSpecs"]]
    if item["kind"] == "JobSet":
        return [r["template"]["spec"]["template"] for r in spec["replicatedJobs"]]
    raise AssertionError(f"no pod templates known for {item['kind']}")


def kubernetes_objects(item: dict) -> list[dict]:
    """What of `item` the Kubernetes schemas cover, as objects of a kind they have."""
    if item["apiVersion"] == "v1":
        return [item]
    if item["kind"] == "ComputeDomain":  # its metadata is an ObjectMeta (the rest: compute_domain.toml)
        return [{"apiVersion": "v1", "kind": "PodTemplate", "metadata": item["metadata"]}]
    # a custom resource's metadata is an ObjectMeta, its pod templates PodTemplateSpecs
    out = [{"apiVersion": "v1", "kind": "PodTemplate", "metadata": item["metadata"], "template": t}
           for t in pod_templates(item)]
    if item["kind"] == "JobSet":  # ReplicatedJob.template is a batch/v1 JobTemplateSpec
        out += [{"apiVersion": "batch/v1", "kind": "Job", **r["template"]} for r in item["spec"]["replicatedJobs"]]
    return out


def schema_errors(obj: dict) -> list[str]:
    import kubernetes_validate

    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        return [f"{obj['kind']} {'.'.join(map(str, e.absolute_path))}: {e.message}"]
    return []


@pytest.mark.parametrize("name", MANIFESTS)
def test_every_object_validates_against_the_kubernetes_schema(name):
    _needs("kubernetes_validate")
    manifest = MANIFESTS[name].request
    assert set(manifest) == {"apiVersion", "kind", "items"} and (manifest["apiVersion"], manifest["kind"]) == ("v1",
                                                                                                          "List")
    found = [e for item in manifest["items"] for obj in kubernetes_objects(item) for e in schema_errors(obj)]
    assert found == [], name


def test_the_schema_refuses_what_kubernetes_would():
    """The validation can fail: a misspelt container field, a pod restart policy a Job refuses, an
    env value that is not a string (strict schemas, K8S_VERSION)."""
    _needs("kubernetes_validate")
    job = MANIFESTS["jobset-a4-highgpu-8g"].request["items"][-1]
    pod_template = pod_templates(job)[0]
    bad = {**pod_template, "spec": {**pod_template["spec"], "containers": [
        {**pod_template["spec"]["containers"][0], "comand": ["x"]}]}}
    found = schema_errors({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "x"}, "template": bad})
    assert len(found) == 1 and "comand" in found[0]
    env = [{"name": "N", "value": 1}]
    bad = {**pod_template, "spec": {**pod_template["spec"], "containers": [
        {**pod_template["spec"]["containers"][0], "env": env}]}}
    assert schema_errors({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "x"}, "template": bad})


# --- the PyTorchJob, through the training operator's SDK models -------------------------------------

_PRIMITIVES = {"str": str, "int": int, "bool": bool, "float": (int, float), "object": object}
_LIST, _DICT = re.compile(r"list\[(.+)\]"), re.compile(r"dict\(str, (.+)\)")


def build(value, type_name: str, where: str, out: list[str]):
    """`value` (JSON as the manifest has it) built into the SDK's model `type_name`; what does not fit
    is added to `out`. The SDK's models package re-exports the Kubernetes client's (V1PodTemplateSpec)."""
    from kubeflow.training import models

    if type_name in _PRIMITIVES:
        if not isinstance(value, _PRIMITIVES[type_name]) or (type_name == "int" and isinstance(value, bool)):
            out.append(f"{where}: {type_name} expected, got {type(value).__name__} {value!r}")
        return value
    if m := _LIST.fullmatch(type_name):
        if not isinstance(value, list):
            out.append(f"{where}: a list expected, got {type(value).__name__}")
            return None
        return [build(v, m[1], f"{where}[{i}]", out) for i, v in enumerate(value)]
    if m := _DICT.fullmatch(type_name):
        if not isinstance(value, dict):
            out.append(f"{where}: a map expected, got {type(value).__name__}")
            return None
        return {k: build(v, m[1], f"{where}.{k}", out) for k, v in value.items()}
    model = getattr(models, type_name)
    if not isinstance(value, dict):
        out.append(f"{where}: an object ({type_name}) expected, got {type(value).__name__}")
        return None
    attribute = {json_name: attr for attr, json_name in model.attribute_map.items()}
    kwargs = {}
    for k, v in value.items():
        if k not in attribute:
            out.append(f"{where}.{k}: not a field of {type_name}")
        else:
            kwargs[attribute[k]] = build(v, model.openapi_types[attribute[k]], f"{where}.{k}", out)
    try:
        return model(**kwargs)
    except ValueError as e:  # a required field missing, a value outside an enum
        out.append(f"{where}: {type_name} refuses it: {e}")
        return None


def pytorchjob_problems(job: dict) -> list[str]:
    """What in `job` the SDK's models refuse; and the models, serialised back, must be `job` itself
    (nothing dropped, nothing coerced)."""
    from kubeflow.training import ApiClient

    out: list[str] = []
    built = build(job, "KubeflowOrgV1PyTorchJob", "pytorchjob", out)
    if not out and ApiClient().sanitize_for_serialization(built) != job:
        out.append("pytorchjob: the SDK's models serialise it differently")
    return out


@pytest.mark.parametrize("name", [n for n, r in MANIFESTS.items() if r.request["items"][-1]["kind"] == "PyTorchJob"])
def test_every_pytorchjob_fits_the_training_operators_models(name):
    _needs("kubeflow.training")
    assert pytorchjob_problems(MANIFESTS[name].request["items"][-1]) == [], name


def test_the_walker_names_what_the_models_refuse():
    _needs("kubeflow.training")
    job = MANIFESTS["eks-p6-b200x4"].request["items"][-1]
    master = job["spec"]["pytorchReplicaSpecs"]["Master"]
    bad = {**job, "spec": {**job["spec"], "nprocPerNod": "8",
                           "pytorchReplicaSpecs": {"Master": {**master, "replicas": "1"}}}}
    found = pytorchjob_problems(bad)
    assert "pytorchjob.spec.nprocPerNod: not a field of KubeflowOrgV1PyTorchJobSpec" in found
    assert "pytorchjob.spec.pytorchReplicaSpecs.Master.replicas: int expected, got str '1'" in found
    c = master["template"]["spec"]["containers"][0]
    deep = {**job, "spec": {**job["spec"], "pytorchReplicaSpecs": {"Master": {**master, "template": {
        **master["template"], "spec": {**master["template"]["spec"], "containers": [{**c, "imagePullPolcy": "x"}]}}}}}}
    assert pytorchjob_problems(deep) == [
        ("pytorchjob.spec.pytorchReplicaSpecs.Master.template.spec.containers[0].imagePullPolcy: not a field of "
        "V1Container")]


# --- the JobSet's own fields -----------------------------------------------------------------------

@pytest.mark.parametrize("name", [n for n in MANIFESTS if n.startswith("jobset-")])
def test_every_jobset_has_only_the_apis_fields(name):
    assert jobset.problems(MANIFESTS[name].request["items"][-1]) == [], name


def test_a_jobset_field_the_api_does_not_have_is_refused_before_a_dry_run_prints_it():
    from dataclasses import replace

    from trainplan.errors import TrainplanError

    r = MANIFESTS["jobset-a4-highgpu-8g"]
    js = r.request["items"][-1]
    bad_js = {**js, "spec": {**js["spec"], "replicatedJobs": [{**js["spec"]["replicatedJobs"][0], "replica": 2}]}}
    assert jobset.problems(bad_js) == [("jobset.spec.replicatedJobs[0].replica: not a field of ReplicatedJob "
                                       "(jobset_types.go:320)")]
    bad = replace(r, request={**r.request, "items": [*r.request["items"][:-1], bad_js]})
    with pytest.raises(TrainplanError, match=r"^the JobSet does not match its API \(jobset.toml\): "
                                             r"jobset.spec.replicatedJobs\[0\].replica: not a field"):
        find_target("k8s").check(bad)


@pytest.mark.parametrize("name", [n for n, r in MANIFESTS.items()
                                  if any(i["kind"] == "ComputeDomain" for i in r.request["items"])])
def test_every_compute_domain_has_only_the_apis_fields(name):
    cd = k8s.compute_domain()
    (item,) = [i for i in MANIFESTS[name].request["items"] if i["kind"] == "ComputeDomain"]
    assert k8s.crd_problems(cd["crd"], "ComputeDomain", item, "computedomain", "computedomain.go") == [], name


def test_a_compute_domain_field_the_api_does_not_have_is_refused():
    from dataclasses import replace

    from trainplan.errors import TrainplanError

    r = MANIFESTS["a4x-highgpu-4g"]
    items = [{**i, "spec": {"numNode": 2, "channel": i["spec"]["channel"]}} if i["kind"] == "ComputeDomain" else i
             for i in r.request["items"]]
    with pytest.raises(TrainplanError, match=r"^the ComputeDomain does not match its API \(compute_domain.toml\): "
                                             r"computedomain.spec.numNodes: required"):
        find_target("k8s").check(replace(r, request={**r.request, "items": items}))
