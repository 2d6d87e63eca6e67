"""The network environment of a training process: EFA (libfabric) and NCCL variables per node type.

Each variable comes with where its value comes from; `Rendered.env_sources` carries these into
--dry-run so a person can check them. Why trainplan sets them itself: the SageMaker SDK v3 torchrun
driver (sagemaker 3.27, `sagemaker/train/container_drivers/common/utils.py`,
`SM_EFA_NCCL_INSTANCES` / `SM_EFA_RDMA_INSTANCES`) sets FI_PROVIDER=efa only for
g4dn/g5/p3dn/p4d/p4de/p5/p5e/trn1, and FI_EFA_USE_DEVICE_RDMA=1 only for p4d/p4de/p5/p5e/trn1:
ml.p5en, ml.p6-b200, ml.p6-b300 and ml.p6e-gb200 get neither (shared/data/HARDWARE_FACTS.md 3.3).
Slurm and Kubernetes nodes get nothing from any driver.
"""

from __future__ import annotations

from trainplan.hardware.types import NodeType

SDK_DRIVER = "sagemaker 3.27 container_drivers/common/utils.py (SM_EFA_NCCL_INSTANCES, SM_EFA_RDMA_INSTANCES)"
EFA_DOC = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa.html"
NCCL_ENV_DOC = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"

# Instances whose EFA supports GPUDirect RDMA from the GPUs (HARDWARE_FACTS.md 2.1: EFA v1 on p4d/p4de
# is RDMA read only, v2+ read and write; the SDK driver enables it on p4d/p4de/p5/p5e; p5en, p6-b200,
# p6-b300 and p6e-gb200 have EFA v3/v4, which has RDMA read and write).
EFA_RDMA_INSTANCES = frozenset({
    "ml.p4d.24xlarge", "ml.p4de.24xlarge", "ml.p5.48xlarge", "ml.p5e.48xlarge", "ml.p5en.48xlarge",
    "ml.p6-b200.48xlarge", "ml.p6-b300.48xlarge", "ml.p6e-gb200.36xlarge",
})

# EFA interfaces per instance = what the EFA Kubernetes device plugin offers as vpc.amazonaws.com/efa
# (HARDWARE_FACTS.md 2.1 from EC2-AC: p6-b200 8x400G, p6-b300 16x400G, p5en 16x200G, p5/p5e 32x100G,
# p4d/p4de 4x100G, g6e.48xlarge 4 network cards). p6e-gb200 is left out: its sources disagree
# (17 network cards, 1600-3200 Gbps); pass --efa-devices for it.
EFA_DEVICES = {
    "ml.p6-b200.48xlarge": 8,
    "ml.p6-b300.48xlarge": 16,
    "ml.p5en.48xlarge": 16,
    "ml.p5e.48xlarge": 32,
    "ml.p5.48xlarge": 32,
    "ml.p4de.24xlarge": 4,
    "ml.p4d.24xlarge": 4,
    "ml.g6e.48xlarge": 4,
}


def has_efa(node: NodeType) -> bool:
    return "EFA" in node.inter_node_fabric


def network_env(node: NodeType, *, sagemaker: bool = False) -> tuple[dict[str, str], dict[str, str]]:
    """(environment, source per variable) for processes on `node`.

    On SageMaker the torchrun driver sets NCCL_SOCKET_IFNAME itself (to SM_NETWORK_INTERFACE_NAME),
    so it is left out there; elsewhere NCCL's bootstrap must avoid loopback and container bridges.
    """
    env: dict[str, str] = {}
    why: dict[str, str] = {}
    if has_efa(node):
        env["FI_PROVIDER"] = "efa"
        why["FI_PROVIDER"] = f"libfabric EFA provider for aws-ofi-nccl; {SDK_DRIVER} sets it for p4d/p5; {EFA_DOC}"
        if node.name in EFA_RDMA_INSTANCES:
            env["FI_EFA_USE_DEVICE_RDMA"] = "1"
            why["FI_EFA_USE_DEVICE_RDMA"] = (
                f"GPUDirect RDMA over EFA ({node.inter_node_fabric}); {SDK_DRIVER} sets it for p4d/p5"
            )
            env["RDMAV_FORK_SAFE"] = "1"
            why["RDMAV_FORK_SAFE"] = (
                f"rdma-core fork safety (data-loader workers fork after EFA registration); {SDK_DRIVER}"
            )
    if not sagemaker:
        env["NCCL_SOCKET_IFNAME"] = "^lo,docker"
        why["NCCL_SOCKET_IFNAME"] = (
            f"NCCL bootstrap on the host network: '^' excludes loopback and docker bridges; {NCCL_ENV_DOC}"
        )
    env["NCCL_DEBUG"] = "WARN"
    why["NCCL_DEBUG"] = f"NCCL prints the reason of a failure, not every init line; {NCCL_ENV_DOC}"
    return env, why
