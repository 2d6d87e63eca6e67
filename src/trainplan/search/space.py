"""The search space: which parallel meshes, precisions, checkpointing levels and node counts exist.

Everything here is arithmetic on the model and the hardware (no memory or time model): the
candidates it yields are valid by construction (they pass `layout.check_layout` once a micro-batch
and gradient accumulation are chosen). Pruning rules, and why each one is safe:

  * tp is a power of two inside the NVLink domain and divides the attention heads: tensor
    parallelism all-reduces (or all-gathers / reduce-scatters) activations twice per layer, which
    only NVLink bandwidth hides (Narayanan et al. 2021, "Efficient Large-Scale Language Model
    Training on GPU Clusters", section 3.3: "tensor model parallelism within a server").
  * pp either divides the layers or is a power of two (uneven last stages are allowed, as in
    Megatron's uneven pipeline split), at most 32 stages: deeper pipelines only add bubble.
  * cp is a power of two dividing the sequence, and every CP rank keeps at least `MIN_CP_TOKENS`
    tokens: below that the ring exchange of K/V is no longer hidden behind the attention compute.
    4096 is the shortest per-rank length NVIDIA's hand-tuned recipes use (Megatron-Bridge Llama 3.1
    70B and 405B at sequence 8192 with cp=2, records M123/M127/M187 of the shared dev set).
  * data parallelism is sharded: ZeRO-1 (the distributed optimizer) moves the same bytes as plain
    data parallelism (reduce-scatter + all-gather = all-reduce) and holds less, so plain DP is
    dominated and only offered when dp = 1. The sharded forms offered are ZeRO-1, FSDP over all of
    dp, and HSDP (FSDP inside a node, replicas across nodes).
  * ep (MoE only) is a power of two dividing the experts and the ranks the expert folding leaves
    it (layout.expert_groups: dp_shard * cp * tp / etp). With tp > 1 every etp dividing tp is
    offered, etp = tp and etp = 1 first (torchtitan's two foldings; Megatron-Core runs the sizes
    between too, and layout.expert_refusal skips those for a torch-style stack): a smaller etp
    keeps each expert wider, so its GEMMs are wider and its routed copies are gathered over fewer
    ranks, at the price of tp / etp x the expert weights per rank before sharding. Dense models
    and tp = 1 leave etp to the stack (None).
  * With the sequence searched (priority context) pp stays 1: a 1F1B pipeline keeps pp
    micro-batches in flight on its first stage, pp x (layers / pp) = as many layers' activations
    as no pipeline (Narayanan et al. 2021, section 2.2.1), so it cannot lengthen the sequence;
    it only splits the model states, which FSDP splits as well.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from trainplan.hardware.types import NodeType
from trainplan.models.spec import ModelSpec

MAX_PP = 32
MAX_TP = 8  # beyond 8 a GEMM slice of a 4-8k hidden size is too thin to run near peak
MAX_EP = 64
MIN_CP_TOKENS = 4096
MAX_CP = 32


@dataclass(frozen=True, slots=True)
class Mesh:
    """The parallel degrees of one candidate: dp_replicate * dp_shard * tp * pp * cp GPUs."""

    tp: int
    pp: int
    cp: int
    ep: int
    dp_replicate: int
    dp_shard: int
    sharding: str
    etp: int | None = None  # MoE with tp > 1: a divisor of tp; else None (the stack's)

    @property
    def dp(self) -> int:
        return self.dp_replicate * self.dp_shard

    def layout_fields(self) -> dict:
        return {"tp": self.tp, "pp": self.pp, "cp": self.cp, "ep": self.ep, "etp": self.etp,
                "dp_replicate": self.dp_replicate, "dp_shard": self.dp_shard,
                "sharding": self.sharding}


def powers_of_two(limit: int) -> list[int]:
    out, p = [], 1
    while p <= limit:
        out.append(p)
        p *= 2
    return out


def tp_options(m: ModelSpec, node: NodeType) -> list[int]:
    domain = max(node.nvlink_domain_gpus, 1) if node.intra_node != "pcie" else node.gpus_per_node
    return [t for t in powers_of_two(min(MAX_TP, domain))
            if m.num_heads % t == 0 and (m.num_kv_heads % t == 0 or t % m.num_kv_heads == 0)]


def pp_options(m: ModelSpec) -> list[int]:
    limit = min(MAX_PP, m.num_layers)
    return sorted({p for p in range(1, limit + 1) if m.num_layers % p == 0} | set(powers_of_two(limit)))


def cp_options(seq_len: int | None) -> list[int]:
    """seq_len None: the sequence is searched (priority context), so every power of two is open."""
    if seq_len is None:
        return powers_of_two(MAX_CP)
    return [c for c in powers_of_two(MAX_CP) if seq_len % c == 0 and (c == 1 or seq_len // c >= MIN_CP_TOKENS)]


def etp_options(m: ModelSpec, tp: int) -> list[int | None]:
    """Expert tensor-parallel sizes searched (module doc)."""
    if m.moe is None or tp == 1:
        return [None]
    return [tp, 1, *(d for d in range(2, tp) if tp % d == 0)]


def ep_options(m: ModelSpec, dp_shard: int, cp: int, tp: int = 1, etp: int | None = None) -> list[int]:
    if m.moe is None:
        return [1]
    ranks = dp_shard * cp * tp // (tp if etp is None else etp)
    return [e for e in powers_of_two(min(MAX_EP, m.moe.num_experts))
            if m.moe.num_experts % e == 0 and ranks % e == 0]


def shardings(dp: int, gpus_per_node: int, tp: int, cp: int) -> list[tuple[int, int, str]]:
    """(dp_replicate, dp_shard, sharding) choices for a data-parallel degree dp."""
    if dp == 1:
        return [(1, 1, "none")]
    # FSDP over all of dp first: it holds the least, so when it does not fit, neither do the
    # others (the engine skips them).
    out = [(1, dp, "fsdp"), (1, dp, "zero1")]
    # HSDP: shard over the data-parallel ranks of one node, replicate across nodes
    # (torchtitan puts dp_shard inside dp_replicate, and cp, tp innermost).
    local = gpus_per_node // (tp * cp) if gpus_per_node % (tp * cp) == 0 else 0
    if 1 < local < dp and dp % local == 0:
        out.append((dp // local, local, "fsdp"))
    return out


def meshes(m: ModelSpec, node: NodeType, nodes: int, seq_len: int | None) -> Iterator[Mesh]:
    """Every mesh of `nodes` nodes that passes the pruning rules above."""
    gpus = node.gpus_per_node * nodes
    for tp in tp_options(m, node):
        for pp in (pp_options(m) if seq_len is not None else [1]):
            for cp in cp_options(seq_len):
                if gpus % (tp * pp * cp):
                    continue
                dp = gpus // (tp * pp * cp)
                for rep, shard, sharding in shardings(dp, node.gpus_per_node, tp, cp):
                    for etp in etp_options(m, tp):
                        for ep in ep_options(m, shard, cp, tp, etp):
                            yield Mesh(tp, pp, cp, ep, rep, shard, sharding, etp)


def vp_options(num_layers: int, pp: int) -> list[int]:
    """Virtual stages per pipeline rank for the interleaved schedule: 2, and the depths that give
    each chunk 1, 2 or 4 layers (NVIDIA's recipes go as deep as one layer per chunk, e.g. vp=12
    for Nemotron-4 340B on pp=8), when the layers divide evenly, with or without the embedding and
    loss counted in the split."""
    out = {2} if num_layers >= 2 * pp else set()
    # layers that divide over the ranks, or do once the embedding and the loss count as a layer
    # each (models/stages.balanced_split: 126 + 2 layers of Llama 3 405B on 16 ranks x vp 8)
    for n in (num_layers, num_layers + 2):
        if n % pp == 0:
            per_stage = n // pp
            out |= {per_stage // c for c in (1, 2, 4) if per_stage % c == 0 and per_stage // c >= 2}
    return sorted(out)


def node_counts(max_nodes: int) -> list[int]:
    """Node counts searched up to `max_nodes`: every count up to 8, then 2^k x {1, 1.25, 1.5, 1.75}.

    Data-parallel degrees have to divide a global batch, and batches are products of small primes,
    so counts like 37 nodes rarely admit a layout; the grid keeps the step between neighbours at
    most 25%, and the engine refines around the best count (every count between its neighbours).
    """
    out = set(range(1, min(8, max_nodes) + 1))
    p = 8
    while p <= max_nodes:
        out |= {c for c in (p, p * 5 // 4, p * 3 // 2, p * 7 // 4) if c <= max_nodes}
        p *= 2
    out.add(max_nodes)
    return sorted(out)


# Checkpointing from least to most recompute. "partial" sits between selective and full: the
# engine bisects on how many layers per stage are fully recomputed. Offloading to host comes
# last: it also recomputes everything and adds host traffic.
AC_LADDER = ("none", "selective", "partial", "full", "offload")
