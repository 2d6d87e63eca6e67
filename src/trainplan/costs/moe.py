"""The MoE layer's own costs: how routed tokens reach their experts, and what uneven routing adds.

Per MoE layer and pass, on one GPU holding T tokens (after sequence parallel's split), top-k
routing, hidden size h, bf16 activations:

  alltoall  Megatron's MoEAlltoAllTokenDispatcher, torchtitan's ExpertParallel, trainplan's
            runtime/moe.py: dispatch and combine are each one all-to-all of the T*k routed copies,
            S = T*k*h*2 bytes (the bus-bandwidth convention of costs/comm.py counts the share that
            leaves the GPU); the slowest rank receives `moe_imbalance` x the mean, and waits for it.
  deepep    the same bytes through DeepEP's kernels (Zhao et al. 2025, DeepEP README: NVLink and
            RDMA in one kernel, overlapped with compute): hidden as far as the profile's tp_overlap.
  allgather Megatron's MoEAllGatherTokenDispatcher: every rank all-gathers the ep group's tokens
            (S = T*ep*h*2) and reduce-scatters the outputs; imbalance does not change the bytes
            (every rank gets every token) but still the expert GEMMs.

Expert GEMMs: the busiest rank runs `moe_imbalance` x the mean rows through its local experts
(costs/compute.py applies it to the routed-expert GEMMs), and the step waits for it.

Router and permutation element-wise work (costs/compute.py, memory-bound): the router's fp32
logits, soft-max/sigmoid and top-k read and write E values per token; the permutation and its
inverse read and write the k routed copies.
"""

from __future__ import annotations

from dataclasses import dataclass

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


def router_bytes_per_token(m: ModelSpec) -> float:
    """HBM bytes per token of one MoE layer's router and (un)permutation, forward."""
    e, k, h = m.moe.num_experts, m.moe.experts_per_token, m.hidden_size
    return ROUTER_PASSES * e * FP32_BYTES + 4 * k * h * BF16_BYTES


def dispatch_exchanges(m: ModelSpec, dispatcher: str, imbalance: float, tokens: float, ep: int,
                       moe_layers: float, passes: float, hidden_overlap: float) -> list[Exchange]:
    """The dispatcher's collectives per step on the slowest rank (module doc). `tokens`: tokens of
    one micro-batch on this GPU after sequence parallel's split; `moe_layers`: MoE layers on the
    stage; `passes`: forward + backward + recomputed forwards, per micro-batch, times micro-batches."""
    h = m.hidden_size
    if dispatcher == "allgather":
        gathered = tokens * ep * h * BF16_BYTES
        calls = moe_layers * passes
        return [Exchange("all_gather", gathered, calls, 0.0), Exchange("reduce_scatter", gathered, calls, 0.0)]
    a2a = tokens * m.moe.experts_per_token * h * BF16_BYTES * imbalance
    hidden = hidden_overlap if dispatcher == "deepep" else 0.0
    return [Exchange("all_to_all", a2a, 2 * moe_layers * passes, hidden)]
