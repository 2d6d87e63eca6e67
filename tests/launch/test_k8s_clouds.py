"""Target k8s on GKE and AKS (issue #26): the same PyTorchJob, with what each cloud's network needs
(launch/k8s_networks.toml, hardware/network.toml), every key and value checked against Kubernetes'
own syntax for names, annotations and extended resources."""

from __future__ import annotations

import json
import re

import pytest
from launch_fixtures import make_plan

from trainplan.hardware import find_node
from trainplan.launch import render
from trainplan.launch.k8s import K8sOptions

IMAGE = "registry.example.com/trainplan:0.1.0"

# https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#syntax-and-character-set:
# an optional DNS-subdomain prefix and '/', then a name of at most 63 characters, alphanumeric at both
# ends with '-', '_' and '.' between. Extended resources follow the same rule and need the prefix
# (https://kubernetes.io/docs/concepts/configuration/manage-resources-containers/#extended-resources).
NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
PREFIX = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def qualified(key: str, prefix_required: bool = False) -> bool:
    prefix, slash, name = key.rpartition("/")
    if prefix_required and not slash:
        return False
    return bool(NAME.fullmatch(name)) and (not slash or (len(prefix) <= 253 and bool(PREFIX.fullmatch(prefix))))


def pods(instance: str, nodes: int = 2):
    r = render("k8s", make_plan(instance, nodes=nodes), K8sOptions(image=IMAGE))
    job = next(i for i in r.request["items"] if i["kind"] == "PyTorchJob")
    assert json.loads(r.text) == r.request
    return r, [s["template"] for s in job["spec"]["pytorchReplicaSpecs"].values()]


@pytest.mark.parametrize("instance", ["a4-highgpu-8g", "a4x-highgpu-4g", "a4x-maxgpu-4g-metal", "a3-ultragpu-8g",
                                      "Standard_ND128isr_GB200_v6", "Standard_ND128isr_GB300_v6",
                                      "Standard_ND96isr_H100_v5", "Standard_ND96isr_H200_v5"])
def test_manifest_keys_and_values_follow_kubernetes_syntax(instance):
    r, templates = pods(instance)
    node = find_node(instance)
    for t in templates:
        for k, v in t["metadata"].get("annotations", {}).items():
            assert qualified(k) and isinstance(v, str), k
        c = t["spec"]["containers"][0]
        assert c["resources"]["limits"] == c["resources"]["requests"]
        for k, v in c["resources"]["limits"].items():
            assert qualified(k, prefix_required=True) and re.fullmatch(r"[0-9]+", v), k
        assert c["resources"]["limits"]["nvidia.com/gpu"] == str(node.gpus_per_node)
        # the machine type on GKE, the VM size on AKS: the node label each cloud sets; Grace hosts also
        # by the kubelet's arch label, tolerating the taint GKE puts on Arm nodes
        arm = {"kubernetes.io/arch": "arm64"} if node.cpu_arch == "arm64" else {}
        assert t["spec"]["nodeSelector"] == {"node.kubernetes.io/instance-type": instance, **arm}
        assert t["spec"].get("tolerations", []) == ([{"key": "kubernetes.io/arch", "operator": "Equal",
                                                       "value": "arm64", "effect": "NoSchedule"}] if arm else [])
        assert all(isinstance(e["value"], str) for e in c["env"])
    assert not any("vpc.amazonaws.com/efa" in t["spec"]["containers"][0]["resources"]["limits"] for t in templates)
    assert not any(e in r.env for e in ("FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA"))


def test_gke_pods_attach_one_rdma_network_per_nic_and_use_the_gib_plugin():
    r, templates = pods("a4-highgpu-8g")
    ann = templates[0]["metadata"]["annotations"]
    assert ann["networking.gke.io/default-interface"] == "eth0"
    nics = json.loads(ann["networking.gke.io/interfaces"])
    # GCP-NET: eight CX7 NICs, one per GPU, each on its own RDMA VPC network
    assert nics[0] == {"interfaceName": "eth0", "network": "default"}
    assert [n["network"] for n in nics[1:]] == [f"rdma-{i}" for i in range(8)]
    assert r.env["NCCL_NET"] == "gIB" and "PerfKitBenchmarker" in r.env_sources["NCCL_NET"]
    assert any("nccl-gib" in n for n in r.notes)
    # A4X: four CX-7 NICs per VM
    _, a4x = pods("a4x-highgpu-4g")
    assert len(json.loads(a4x[0]["metadata"]["annotations"]["networking.gke.io/interfaces"])) == 1 + 4
    # A4X Max: 4 CX-8 SuperNICs in an 8-way rail-aligned topology (GCP-NET-2026): eight RDMA networks
    _, a4x_max = pods("a4x-maxgpu-4g-metal")
    nics = json.loads(a4x_max[0]["metadata"]["annotations"]["networking.gke.io/interfaces"])
    assert [n["network"] for n in nics[1:]] == [f"rdma-{i}" for i in range(8)]


@pytest.mark.parametrize("instance", ["Standard_ND128isr_GB200_v6", "Standard_ND128isr_GB300_v6",
                                      "Standard_ND96isr_H200_v5"])
def test_aks_pods_ask_for_the_infiniband_devices_and_azure_nccl_settings(instance):
    r, templates = pods(instance)
    limits = templates[0]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["rdma/rdma_shared_device_a"] == "1"
    assert "annotations" not in templates[0]["metadata"]
    assert r.env["NCCL_IB_PCI_RELAXED_ORDERING"] == "1" and "NCCL_NET" not in r.env
    assert any("AKSInfinibandSupport" in n for n in r.notes)


def test_eks_manifests_keep_no_annotations():
    _, templates = pods("ml.p6-b200.48xlarge")
    assert all("annotations" not in t["metadata"] for t in templates)


# --- --k8s-api jobset: the JobSet + Kueue of GKE's A4 / A4X guides (launch/jobset.toml [GKE]) -------

def _jobset(instance: str = "a4x-highgpu-4g", nodes: int = 2, **kw):
    r = render("k8s", make_plan(instance, nodes=nodes), K8sOptions(image=IMAGE, api="jobset", **kw))
    return r, r.request["items"][-1]


def test_jobset_manifest_golden():
    # jobset_types.go @ v0.12.0 (jobset.toml): one replicatedJob of an indexed Job, network.enableDNSHostnames,
    # failurePolicy.maxRestarts; the Kueue label of the cluster-toolkit gke-a4x example
    from launch_fixtures import check_golden

    r, _ = _jobset(queue="a4x")
    check_golden("k8s_jobset_a4x_x2.json", r.text)
    assert json.loads(r.text) == r.request and list(r.files) == ["jobset.json"]


def test_jobset_runs_one_indexed_job_with_the_pytorchjobs_pod():
    r, js = _jobset(nodes=3, queue="a4x")
    assert (js["apiVersion"], js["kind"]) == ("jobset.x-k8s.io/v1alpha2", "JobSet")
    assert js["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "a4x"
    (rjob,) = js["spec"]["replicatedJobs"]
    job = rjob["template"]["spec"]
    assert (rjob["replicas"], job["completionMode"], job["parallelism"], job["completions"]) == (1, "Indexed", 3, 3)
    pod = job["template"]
    # the same pod template as the PyTorchJob's, but for the restart policy a Job allows
    pytorchjob = render("k8s", make_plan("a4x-highgpu-4g", nodes=3), K8sOptions(image=IMAGE)).request["items"][-1]
    master = pytorchjob["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    # but for Kueue's topology annotation (3 A4X VMs fit in one NVLink sub-block: jobset.toml [topology])
    ann = dict(pod["metadata"]["annotations"])
    assert ann.pop("kueue.x-k8s.io/podset-required-topology") == "cloud.google.com/gce-topology-subblock"
    assert {**pod["metadata"], "annotations": ann} == master["metadata"]
    # torchrun meets on pod 0 of job 0, at the stable name JobSet gives it (jobset_types.go:380-381),
    # where the PyTorchJob's meet on its master's service
    cmd = pod["spec"]["containers"][0]["command"]
    name = js["metadata"]["name"]
    at = cmd.index("--rdzv-endpoint") + 1
    assert cmd[at] == f"{name}-node-0-0.{name}:29500"
    master_cmd = master["spec"]["containers"][0]["command"]
    assert master_cmd[at] == f"{name}-master-0:29500" and cmd[:at] + cmd[at + 1:] == master_cmd[:at] + master_cmd[at + 1:]
    without = {**pod["spec"], "containers": [{**pod["spec"]["containers"][0], "command": master_cmd}]}
    assert {k: v for k, v in without.items() if k != "restartPolicy"} == master["spec"]
    assert pod["spec"]["restartPolicy"] == "Never" and job["backoffLimit"] == 0
    assert cmd[cmd.index("--nnodes") + 1] == "3"
    # the queue label is the job's, not the ConfigMap's
    assert all("kueue.x-k8s.io/queue-name" not in i["metadata"]["labels"] for i in r.request["items"][:-1])
    assert any("JobSet controller and Kueue with a LocalQueue a4x" in n for n in r.notes)


def test_a_jobset_name_leaves_room_for_its_pod_names():
    """Pods are named <jobset>-node-<job>-<pod>-<5 letters>, a DNS label of at most 63 characters
    (jobset_webhook.go:243-256): with 100 nodes a name has 47 characters at most."""
    from trainplan.errors import TrainplanError
    from trainplan.launch.jobset import max_name_len

    assert (max_name_len(2), max_name_len(100)) == (48, 47)
    with pytest.raises(TrainplanError, match=r"k8s job name 'x{48}' is not valid here: .* at most 47 characters"):
        _jobset("a4-highgpu-8g", nodes=100, job_name="x" * 48)
    _, js = _jobset("a4-highgpu-8g", nodes=100, job_name="x" * 47)
    assert len(f"{js['metadata']['name']}-node-0-99-abcde") == 63


def test_queue_labels_a_pytorchjob_too_and_a_bad_queue_name_is_refused():
    from trainplan.errors import TrainplanError

    job = render("k8s", make_plan("a4-highgpu-8g"), K8sOptions(image=IMAGE, queue="team-a")).request["items"][-1]
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    with pytest.raises(TrainplanError, match=r"^Kueue queue name 'team a' is not valid here: .*\(--queue\)$"):
        render("k8s", make_plan("a4-highgpu-8g"), K8sOptions(image=IMAGE, queue="team a"))


def test_dry_run_shows_the_jobset(cli, tmp_path):
    p = tmp_path / "plan.json"
    p.write_text(make_plan("a4-highgpu-8g", nodes=2).to_json())
    code, out, err = cli("launch", "k8s", "--plan", str(p), "--dry-run", "--image", IMAGE, "--k8s-api", "jobset",
                         "--queue", "a4")
    assert code == 0, err
    assert [i["kind"] for i in json.loads(out)["items"]] == ["ConfigMap", "PersistentVolumeClaim", "JobSet"]
    assert "note: the cluster needs the JobSet controller and Kueue with a LocalQueue a4" in err
    code, out, err = cli("launch", "hyperpod-eks", "--plan", str(p), "--dry-run", "--image", IMAGE, "--queue", "a4")
    assert (code, err) == (2, "trainplan launch: error: --queue is an option of launch k8s, not of launch hyperpod-eks\n")


# --- IMEX: an NVLink domain across VMs (compute_domain.toml) -----------------------------------------

@pytest.mark.parametrize("instance", ["a4x-highgpu-4g", "a4x-maxgpu-4g-metal", "ml.p6e-gb200.36xlarge",
                                      "Standard_ND128isr_GB200_v6"])
def test_pods_across_an_nvl72_rack_claim_the_jobs_imex_channel(instance):
    """NVL72 racks rented as VMs of 4 GPUs: the plan puts tp / ep across VMs over NVLink, which needs
    an IMEX channel in every pod: the job's ComputeDomain (NVIDIA DRA driver) and each pod's claim."""
    r = render("k8s", make_plan(instance, nodes=3), K8sOptions(image=IMAGE, efa_devices=17))
    (cd,) = [i for i in r.request["items"] if i["kind"] == "ComputeDomain"]
    name = cd["metadata"]["name"].removesuffix("-compute-domain")
    assert cd["apiVersion"] == "resource.nvidia.com/v1beta1" and cd["spec"]["numNodes"] == 3
    template = cd["spec"]["channel"]["resourceClaimTemplate"]["name"]
    assert template == f"{name}-imex-channel"
    for replica in r.request["items"][-1]["spec"]["pytorchReplicaSpecs"].values():
        pod = replica["template"]["spec"]
        assert pod["resourceClaims"] == [{"name": "compute-domain-channel", "resourceClaimTemplateName": template}]
        assert pod["containers"][0]["resources"]["claims"] == [{"name": "compute-domain-channel"}]
    assert any("IMEX" in n and ("no AKS guide" in n) == instance.startswith("Standard_") for n in r.notes)


@pytest.mark.parametrize("instance, nodes", [("a4x-highgpu-4g", 1), ("a4-highgpu-8g", 2), ("ml.p6-b200.48xlarge", 4)])
def test_no_imex_channel_within_one_vm_or_an_8_gpu_domain(instance, nodes):
    r = render("k8s", make_plan(instance, nodes=nodes), K8sOptions(image=IMAGE))
    assert not any(i["kind"] == "ComputeDomain" for i in r.request["items"])
    pod = r.request["items"][-1]["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert "resourceClaims" not in pod and "claims" not in pod["containers"][0]["resources"]


# --- Kueue topology-aware scheduling on GKE (jobset.toml [topology]) -------------------------------

def _pod_annotations(js):
    return js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"].get("annotations", {})


@pytest.mark.parametrize("instance, nodes, want", [
    # cluster-toolkit gke-a4x nccl-jobset-example: a job inside one 18-VM NVLink sub-block is required there
    ("a4x-highgpu-4g", 18, ("kueue.x-k8s.io/podset-required-topology", "cloud.google.com/gce-topology-subblock")),
    ("a4x-maxgpu-4g-metal", 2, ("kueue.x-k8s.io/podset-required-topology", "cloud.google.com/gce-topology-subblock")),
    # more than one sub-block: a required level would never admit it; preferred packs it
    ("a4x-highgpu-4g", 19, ("kueue.x-k8s.io/podset-preferred-topology", "cloud.google.com/gce-topology-subblock")),
    # gke-a4 example: the NVLink domain is the VM
    ("a4-highgpu-8g", 2, ("kueue.x-k8s.io/podset-preferred-topology", "kubernetes.io/hostname")),
])
def test_gke_jobset_asks_kueue_for_the_nvlink_domains_topology_level(instance, nodes, want):
    _, js = _jobset(instance, nodes=nodes, queue="q")
    tas = {k: v for k, v in _pod_annotations(js).items() if k.startswith("kueue.x-k8s.io/")}
    assert tas == dict([want])


@pytest.mark.parametrize("instance, kw", [("a4x-highgpu-4g", {}), ("Standard_ND128isr_GB200_v6", {"queue": "q"}),
                                          ("ml.p6e-gb200.36xlarge", {"queue": "q", "efa_devices": 17})])
def test_no_topology_annotation_without_kueue_or_gke_levels(instance, kw):
    _, js = _jobset(instance, nodes=2, **kw)
    assert not any(k.startswith("kueue.x-k8s.io/") for k in _pod_annotations(js))
