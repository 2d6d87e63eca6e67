"""Google Cloud and Azure instances (issue #26): catalog data with sources, NVL72 racks rented as
VMs of 4 GPUs placed as such, prices with their dates, each cloud's checkpoint storage."""

from __future__ import annotations

import tomllib
from importlib import resources

import pytest

from trainplan.costs import comm
from trainplan.costs.comm import span
from trainplan.hardware import find_node, nodes
from trainplan.hardware.reliability import reliability, storages
from trainplan.hardware.types import CLOUDS
from trainplan.models import resolve
from trainplan.search import space

RAW = tomllib.loads(resources.files("trainplan.hardware").joinpath("instances.toml").read_text())
RENTED_ELSEWHERE = [n for n in nodes().values() if n.cloud in ("gcp", "azure")]


def test_every_cloud_has_its_blackwell_and_hopper_entries():
    by_cloud = {c: {n.name for n in nodes().values() if n.cloud == c} for c in CLOUDS}
    # the names the issue asks for, as each cloud spells them
    assert {"a4-highgpu-8g", "a4x-highgpu-4g", "a4x-maxgpu-4g-metal", "a3-ultragpu-8g",
            "a3-megagpu-8g"} <= by_cloud["gcp"]
    assert {"Standard_ND128isr_GB200_v6", "Standard_ND128isr_GB300_v6", "Standard_ND96isr_H100_v5",
            "Standard_ND96isr_H200_v5"} <= by_cloud["azure"]
    assert "ml.p6-b200.48xlarge" in by_cloud["aws"]


@pytest.mark.parametrize("node", RENTED_ELSEWHERE, ids=lambda n: n.name)
def test_every_new_entry_is_sourced_and_every_price_dated(node):
    raw = RAW[node.name]
    assert node.sources["hardware"] and node.sources["price"] and node.network.source
    assert not node.sagemaker and node.ec2_name is None
    # a price comes with the day it was read; a price left out says why in price_kind
    assert ("price_usd_per_hour" in raw) == ("price_date" in raw)
    assert node.price_kind
    assert node.checkpoint_storage in storages()


def test_every_aws_price_is_dated_too():
    for n in nodes().values():
        if n.cloud == "aws" and n.price_per_hour is not None:
            assert n.price_date, n.name


def test_unsourced_host_facts_stay_out():
    # GCP-TERMS gives the A4X its 4 GPUs and 72-GPU domain; no stored source gives its vCPUs,
    # memory or Titanium SSD, so the catalog holds none (and `trainplan hardware` prints None)
    a4x = find_node("a4x-highgpu-4g")
    assert (a4x.vcpus, a4x.host_memory_bytes, a4x.local_nvme_bytes) == (None, None, None)
    assert find_node("a4-highgpu-8g").vcpus == 224  # SKYPILOT-GCP


@pytest.mark.parametrize("name, per_vm, domain, gbps, kind", [
    # GCP-NET: A4 eight CX7 = 3,200 Gbps GPU to GPU; A4X four CX-7 = 1,600 Gbps; GCP-TERMS: 18 A4X = 72 GPUs
    ("a4-highgpu-8g", 8, 8, 3200, "roce"),
    ("a4x-highgpu-4g", 4, 72, 1600, "roce"),
    ("a3-megagpu-8g", 8, 8, 1600, "tcpxo"),
    # GCP-NET-2026: A4X Max 4 CX-8 SuperNICs = 3,200 Gbps, 8-way rail-aligned; GCP-A4XMAX: 18 instances = 72 GPUs
    ("a4x-maxgpu-4g-metal", 4, 72, 3200, "roce"),
    # AZ-GB200: 4 GPUs and 4x 400 Gb/s InfiniBand per VM, 18 VMs per NVL72 rack; AZ-H100: 8x 400 Gb/s
    ("Standard_ND128isr_GB200_v6", 4, 72, 1600, "infiniband"),
    ("Standard_ND96isr_H100_v5", 8, 8, 3200, "infiniband"),
    # AZ-GB300: 800 Gbps InfiniBand per GPU, 4 GPUs per VM, 18 VMs per rack; AZ-H200: 8 ports of 400 Gb/s
    ("Standard_ND128isr_GB300_v6", 4, 72, 3200, "infiniband"),
    ("Standard_ND96isr_H200_v5", 8, 8, 3200, "infiniband"),
])
def test_gpus_per_vm_nvlink_domain_and_fabric(name, per_vm, domain, gbps, kind):
    n = find_node(name)
    assert (n.gpus_per_node, n.nvlink_domain_gpus, n.network.kind) == (per_vm, domain, kind)
    assert n.inter_node_bandwidth * 8 / 1e9 == pytest.approx(gbps)


def test_an_nvl72_rented_as_vms_of_4_keeps_tp_and_ep_groups_on_nvlink():
    a4x, a4 = find_node("a4x-highgpu-4g"), find_node("a4-highgpu-8g")
    # the search offers tp up to its MAX_TP inside the 72-GPU domain, not only the 4 GPUs of one VM
    m = resolve("llama-3.1-405b")
    assert max(space.tp_options(m, a4x)) > a4x.gpus_per_node
    assert max(space.tp_options(m, a4)) == 8
    # an expert group of 16 ranks, 1 apart, spans 4 VMs of the rack and stays on NVLink ...
    assert comm.tier_name(span(16, 1, a4x), a4x) == "nvlink"
    # ... while on 8-GPU A4 VMs it crosses the RoCE network, in its own ledger tier
    assert comm.tier_name(span(16, 1, a4), a4) == "roce"
    # 72 is the domain: a group of 144 leaves it
    assert comm.tier_name(span(144, 1, a4x), a4x) == "roce"


def test_the_goodput_saves_to_the_nodes_cloud_storage():
    from trainplan.estimate import job_goodput
    from trainplan.hardware import Cluster
    from trainplan.job import Job, Workload
    from trainplan.layout import Layout

    m = resolve("llama-3.1-8b")
    lay = Layout(dp_shard=16, sharding="fsdp")
    gcp = job_goodput(Job(m, Cluster(find_node("a4-highgpu-8g"), 2), Workload(seq_len=4096, global_batch=64)), lay, 5.0)
    az = job_goodput(Job(m, Cluster(find_node("Standard_ND96isr_H100_v5"), 2), Workload(seq_len=4096, global_batch=64)),
                     lay, 5.0)
    aws = job_goodput(Job(m, Cluster(find_node("ml.p6-b200.48xlarge"), 2), Workload(seq_len=4096, global_batch=64)),
                      lay, 5.0)
    assert (gcp.storage, az.storage, aws.storage) == ("gcp-managed-lustre-1000", "azure-managed-lustre-500",
                                                      reliability().storage.name)
    # Azure Managed Lustre's 500 MB/s per TiB saves the same checkpoint twice as slowly (same capacity)
    assert az.save_s == pytest.approx(2 * gcp.save_s)


@pytest.mark.parametrize("name", ["a4x-maxgpu-4g-metal", "Standard_ND128isr_GB300_v6"])
def test_blackwell_ultra_racks_are_gb300_vms_of_4_placed_as_such(name):
    n, gb300 = find_node(name), find_node("gb300-nvl72")
    assert n.gpu.name == "gb300-288gb" and n.cpu_arch == "arm64"
    # scale-out per GPU: 800 Gb/s, as NVIDIA's own GB300 tray (one 800 Gb/s ConnectX-8 per GPU, NV-RA)
    assert n.inter_node_bandwidth_per_gpu == gb300.inter_node_bandwidth_per_gpu == 800e9 / 8
    m = resolve("llama-3.1-405b")
    assert max(space.tp_options(m, n)) > n.gpus_per_node
    # an expert group of 16 ranks spans 4 VMs of the rack on NVLink; 144 ranks leave the 72-GPU domain
    assert comm.tier_name(span(16, 1, n), n) == "nvlink"
    assert comm.tier_name(span(144, 1, n), n) == comm.NETWORK_TIERS[n.network.kind]


def test_a4x_max_host_facts_no_google_page_gives_stay_out():
    n = find_node("gcp-a4x-max")
    assert n.name == "a4x-maxgpu-4g-metal"
    assert (n.vcpus, n.host_memory_bytes, n.local_nvme_bytes, n.price_per_hour) == (None, None, None, None)
    # ND H200 v5: the host figures nhc-genconf read on the VM (Azure/azurehpc-health-checks)
    h200 = find_node("nd-h200-v5")
    assert (h200.vcpus, h200.host_memory_bytes // 2**30) == (96, 1820)


@pytest.mark.parametrize("name", ["a4x-maxgpu-4g-metal", "Standard_ND128isr_GB300_v6", "Standard_ND96isr_H200_v5"])
def test_each_new_network_is_measured_in_a_profile_or_says_it_is_an_estimate(name):
    from trainplan.machine.profile import packaged

    node = find_node(name)
    measured = [p for p in packaged() if p.gpu == node.gpu.name
                and p.find("collective", instance=name, op="all_reduce", tier="efa") is not None]
    if measured:  # a published nccl-tests run across the network, cited in the profile's table
        assert "machine/profiles" in node.network.source
    else:
        assert "estimate" in node.network.source and "not a measurement" in node.network.source
