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
        # the machine type on GKE, the VM size on AKS: the node label each cloud sets
        assert t["spec"]["nodeSelector"] == {"node.kubernetes.io/instance-type": instance}
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
