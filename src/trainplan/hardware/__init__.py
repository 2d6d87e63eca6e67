"""GPUs, nodes and clusters: the hardware half of a job."""

from trainplan.hardware.catalog import cluster, find_gpu, find_node, gpus, nodes, with_price
from trainplan.hardware.types import ARCH_DTYPES, Cluster, GPUSpec, NodeType

__all__ = [
    "ARCH_DTYPES", "Cluster", "GPUSpec", "NodeType",
    "cluster", "find_gpu", "find_node", "gpus", "nodes", "with_price",
]
