"""`trainplan hardware [NAME] [--json]`: the GPU and instance catalogs, every number with its source."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainplan.errors import TrainplanError
from trainplan.units import GB, TFLOPS, GiB

# What run() needs is imported there: `trainplan --help` reads this module for NAME and HELP alone (cli.py).
if TYPE_CHECKING:
    from trainplan.hardware import GPUSpec, NodeType

NAME = "hardware"
HELP = "list the GPU and instance catalogs, or show one entry with its sources"


def add_arguments(p) -> None:
    p.add_argument("name", nargs="?", help="a GPU (b200-180gb) or instance (ml.p6-b200.48xlarge) name")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def gpu_dict(g: GPUSpec) -> dict:
    from trainplan.precision import registry

    return {
        "kind": "gpu",
        "name": g.name,
        "display_name": g.display_name,
        "arch": g.arch,
        "memory_gib": g.memory_bytes / GiB,
        "hbm_bandwidth_gb_per_s": g.hbm_bandwidth / GB,
        "peak_tflops_dense": {k: v / TFLOPS for k, v in g.peak_flops.items()},
        "matmul_ceiling": g.matmul_ceiling,
        "precision_recipes": [r.name for r in registry().values() if r.runs_on(g)],
        "nvlink_gb_per_s_per_direction": g.nvlink_bandwidth / GB,
        "pcie_gb_per_s": g.pcie_bandwidth / GB,
        "power_w": g.power_w,
        "aliases": list(g.aliases),
        "estimated": list(g.estimated),  # fields that are estimates, not specifications or measurements
        "sources": g.sources,
    }


def node_dict(n: NodeType) -> dict:
    from dataclasses import asdict

    d = asdict(n)
    return {
        "kind": "instance",
        "name": n.name,
        "ec2_name": n.ec2_name,
        "gpu": n.gpu.name,
        "gpus_per_node": n.gpus_per_node,
        "gpu_memory_gib_total": n.gpus_per_node * n.gpu.memory_bytes / GiB,
        "nvlink_domain_gpus": n.nvlink_domain_gpus,
        "intra_node": n.intra_node,
        "inter_node_gbps": n.inter_node_bandwidth * 8 / 1e9,
        "inter_node_fabric": n.inter_node_fabric,
        "host_memory_gib": None if n.host_memory_bytes is None else n.host_memory_bytes / GiB,
        "vcpus": n.vcpus,
        "local_nvme_gb": None if n.local_nvme_bytes is None else n.local_nvme_bytes / GB,
        "cpu_arch": n.cpu_arch,
        "price_usd_per_hour": n.price_per_hour,
        "price_kind": d["price_kind"],
        "price_date": n.price_date,
        "cloud": n.cloud,
        "checkpoint_storage": n.checkpoint_storage,
        "spot": n.spot,
        "sagemaker": n.sagemaker,
        "placement": n.placement,
        "aliases": list(n.aliases),
        "sources": n.sources,
    }


def _find(name: str):
    from trainplan.hardware import find_gpu, find_node, gpus, nodes

    try:
        return gpu_dict(find_gpu(name))
    except TrainplanError:
        pass
    try:
        return node_dict(find_node(name))
    except TrainplanError:
        names = list(gpus()) + list(nodes())
        from trainplan.errors import unknown

        raise unknown("GPU or instance", name, names) from None


def run(args) -> int:
    from trainplan.commands._common import print_json
    from trainplan.hardware import gpus, nodes

    if args.name:
        entry = _find(args.name)
        if args.json:
            print_json(entry)
        else:
            width = max(len(k) for k in entry)
            for k, v in entry.items():
                if k != "sources":
                    print(f"{k:<{width}}  {v}")
            print("sources:")
            for k, v in entry["sources"].items():
                print(f"  {k}: {v}")
        return 0
    if args.json:
        print_json({"gpus": [gpu_dict(g) for g in gpus().values()],
                    "instances": [node_dict(n) for n in nodes().values()]})
        return 0
    print(f"{'GPU':<16}{'arch':<10}{'mem GiB':>8}{'HBM TB/s':>9}{'bf16 TF':>9}{'fp8 TF':>8}{'NVLink GB/s':>12}")
    for g in gpus().values():
        fp8 = g.peak_flops.get("fp8")
        print(f"{g.name:<16}{g.arch:<10}{g.memory_bytes / GiB:>8.0f}{g.hbm_bandwidth / 1e12:>9.2f}"
              f"{g.peak_flops['bf16'] / TFLOPS:>9.0f}{(fp8 / TFLOPS if fp8 else 0):>8.0f}"
              f"{g.nvlink_bandwidth / GB:>12.0f}")
    print()
    print(f"{'instance':<24}{'GPUs':<16}{'net Gbps':>9}{'$/h':>9}  price")
    for n in nodes().values():
        price = f"{n.price_per_hour:>9.2f}" if n.price_per_hour else f"{'-':>9}"
        gpu_s = f"{n.gpus_per_node}x {n.gpu.name}"
        print(f"{n.name:<24}{gpu_s:<16}{n.inter_node_bandwidth * 8 / 1e9:>9.0f}{price}  {n.price_kind[:20]}")
    return 0
