"""Context parallelism as each exchange runs it: communication per layer and transient memory.

A rank holds tokens = micro_batch * s / cp of every sequence (load-balanced causal chunks). With
`kv` the bytes of this rank's K and V (bf16, kv heads / tp) and `qo` those of its Q and attention
output, one layer's attention exchanges (TransformerEngine
transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py, `cp_comm_type`):

  p2p       AttnFuncWithCPAndKVP2P: a ring of cp - 1 steps; each step sends this rank's current K/V
            block to the next rank while attention runs on the block received before, so the
            exchange hides behind the attention of the cp blocks. Backward sends K/V again and the
            dK/dV accumulators (2 (cp - 1) sends). Buffers: two K/V receive blocks in forward, K/V and
            dK/dV double buffers in backward (4 kv alive at the peak). Saved for backward: local q, k,
            v, out and the log-sum-exp, as without cp.
  a2a       AttnFuncWithCPAndQKVOA2A (Ulysses, Jacobs et al. 2023): all-to-all of q, k, v from
            sequence-sharded to head-sharded before attention, of the output back after it; backward
            the same for dO and dQ/dK/dV. Attention needs all of them: nothing overlaps it. Needs the
            heads (and kv heads) per tp rank divisible by cp. Saved for backward: q, k, v and out in
            the head-sharded layout (the same element count); the all-to-all outputs are one extra
            copy of q, k, v, out while they are exchanged.
  allgather AttnFuncWithCPAndKVAllGather: K/V all-gathered over the group (cp * kv per rank) while
            attention runs on the local block, so the gather hides behind 1/cp of the attention;
            backward gathers K/V again and reduce-scatters dK/dV (cp * kv each). The gathered K/V and
            dK/dV (2 cp kv) are alive during one layer's backward. torch's context_parallel
            (torchtitan, trainplan's trainer) rotates K/V this way by default.
  a2a+p2p   hierarchical: all-to-all inside groups of `a` ranks on one node (the heads split a
            ways), then a ring over the cp / a groups of the node-crossing dimension.

Window is the attention compute the exchange can hide behind ('attention' all of it, 'local' the
local block's 1/cp share, 'none' nothing); the overlap fraction is the profile's `overlap`.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainplan.stacks import a2a_group


@dataclass(frozen=True, slots=True)
class Exchange:
    """One collective of the CP exchange, per layer and micro-batch."""

    op: str  # comm.FACTORS key
    nbytes: float  # nccl-tests S of one call
    ranks: int  # group size
    stride: int  # rank stride of the group (costs/comm.span)
    calls_fwd: float  # calls per forward pass (recompute repeats these)
    calls_bwd: float  # calls per backward pass
    window: str  # 'attention' | 'local' | 'none'


def kv_qo_bytes(m, tokens: float, tp: int) -> tuple[float, float]:
    """(K and V, Q and output) bytes in bf16 of `tokens` on one tp rank; MLA exchanges its
    decompressed per-head K (nope + rope) and V."""
    if m.mla is not None:
        a = m.mla
        kv_elems = qo_elems = m.num_heads * (a.qk_nope_head_dim + a.qk_rope_head_dim + a.v_head_dim)
    else:
        kv_elems, qo_elems = 2 * m.kv_dim, 2 * m.q_dim
    return tokens * kv_elems / tp * 2, tokens * qo_elems / tp * 2


def exchanges(cp_comm: str, cp: int, tp: int, kv: float, qo: float, gpus_per_node: int) -> tuple[Exchange, ...]:
    """The collectives of one layer's attention for `cp_comm` (module doc). kv, qo: bytes on this rank."""
    if cp <= 1:
        return ()
    if cp_comm == "p2p":
        return (Exchange("p2p", kv, cp, tp, cp - 1, 2 * (cp - 1), "attention"),)
    if cp_comm == "a2a":
        return (Exchange("all_to_all", kv + qo, cp, tp, 1, 1, "none"),)
    if cp_comm == "allgather":
        return (Exchange("all_gather", kv * cp, cp, tp, 1, 1, "local"),
                Exchange("reduce_scatter", kv * cp, cp, tp, 0, 1, "none"))
    if cp_comm == "a2a+p2p":
        a = a2a_group(cp, tp, gpus_per_node)
        b = cp // a
        out = [Exchange("all_to_all", kv + qo, a, tp, 1, 1, "none")] if a > 1 else []
        if b > 1:
            out.append(Exchange("p2p", kv, b, tp * a, b - 1, 2 * (b - 1), "attention"))
        return tuple(out)
    raise ValueError(f"unknown cp_comm {cp_comm!r}")


def working_bytes(cp_comm: str, cp: int, tp: int, kv: float, qo: float, gpus_per_node: int) -> float:
    """Transient exchange buffers alive during one layer's attention (module doc), bytes on this rank."""
    if cp <= 1:
        return 0.0
    if cp_comm == "p2p":
        return 4 * kv
    if cp_comm == "a2a":
        return kv + qo
    if cp_comm == "allgather":
        return 2 * cp * kv
    a = a2a_group(cp, tp, gpus_per_node)
    return (kv + qo if a > 1 else 0.0) + (4 * kv if cp // a > 1 else 0.0)
