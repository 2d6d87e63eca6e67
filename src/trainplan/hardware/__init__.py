"""GPUs, nodes and clusters: the hardware half of a job."""

from trainplan.hardware.catalog import (
    cluster,
    find_gpu,
    find_node,
    gpus,
    network_env_rules,
    node_for_world,
    nodes,
    with_price,
)
from trainplan.hardware.types import ARCH_DTYPES, Cluster, EnvRule, GPUSpec, Network, NodeType

__all__ = [
    "ARCH_DTYPES", "Cluster", "EnvRule", "GPUSpec", "Network", "NodeType",
    "cluster", "find_gpu", "find_node", "gpus", "network_env_rules", "node_for_world", "nodes", "with_price",
]
