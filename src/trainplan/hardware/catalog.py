"""Load the GPU and node catalogs (gpus.toml, instances.toml) and convert their units once."""

from __future__ import annotations

import functools
import math
import os
from dataclasses import replace
from pathlib import Path

from trainplan.errors import TrainplanError, unknown
from trainplan.hardware.types import (
    ARCH_DTYPES,
    CLOUDS,
    NETWORK_KINDS,
    Cluster,
    EnvRule,
    GPUSpec,
    Network,
    NodeType,
)
from trainplan.parsing import check_keys, parse_json, read_json, read_toml
from trainplan.units import GB, GBPS_TO_BYTES_PER_S, TFLOPS, GiB

_HERE = Path(__file__).parent
# A sanity bound on a price per node-hour (the dearest instance lists ~$100/h): it keeps costs
# finite and catches a price typed in cents or per year.
MAX_PRICE_USD_PER_HOUR = 1e6

_GPU_KEYS = {
    "display_name", "aliases", "arch", "memory_gib", "hbm_tbps", "peak_tflops", "matmul_ceiling",
    "nvlink_gb_per_s", "pcie_gb_per_s", "power_w", "sources", "estimated",
}
# gpus.toml fields that hold a number and so may be marked `estimated`
_GPU_NUMBERS = ("memory_gib", "hbm_tbps", "peak_tflops", "matmul_ceiling", "nvlink_gb_per_s", "pcie_gb_per_s",
                "power_w")
_NODE_KEYS = {
    "ec2_name", "aliases", "gpu", "gpus", "nvlink_domain_gpus", "intra_node", "inter_node_gbps",
    "inter_node_fabric", "host_memory_gib", "vcpus", "local_nvme_gb", "cpu_arch",
    "price_usd_per_hour", "price_kind", "spot", "sagemaker", "placement", "network", "sources",
    "cloud", "price_date", "checkpoint_storage",
}
_NETWORK_KEYS = {"kind", "interfaces", "interface_gbps", "gpudirect_rdma", "source"}
_ENV_KEYS = {"value", "when", "source"}
ENV_WHEN = ("efa", "gpudirect_rdma", "host_network", "always", "roce", "azure_infiniband")


def _gpu(name: str, d: dict) -> GPUSpec:
    check_keys(d, _GPU_KEYS, f"gpus.toml [{name}]", required=_GPU_KEYS - {"aliases", "estimated"})
    assert d["arch"] in ARCH_DTYPES, (name, d["arch"])
    estimated = tuple(d.get("estimated", ()))
    assert set(estimated) <= set(_GPU_NUMBERS), (name, estimated)
    return GPUSpec(
        name=name,
        display_name=d["display_name"],
        arch=d["arch"],
        memory_bytes=int(d["memory_gib"] * GiB),
        hbm_bandwidth=d["hbm_tbps"] * 1e12,
        peak_flops={k: v * TFLOPS for k, v in d["peak_tflops"].items()},
        matmul_ceiling=dict(d["matmul_ceiling"]),
        nvlink_bandwidth=d["nvlink_gb_per_s"] * GB,
        pcie_bandwidth=d["pcie_gb_per_s"] * GB,
        power_w=float(d["power_w"]),
        aliases=tuple(d.get("aliases", ())),
        sources=dict(d["sources"]),
        estimated=estimated,
    )


def _node(name: str, d: dict, gpus: dict[str, GPUSpec]) -> NodeType:
    # host facts no stored source gives stay out (None), as a price that is not published does
    optional = {"ec2_name", "aliases", "price_usd_per_hour", "placement", "cloud", "price_date",
                "checkpoint_storage", "host_memory_gib", "vcpus", "local_nvme_gb"}
    check_keys(d, _NODE_KEYS, f"instances.toml [{name}]", required=_NODE_KEYS - optional)
    # a SageMaker instance type is an AWS one; the other clouds say theirs
    cloud = d.get("cloud", "aws" if d["sagemaker"] else None)
    assert cloud is None or cloud in CLOUDS, (name, cloud)
    assert "price_usd_per_hour" not in d or "price" in d["sources"], (name, "a price needs sources.price")
    storage = d.get("checkpoint_storage")
    if storage is not None:
        from trainplan.hardware.reliability import storages

        assert storage in storages(), (name, storage)
    return NodeType(
        name=name,
        ec2_name=d.get("ec2_name"),
        gpu=gpus[d["gpu"]],
        gpus_per_node=d["gpus"],
        nvlink_domain_gpus=d["nvlink_domain_gpus"],
        intra_node=d["intra_node"],
        inter_node_bandwidth=d["inter_node_gbps"] * GBPS_TO_BYTES_PER_S,
        inter_node_fabric=d["inter_node_fabric"],
        network=_network(name, d["network"]),
        host_memory_bytes=_scaled(d.get("host_memory_gib"), GiB),
        vcpus=d.get("vcpus"),
        local_nvme_bytes=_scaled(d.get("local_nvme_gb"), GB),
        cpu_arch=d["cpu_arch"],
        price_per_hour=d.get("price_usd_per_hour"),
        price_kind=d["price_kind"],
        spot=d["spot"],
        sagemaker=d["sagemaker"],
        placement=d.get("placement"),
        cloud=cloud,
        price_date=d.get("price_date"),
        checkpoint_storage=storage,
        aliases=tuple(d.get("aliases", ())),
        sources=dict(d["sources"]),
    )


def _scaled(value, unit: float) -> int | None:
    return None if value is None else int(value * unit)


def _network(name: str, d: dict) -> Network:
    where = f"instances.toml [{name}.network]"
    check_keys(d, _NETWORK_KEYS, where, required={"kind", "gpudirect_rdma", "source"})
    assert d["kind"] in NETWORK_KINDS, (where, d["kind"])
    return Network(kind=d["kind"], interfaces=d.get("interfaces"), gpudirect_rdma=d["gpudirect_rdma"],
                   source=d["source"])


@functools.cache
def network_env_rules() -> tuple[EnvRule, ...]:
    """network.toml: the environment variables each kind of network needs, in file order."""
    rules = []
    for name, d in read_toml(_HERE / "network.toml").items():
        check_keys(d, _ENV_KEYS, f"network.toml [{name}]", required=_ENV_KEYS)
        assert d["when"] in ENV_WHEN, (name, d["when"])
        rules.append(EnvRule(name=name, value=str(d["value"]), when=d["when"], source=d["source"]))
    return tuple(rules)


@functools.cache
def gpus() -> dict[str, GPUSpec]:
    """All GPUs by catalog name."""
    return {k: _gpu(k, v) for k, v in read_toml(_HERE / "gpus.toml").items()}


@functools.cache
def nodes() -> dict[str, NodeType]:
    """All node types (instances and reference systems) by name, with user price overrides applied."""
    g = gpus()
    table = {k: _node(k, v, g) for k, v in read_toml(_HERE / "instances.toml").items()}
    return _apply_price_overrides(table, os.environ.get("TRAINPLAN_PRICES"))


def _apply_price_overrides(table: dict[str, NodeType], spec: str | None) -> dict[str, NodeType]:
    """TRAINPLAN_PRICES: a JSON file {instance: usd_per_hour} or inline 'name=price,name=price'."""
    if not spec:
        return table
    if spec.endswith(".json"):
        raw = read_json(spec, "TRAINPLAN_PRICES file")
    elif spec.strip().startswith("{"):
        raw = parse_json(spec, "TRAINPLAN_PRICES")
    else:
        raw = None
    if raw is not None:
        if not isinstance(raw, dict):
            raise TrainplanError("TRAINPLAN_PRICES: expected a JSON object {instance: usd_per_hour}")
        pairs = list(raw.items())
    else:
        pairs = [_pair(p) for p in spec.split(",") if p.strip()]
    out = dict(table)
    for name, price in pairs:
        node = find_node(name.strip(), out)
        out[node.name] = replace(node, price_per_hour=_price(name, price), price_kind="user override")
    return out


def _pair(text: str) -> tuple[str, str]:
    name, eq, price = text.partition("=")
    if not eq or not name.strip():
        raise TrainplanError(
            f"TRAINPLAN_PRICES: {text.strip()!r} is not name=price; set it to 'ml.p5.48xlarge=98.32,...' "
            "or to the path of a .json file {instance: usd_per_hour}"
        )
    return name, price


def _price(name: str, price) -> float:
    """A finite, positive price in dollars per hour (JSON true is not a price)."""
    usd = None
    if isinstance(price, (int, float, str)) and not isinstance(price, bool):
        try:
            usd = float(price)
        except ValueError:
            pass
    if usd is None:
        raise TrainplanError(f"TRAINPLAN_PRICES: price for {name!r} is not a number: {price!r}")
    if not (math.isfinite(usd) and 0 < usd <= MAX_PRICE_USD_PER_HOUR):
        raise TrainplanError(
            f"TRAINPLAN_PRICES: price for {name!r} must be a positive, finite number of dollars per hour "
            f"(at most {MAX_PRICE_USD_PER_HOUR:g}), got {price!r}"
        )
    return usd


def _lookup(kind: str, name: str, table: dict, hint: str):
    key = name.strip().lower()
    for k, v in table.items():
        if key == k.lower() or key in (a.lower() for a in v.aliases):
            return v
    aliases = {a.lower(): k for k, v in table.items() for a in v.aliases}
    raise unknown(kind, name, table, hint, aliases)


def find_gpu(name: str) -> GPUSpec:
    return _lookup("GPU", name, gpus(), "See `trainplan hardware`.")


def find_node(name: str, table: dict[str, NodeType] | None = None) -> NodeType:
    return _lookup("instance", name, table or nodes(), "See `trainplan hardware`.")


def with_price(node: NodeType, usd_per_hour: float) -> NodeType:
    """A node with a price the user gave on the command line."""
    if not (math.isfinite(usd_per_hour) and 0 < usd_per_hour <= MAX_PRICE_USD_PER_HOUR):
        raise TrainplanError(f"--price must be a positive number of dollars per hour, got {usd_per_hour}")
    return replace(node, price_per_hour=usd_per_hour, price_kind="user override")


def node_for_world(node: NodeType, world: int) -> NodeType:
    """The same instance type with `world` GPUs: the part of one node a demo or a plan fitted to
    the processes started (runtime/world.py fit_to_world) runs on."""
    if world == node.gpus_per_node:
        return node
    return replace(node, gpus_per_node=world, nvlink_domain_gpus=min(node.nvlink_domain_gpus, world))


def cluster(instance: str, nodes_count: int) -> Cluster:
    if nodes_count <= 0:
        raise TrainplanError(f"--nodes must be a positive integer, got {nodes_count}")
    return Cluster(find_node(instance), nodes_count)
