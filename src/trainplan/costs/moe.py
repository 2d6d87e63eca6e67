"""The MoE layer's own costs: how routed tokens reach their experts, and what uneven routing adds.

Per MoE layer and pass, on one GPU holding T tokens (after sequence parallel's split), top-k
routing, hidden size h, bf16 activations:

  alltoall  Megatron's MoEAlltoAllTokenDispatcher, torchtitan's ExpertParallel, trainplan's
            runtime/moe.py: dispatch and combine are each one all-to-all of the T*k routed copies,
            S = T*k*h*2 bytes (the bus-bandwidth convention of costs/comm.py counts the share that
            leaves the GPU); the slowest rank receives `moe_imbalance` x the mean, and waits for it.
  deepep    DeepEP's kernels (Zhao et al. 2025, DeepEP README: NVLink and RDMA in one kernel,
            overlapped with compute; hidden as far as the profile's tp_overlap). Inside one node:
            the alltoall bytes. Across N nodes (internode normal kernels; DeepSeek-V3 report,
            arXiv:2412.19437 sec. 3.2.2) a token crosses the network once per destination NODE,
            to the GPU of its own rail there, which forwards it over NVLink to the experts' GPUs:
            an all-to-all over the rail group (one GPU per node) of T * D copies, D = the expected
            distinct nodes of its k experts under uniform routing, M * (1 - (1 - 1/M)^k) over the
            M nodes it may reach (M = N, or node-limited routing's topk_groups groups of the
            model's num_groups, each group on N / num_groups nodes), then the k routed copies over
            NVLink inside each node. The ledger lists the two legs apart.
  allgather Megatron's MoEAllGatherTokenDispatcher: every rank all-gathers the tokens of the
            tp_ep group (the ep * etp contiguous ranks; S = T*ep*etp*h*2) and reduce-scatters the
            outputs; imbalance does not change the bytes (every rank gets every token) but still
            the expert GEMMs.

Expert tensor parallelism (etp > 1, layout.expert_groups) in Megatron-Core's alltoall dispatcher
(token_dispatcher.py MoEAlltoAllTokenDispatcher dispatch_postprocess / combine_preprocess): the
routed copies a rank received are all-gathered over the etp group before the expert GEMMs
(S = etp x the rank's a2a bytes) and the outputs reduce-scattered after, once each per pass;
`etp_gather` names that group (1: no gather, as when the tp ranks hold the same tokens). The
deepep (flex) dispatcher exchanges over the same tp_ep group; it is priced as its all-to-all plus
the same gather.

Expert GEMMs: the busiest rank runs `moe_imbalance` x the mean rows through its local experts
(costs/compute.py applies it to the routed-expert GEMMs), and the step waits for it.

Capacity (moe_capacity_factor c, GShard per-group capacity; Megatron-Core moe_utils.get_capacity):
each expert keeps at most ceil(c * T * k / E) of a rank's T*k routed copies, so no rank's experts
receive more than c x the balanced T*k rows (ep source ranks x E/ep experts x c*T*k/E), and the
busiest rank's load is min(imbalance, c) (c < 1 drops rows even under balanced routing). Megatron's
moe_pad_expert_input_to_capacity pads every expert to its capacity (token_dispatcher.py
MoEAlltoAllTokenDispatcher.preprocess: num_out_tokens = capacity * num_experts): exactly c x the
balanced rows, through the GEMMs and the all-to-all alike. `routed_load` is the one rule; compute,
the dispatcher's bytes and the memory of the dispatched copies all read it.

Router and permutation element-wise work (costs/compute.py, memory-bound): the router's fp32
logits, soft-max/sigmoid and top-k read and write E values per token; the permutation and its
inverse read and write the k routed copies.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainplan.layout import Layout
from trainplan.models.spec import ModelSpec

BF16_BYTES = 2
FP32_BYTES = 4
# Router passes over the E scores per token: logits written, read by the soft-max (or sigmoid),
# scores written, read by top-k (4 fp32 passes; the backward's are counted by compute.py's ratio).
ROUTER_PASSES = 4


@dataclass(frozen=True, slots=True)
class Exchange:
    """One collective the dispatcher issues, per call: op, bytes S, calls per step, hidden fraction."""

    op: str
    nbytes: float
    calls: float
    hidden: float  # fraction of the time the stack hides behind compute (before the window caps it)
    ranks: int = 0  # group size; 0 = the whole ep group
    stride: int = 1  # rank stride of the group (costs/comm.span)


def reached_nodes(m: ModelSpec, nodes: int) -> float:
    """Expected distinct nodes a token's k routed experts lie on, over an ep group spanning `nodes`
    nodes, experts spread evenly, routing uniform (module doc); node-limited routing
    (num_groups > 1) restricts a token to topk_groups groups' nodes."""
    k = m.moe.experts_per_token
    reach = nodes
    if m.moe.num_groups > 1:
        reach = min(nodes, m.moe.topk_groups * max(1, -(-nodes // m.moe.num_groups)))
    return reach * (1 - (1 - 1 / reach) ** k)


def routed_load(imbalance: float, capacity_factor: float | None, pad_to_capacity: bool, ep: int) -> float:
    """Routed rows the busiest rank's experts process, and its dispatcher moves, over the balanced
    share (module doc). Without ep every rank holds every expert: nothing to be uneven about.
    The memory model, which assumes balanced routing, calls it with imbalance 1."""
    busiest = imbalance if ep > 1 else 1.0
    if capacity_factor is None:
        return busiest
    return capacity_factor if pad_to_capacity else min(busiest, capacity_factor)


def layout_load(L: Layout, balanced: bool = False) -> float:
    """routed_load of a layout's execution settings; `balanced`: imbalance 1, the memory model's
    assumption."""
    ex = L.execution
    return routed_load(1.0 if balanced else ex.moe_imbalance, ex.moe_capacity_factor, ex.moe_pad_to_capacity, L.ep)


def router_bytes_per_token(m: ModelSpec) -> float:
    """HBM bytes per token of one MoE layer's router and (un)permutation, forward."""
    e, k, h = m.moe.num_experts, m.moe.experts_per_token, m.expert_dim  # copies are permuted at the expert width
    return ROUTER_PASSES * e * FP32_BYTES + 4 * k * h * BF16_BYTES


def dispatch_exchanges(m: ModelSpec, dispatcher: str, load: float, tokens: float, ep: int,
                       moe_layers: float, passes: float, hidden_overlap: float,
                       ep_nodes: int = 1, per_node: int = 0, etp_gather: int = 1) -> list[Exchange]:
    """The dispatcher's collectives per step on the slowest rank (module doc). `load`: its routed
    rows over the balanced share (routed_load; the all-gather dispatcher moves every token whatever
    it is). `tokens`: tokens of one micro-batch on this GPU entering the dispatcher (after sequence
    parallel's split); `moe_layers`: MoE layers on the stage; `passes`: forward + backward +
    recomputed forwards, per micro-batch, times micro-batches; `ep_nodes`, `per_node`: the NVLink
    domains the ep group spans and its ranks on each (costs/comm.Span domains, per_domain);
    `etp_gather`: the expert tensor-parallel group the routed copies are gathered over (contiguous
    ranks; 1: none). Tokens travel at the experts' width (m.expert_dim): a latent MoE dispatches
    after its down projection (Nemotron 3 LatentMoE)."""
    h = m.expert_dim
    if dispatcher == "allgather":
        gathered = tokens * ep * etp_gather * h * BF16_BYTES
        calls = moe_layers * passes
        group = ep * etp_gather if etp_gather > 1 else 0  # the tp_ep group, contiguous; else the ep group
        return [Exchange("all_gather", gathered, calls, 0.0, group), Exchange("reduce_scatter", gathered, calls, 0.0, group)]
    a2a = tokens * m.moe.experts_per_token * h * BF16_BYTES * load
    calls = 2 * moe_layers * passes  # dispatch and combine
    gather = [] if etp_gather <= 1 else [
        Exchange("all_gather", etp_gather * a2a, calls / 2, 0.0, etp_gather),
        Exchange("reduce_scatter", etp_gather * a2a, calls / 2, 0.0, etp_gather)]
    if ep <= 1:
        return gather
    if dispatcher != "deepep":
        return [Exchange("all_to_all", a2a, calls, 0.0), *gather]
    if ep_nodes <= 1:
        return [Exchange("all_to_all", a2a, calls, hidden_overlap), *gather]
    rail = tokens * reached_nodes(m, ep_nodes) * h * BF16_BYTES * load
    return [Exchange("all_to_all", rail, calls, hidden_overlap, ep_nodes, per_node),
            Exchange("all_to_all", a2a, calls, hidden_overlap, per_node, 1), *gather]
