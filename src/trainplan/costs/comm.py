"""Collective times over the tier a process group crosses.

Time of one collective on n ranks moving a buffer of S bytes (nccl-tests doc/PERFORMANCE.md,
HARDWARE_FACTS.md 5.1): t = latency + S * factor / busbw, with the bus-bandwidth factor
2(n-1)/n for all-reduce and (n-1)/n for all-gather, reduce-scatter and all-to-all (S = the whole
gathered / reduced array; for all-to-all, each rank's own send buffer, 1/n of it per peer), and 1
for a point-to-point send of S bytes.

Where busbw comes from (HARDWARE_FACTS.md 5.3):
  * inside one NVLink domain: the per-GPU NVLink bandwidth (one direction) x a measured ring
    efficiency: 0.80 for all-gather / reduce-scatter (8x H200: 361-363 of 450 GB/s) and 0.82 for
    all-reduce (8x H200 ring 367 of 450; 8x A100 235 of 300 = 0.78; B200 740 of 900). An
    all-to-all is no ring: every rank sends to every other at once through the switches. Its one
    public NVLink 5 measurement (8x B200: 537.1 of 900 GB/s) holds on every NVLink 5 domain (the
    same link and switch generation in HGX B200 and GB200 NVL72); NVLink 4 has none, so it keeps
    the all-gather's efficiency;
  * a group that spans nodes is run hierarchically (MLE-net "inter-node speed depends on
    intra-node speed"): only (k-1)/k of S/g per GPU crosses the network for an all-gather over k
    nodes with g group members per node (an all-to-all is not reduced on the way: (n-g)/n of each
    GPU's own S leaves the node, network_bytes), and NCCL drives every NIC of the node in parallel, so the
    network phase takes factor_k * S / (g * B_nic_per_gpu * eff_net), eff_net = 0.73 (4x p6-b200:
    36.5 of 50 GB/s per GPU). The NVLink phase is pipelined with it; the slower of the two counts.
    Check: 4x p6-b200 all-reduce of 4 GiB predicts 22.0 ms; measured 22.05 ms (MLE-net);
  * at 128-1024 nodes the same holds while the fabric is non-blocking and rail-aligned: NCCL's
    rings join GPU i of one node to GPU i of the next (one rail), so a data-parallel group with
    one member per node (stride >= the node, e.g. tp = 8) runs on its own GPU's NIC, and the eight
    such groups of a node, all reducing at once, each get B_nic_per_gpu; a group with g members
    per node gets g of them. A fabric oversubscribed above a pod (Meta's Llama 3 cluster: full
    bisection inside 3,072-GPU pods, 1:7 at the aggregation layer, arXiv:2407.21783 sec. 3.3.1)
    slows the groups that leave a pod; no catalog instance publishes such a ratio (EC2
    UltraClusters and DGX SuperPOD describe non-blocking fabrics), so none is modelled;
  * PCIe-only nodes (L40S) use the PCIe link per direction with the same efficiency.
Latency (NCCL src/graph/tuning.cc, Simple protocol, HARDWARE_FACTS.md 5.2): ring
  base 8.4 us + (n-1 steps, 2(n-1) for all-reduce) x (3.4 us on NVLink, 14 us per network step);
all-reduce takes the lower of that and the tree latency 8.4 + 2((ppn-1)*3.4 + log2(nodes)*14) us.

Where a machine profile (trainplan/machine) has a table for the collective on the tier the group
crosses, its measured bus bandwidth at the message size and group size replaces the efficiency above:
t = max(latency, S * factor / busbw(S, n)), latency the table's small-message floor or NCCL's as above
(nccl-tests' busbw at a size already holds the latency of that size). A network (efa) table holds for
groups laid out as it was measured: every GPU of each node in the group, on the instance it names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainplan.hardware.types import NodeType

EFF_NVLINK_AG_RS = 0.80  # 8x H200 ring all-gather/reduce-scatter busbw 361-363 / 450 GB/s (MLE-net)
EFF_NVLINK_AR = 0.82  # 8x H200 ring all-reduce 367 / 450; 8x B200 740 / 900 @4 GiB (MLE-net)
# 8x B200 all-to-all busbw 537.1 / 900 GB/s: MooreThreads/SimuMax configs/system/b200_bf16_ceperm.json
# @e691807 networks.high_intra_node.op.all2all efficient_factor (the B200 machine profile's table)
EFF_NVLINK5_A2A = 537.1 / 900
NVLINK5_BW = 900e9  # bytes/s per GPU per direction: NVLink 5 (B200, GB200, B300, GB300)
EFF_NET = 0.73  # 4x p6-b200 all-reduce: 36.5 of 50 GB/s per GPU of EFA (MLE-net)
BASE_LAT_S = 8.4e-6  # NCCL baseLat Ring/Tree Simple
NVLINK_STEP_S = 3.4e-6  # NCCL hwLat NVLink Ring Simple
PCIE_STEP_S = 5.7e-6  # NCCL hwLat PCIe Ring Simple
NET_STEP_S = 14e-6  # NCCL hwLat NET Ring/Tree Simple

FACTORS = {  # busbw factor (nccl-tests doc/PERFORMANCE.md) as a function of ranks n
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "p2p": lambda n: 1.0,
}


@dataclass(frozen=True, slots=True)
class Span:
    """How a process group lies on the machines: n ranks, g per NVLink domain, k domains."""

    n: int
    per_domain: int
    domains: int
    nodes: int  # nodes the group touches (for the network latency terms)

    @property
    def tier(self) -> str:
        return "nvlink" if self.domains == 1 else "efa"


def span(size: int, stride: int, node: NodeType) -> Span:
    """Where a group of `size` ranks, `stride` apart in rank order, lands on nodes of `node`.

    Ranks fill nodes in order, so a group whose ranks are `stride` apart keeps
    max(1, domain // stride) members on each NVLink domain while stride < domain.
    """
    d = max(1, node.nvlink_domain_gpus)
    g_node = node.gpus_per_node
    per_domain = 1 if stride >= d else min(size, d // stride)
    per_node = 1 if stride >= g_node else min(size, g_node // stride)
    return Span(size, per_domain, max(1, -(-size // per_domain)), max(1, -(-size // per_node)))


def _link_bw(node: NodeType) -> float:
    g = node.gpu
    return g.nvlink_bandwidth if g.nvlink_bandwidth > 0 and node.intra_node == "nvswitch" else g.pcie_bandwidth


def measured_time(op: str, nbytes: float, sp: Span, node: NodeType, machine) -> tuple[float, tuple[str, ...]] | None:
    """(seconds, notes) from the machine profile's table for this collective and tier, or None."""
    if machine is None or sp.n <= 1 or nbytes <= 0:
        return None
    if sp.domains == 1:
        if node.intra_node != "nvswitch":
            return None
        tier = "nvlink"
    elif sp.per_domain == node.gpus_per_node:
        tier = "efa"
    else:
        return None
    t = machine.find("collective", instance=node.name, op=op, tier=tier)
    if t is None:
        return None
    lk = t.lookup(bytes=nbytes, ranks=sp.n)
    lat = t.latency_us * 1e-6 if t.latency_us is not None else collective_time(op, 1.0, sp, node)
    factor = FACTORS[op](sp.n)
    notes = tuple(f"collective {op} {tier}: {o}" for o in lk.outside)
    return max(lat, nbytes * factor / (lk.value * 1e9)), notes


def collective_time(op: str, nbytes: float, sp: Span, node: NodeType, net_eff: float = EFF_NET) -> float:
    """Seconds for one collective of `nbytes` (nccl-tests S) over a group laid out as `sp`."""
    n = sp.n
    if n <= 1 or nbytes <= 0:
        return 0.0
    local_step = NVLINK_STEP_S if node.intra_node == "nvswitch" else PCIE_STEP_S
    eff = EFF_NVLINK_AR if op == "all_reduce" else EFF_NVLINK_AG_RS
    if op == "all_to_all" and node.intra_node == "nvswitch" and node.gpu.nvlink_bandwidth >= NVLINK5_BW:
        eff = EFF_NVLINK5_A2A
    if op == "p2p":
        if sp.domains > 1:
            return BASE_LAT_S + NET_STEP_S + network_seconds(network_bytes(op, nbytes, sp), node, net_eff)
        return BASE_LAT_S + local_step + nbytes / (_link_bw(node) * eff)
    f = FACTORS[op]
    g = sp.per_domain
    # all-to-all: S is split over the n peers, (g-1)/n of it to the node's own peers (module doc)
    local_share = (g - 1) / n if op == "all_to_all" else f(g)
    t_local = nbytes * local_share / (_link_bw(node) * eff) if g > 1 else 0.0
    t_net = network_seconds(network_bytes(op, nbytes, sp), node, net_eff)
    steps = 2 * (n - 1) if op == "all_reduce" else n - 1
    inter_steps = (2 if op == "all_reduce" else 1) * (sp.nodes - 1)
    lat = BASE_LAT_S + (steps - inter_steps) * local_step + inter_steps * NET_STEP_S
    if op == "all_reduce":
        ppn = max(1, n // sp.nodes)
        tree = BASE_LAT_S + 2 * ((ppn - 1) * local_step + math.log2(sp.nodes) * NET_STEP_S)
        lat = min(lat, tree)
    return lat + max(t_local, t_net)


def network_bytes(op: str, nbytes: float, sp: Span) -> float:
    """Bytes one GPU sends over the inter-node network in one call, as the hierarchical schedule
    above moves them: factor_k x S / g for a collective over k domains of g members (the rest of
    S stays on NVLink), all of S for a point-to-point send between domains; 0 inside one domain.
    An all-to-all is not hierarchical: S is this GPU's own send buffer, 1/n of it for each peer
    (nccl-tests alltoall: busbw = algbw x (n-1)/n), so the n-g peers on other domains get
    S x (n-g)/n of it, with no division by g (every GPU sends its own)."""
    if sp.n <= 1 or sp.domains <= 1 or nbytes <= 0:
        return 0.0
    if op == "p2p":
        return nbytes
    if op == "all_to_all":
        return nbytes * (sp.n - sp.per_domain) / sp.n
    return nbytes * FACTORS[op](sp.domains) / sp.per_domain


def network_seconds(nbytes_per_gpu: float, node: NodeType, net_eff: float = EFF_NET) -> float:
    """Bandwidth time of the bytes one GPU sends over the network: each GPU drives its share of
    the node's NICs (inter_node_bandwidth_per_gpu = node EFA bandwidth / GPUs per node), not all."""
    if nbytes_per_gpu <= 0:
        return 0.0
    return nbytes_per_gpu / (node.inter_node_bandwidth_per_gpu * net_eff)


def traffic_per_token(comm, gpus: int, tokens_per_step: float) -> tuple[float, float]:
    """(bytes crossing the inter-node network, bytes sent between GPUs over any link) per trained
    token, all GPUs together, from a ledger. Every GPU is in one group of each dimension, so bytes
    per GPU x GPUs / tokens per step is the cluster's traffic per token; host copies of offloaded
    activations cross PCIe to host memory, not between GPUs, and are left out."""
    per_token = gpus / tokens_per_step
    network = sum(e.network_bytes for e in comm)
    between = sum(e.bytes for e in comm if e.dimension != "offload")
    return network * per_token, between * per_token


@dataclass(frozen=True, slots=True)
class CommEntry:
    """One line of the communication ledger: a collective of one parallel dimension, per step."""

    collective: str  # all_gather | reduce_scatter | all_reduce | all_to_all | p2p | d2h | h2d
    dimension: str  # dp | fsdp | tp | pp | cp | ep | offload (activations to host memory)
    tier: str  # nvlink | efa | pcie
    bytes: float  # bytes each GPU sends per step (busbw convention: S * factor)
    seconds: float  # time of all calls per step, if nothing overlapped
    exposed_seconds: float  # part of `seconds` not hidden behind compute
    count: int  # calls per step
    network_bytes: float = 0.0  # of `bytes`, what crosses the inter-node network per step (network_bytes())

    def to_dict(self) -> dict:
        return {"collective": self.collective, "dimension": self.dimension, "tier": self.tier,
                "bytes": self.bytes, "seconds": self.seconds, "exposed_seconds": self.exposed_seconds,
                "count": self.count, "network_bytes": self.network_bytes}


# The ledger's name for each network kind (hardware/types.py NETWORK_KINDS)
NETWORK_TIERS = {"efa": "efa", "infiniband": "ib", "roce": "roce", "tcpxo": "tcpxo"}


def tier_name(sp: Span, node: NodeType) -> str:
    if sp.domains > 1:
        return NETWORK_TIERS[node.network.kind]
    return "nvlink" if node.intra_node == "nvswitch" else "pcie"


def bytes_on_wire(op: str, nbytes: float, n: int) -> float:
    """Bytes one GPU sends for one call (nccl-tests: S x busbw factor)."""
    return 0.0 if n <= 1 else nbytes * FACTORS[op](n)
