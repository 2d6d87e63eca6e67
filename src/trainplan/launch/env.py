"""The network environment of a training process: the rules of hardware/network.toml applied to a
node's network (instances.toml [<node>.network]).

Each variable comes with its source; `Rendered.env_sources` carries these into --dry-run so a
person can check them.
"""

from __future__ import annotations

from trainplan.hardware import network_env_rules
from trainplan.hardware.types import NodeType


def has_efa(node: NodeType) -> bool:
    return node.network.kind == "efa"


def network_env(node: NodeType, *, sagemaker: bool = False) -> tuple[dict[str, str], dict[str, str]]:
    """(environment, source per variable) for processes on `node`, in network.toml's order."""
    applies = {
        "efa": has_efa(node),
        "gpudirect_rdma": has_efa(node) and node.network.gpudirect_rdma,
        "host_network": not sagemaker,
        "always": True,
        "roce": node.network.kind == "roce",
        "azure_infiniband": node.cloud == "azure" and node.network.kind == "infiniband",
    }
    env: dict[str, str] = {}
    why: dict[str, str] = {}
    for rule in network_env_rules():
        if applies[rule.when]:
            env[rule.name] = rule.value
            why[rule.name] = rule.source
    return env, why
