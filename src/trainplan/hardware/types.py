"""Hardware as the planner sees it: a GPU, a node (instance type) and a cluster of nodes.

All fields are SI (bytes, bytes/s, FLOP/s, watts, dollars); the catalog files use the units their
sources print (GiB, TB/s, TFLOPS, Gbps) and are converted once, in `catalog.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Which element dtypes a GPU generation's tensor cores multiply. fp8 needs Hopper/Ada; fp4 (and the
# block-scaled formats built on fp8 and fp4) Blackwell's 5th-gen tensor cores. Which precision
# recipe runs where is the recipe registry's (precision.py, recipes.toml `archs`).
ARCH_DTYPES: dict[str, frozenset[str]] = {
    "ampere": frozenset({"fp32", "tf32", "bf16", "fp16"}),
    "ada": frozenset({"fp32", "tf32", "bf16", "fp16", "fp8"}),
    "hopper": frozenset({"fp32", "tf32", "bf16", "fp16", "fp8"}),
    "blackwell": frozenset({"fp32", "tf32", "bf16", "fp16", "fp8", "fp4"}),
}


@dataclass(frozen=True, slots=True)
class GPUSpec:
    """One GPU model. Every number comes from `sources` (field name -> citation)."""

    name: str  # catalog key, e.g. "b200-180gb" (the ids of trainplan-validation/1)
    display_name: str  # "NVIDIA B200 (SXM, HGX)"
    arch: str  # key of ARCH_DTYPES
    memory_bytes: int  # device memory the framework sees (AWS-visible GiB where known)
    hbm_bandwidth: float  # bytes/s
    peak_flops: dict[str, float]  # dense tensor-core FLOP/s per dtype (no 2:4 sparsity)
    matmul_ceiling: dict[str, float]  # measured best-shape matmul rate / dense peak, per dtype
    nvlink_bandwidth: float  # bytes/s per GPU per direction (0 = no NVLink, PCIe only)
    pcie_bandwidth: float  # bytes/s per direction, host link
    power_w: float
    aliases: tuple[str, ...] = ()
    sources: dict[str, str] = field(default_factory=dict)
    # gpus.toml field names whose number is an estimate (a conversion, an inference from sibling GPUs, an
    # assumption), not a vendor specification or a measurement; hardware/evidence.py reads it for the band
    estimated: tuple[str, ...] = ()

    def supports(self, dtype: str) -> bool:
        return dtype in ARCH_DTYPES[self.arch]

    def peak(self, dtype: str) -> float:
        """Dense peak FLOP/s for a tensor-core dtype (a recipe's peak_key: precision.Recipe.peak)."""
        return self.peak_flops[dtype]


# efa: AWS Elastic Fabric Adapter; infiniband: Azure ND and NVIDIA reference systems; roce: Google
# Cloud's GPUDirect RDMA over RoCE on ConnectX NICs (MRDMA: A4X, A4, A3 Ultra); tcpxo: Google Cloud's
# GPUDirect-TCPXO (A3 Mega), GPU memory over TCP without RDMA.
NETWORK_KINDS = ("efa", "infiniband", "roce", "tcpxo")
# The clouds a node type is rented on (instances.toml `cloud`; None: a reference system, not for rent).
CLOUDS = ("aws", "gcp", "azure")


@dataclass(frozen=True, slots=True)
class Network:
    """A node's inter-node network as launchers see it (instances.toml [<node>.network]); its
    bandwidth is NodeType.inter_node_bandwidth, the one number the cost model reads."""

    kind: str  # one of NETWORK_KINDS: decides the environment (network.toml) and the ledger tier
    interfaces: int | None  # NICs per node (EFA: vpc.amazonaws.com/efa devices); None = sources differ
    gpudirect_rdma: bool  # GPUs read and write over the NICs without a copy through host memory
    source: str


@dataclass(frozen=True, slots=True)
class EnvRule:
    """One environment variable a network needs (network.toml), and when it applies."""

    name: str
    value: str
    when: str  # "efa" | "gpudirect_rdma" | "host_network" | "always" | "roce" | "azure_infiniband"
    source: str


@dataclass(frozen=True, slots=True)
class NodeType:
    """One instance type (or any node of identical GPUs joined by one fabric)."""

    name: str  # as the cloud spells it: "ml.p6-b200.48xlarge", "a4-highgpu-8g", "Standard_ND128isr_GB200_v6"
    ec2_name: str | None  # "p6-b200.48xlarge"; None for non-AWS systems
    gpu: GPUSpec
    gpus_per_node: int
    nvlink_domain_gpus: int  # GPUs reachable over NVLink (72 in a GB200 NVL72 UltraServer)
    intra_node: str  # "nvswitch" | "pcie"
    inter_node_bandwidth: float  # bytes/s per node, all NICs together (EFA or InfiniBand)
    inter_node_fabric: str  # "EFA v4 (8x400 Gbps)": the sources' words, for people; code reads `network`
    network: Network
    host_memory_bytes: int | None  # None: no stored source gives it (host facts are shown, not modelled)
    vcpus: int | None
    local_nvme_bytes: int | None
    cpu_arch: str  # "x86_64" | "arm64"
    price_per_hour: float | None  # USD per node-hour; None when not sold on demand
    price_kind: str  # what the price is: "ec2-on-demand us-east-1", "sagemaker ...", "user"
    spot: bool
    sagemaker: bool  # a SageMaker training instance type
    placement: str | None = None  # "ultraserver" when jobs need an UltraServer placement
    cloud: str | None = None  # one of CLOUDS; None for reference systems
    price_date: str | None = None  # ISO date the price was read at its source (sources["price"])
    checkpoint_storage: str | None = None  # reliability.toml storage the goodput prices (None: its default)
    aliases: tuple[str, ...] = ()
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def inter_node_bandwidth_per_gpu(self) -> float:
        return self.inter_node_bandwidth / self.gpus_per_node


@dataclass(frozen=True, slots=True)
class Cluster:
    node: NodeType
    nodes: int

    @property
    def num_gpus(self) -> int:
        return self.node.gpus_per_node * self.nodes

    @property
    def gpu(self) -> GPUSpec:
        return self.node.gpu

    @property
    def price_per_hour(self) -> float | None:
        p = self.node.price_per_hour
        return None if p is None else p * self.nodes
