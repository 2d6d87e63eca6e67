"""Network facts are catalog data (instances.toml [<node>.network], network.toml), with sources."""

from __future__ import annotations

import pytest

from trainplan.hardware import find_node, network_env_rules, nodes
from trainplan.hardware.catalog import ENV_WHEN
from trainplan.hardware.types import NETWORK_KINDS
from trainplan.units import GBPS_TO_BYTES_PER_S


@pytest.mark.parametrize("name", sorted(nodes()))
def test_every_network_is_sourced_and_adds_up(name):
    """interfaces x interface_gbps is the node's bandwidth, the one number the cost model reads."""
    import tomllib
    from importlib import resources

    raw = tomllib.loads(resources.files("trainplan.hardware").joinpath("instances.toml").read_text())[name]
    net = find_node(name).network
    assert net.source and net.kind in NETWORK_KINDS
    if "interfaces" in raw["network"]:
        total_gbps = raw["network"]["interfaces"] * raw["network"]["interface_gbps"]
        assert total_gbps * GBPS_TO_BYTES_PER_S == find_node(name).inter_node_bandwidth


def test_aws_instances_are_efa_and_the_others_rdma_or_tcpxo():
    # EFA is AWS's alone; Azure and the reference systems use InfiniBand, Google Cloud RoCE (GPUDirect
    # RDMA) or, on A3 Mega, GPUDirect-TCPXO (instances.toml GCP-NET, AZ-GB200, AZ-H100)
    for n in nodes().values():
        assert (n.network.kind == "efa") == (n.cloud == "aws") == n.sagemaker, n.name
        assert n.cloud != "azure" or n.network.kind == "infiniband", n.name
        assert n.cloud != "gcp" or n.network.kind in ("roce", "tcpxo"), n.name


@pytest.mark.parametrize("name, interfaces, rdma", [
    # HARDWARE_FACTS.md 2.1 (EC2-AC): p6-b200 8x400G, p6-b300 16x400G, p5en 16x200G, p5 32x100G,
    # p4d 4x100G (EFA v1: RDMA read only, still GPUDirect), g6e.48xlarge 4 cards, no GPUDirect RDMA.
    ("ml.p6-b200.48xlarge", 8, True), ("ml.p6-b300.48xlarge", 16, True), ("ml.p5en.48xlarge", 16, True),
    ("ml.p5.48xlarge", 32, True), ("ml.p4d.24xlarge", 4, True), ("ml.g6e.48xlarge", 4, False),
    # sources disagree (17 network cards; 1600 vs 3200 Gbps): unknown, so k8s asks for --efa-devices
    ("ml.p6e-gb200.36xlarge", None, True),
    # p6e-gb300: no AWS page states its EFA devices (aws/eks-charts lists it as EFA-capable)
    ("ml.p6e-gb300.36xlarge", None, True),
])
def test_efa_devices_from_the_catalog(name, interfaces, rdma):
    net = find_node(name).network
    assert (net.interfaces, net.gpudirect_rdma) == (interfaces, rdma)


def test_environment_rules_are_sourced_and_known():
    rules = network_env_rules()
    # EFA's first, then what every target sets; Google Cloud's gIB and Azure's NCCL settings after (issue #26)
    assert [r.name for r in rules][:5] == ["FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "RDMAV_FORK_SAFE",
                                           "NCCL_SOCKET_IFNAME", "NCCL_DEBUG"]
    assert {r.when for r in rules[5:]} == {"roce", "azure_infiniband"}
    for r in rules:
        assert r.source and r.when in ENV_WHEN
