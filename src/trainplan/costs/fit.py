"""Does a layout fit, with what headroom, and how far can micro-batch and sequence length grow.

The search calls these thousands of times: each is a handful of memory_breakdown calls (pure
arithmetic, per-stage parameter counts cached per model), and the largest micro-batch or sequence
length is found by doubling then bisection, never by enumeration. Memory grows monotonically with
both, which is what makes bisection exact.
"""

from __future__ import annotations

from dataclasses import replace

from trainplan.costs.memory import memory_breakdown
from trainplan.layout import Layout

# Upper limits of the doubling search: far beyond any GPU memory (a guard, not a model limit).
MAX_MICRO_BATCH = 1 << 20
MAX_SEQ_LEN = 1 << 26


def capacity(job, capacity_bytes: float | None = None) -> float:
    """Usable device memory per GPU: the GPU's memory unless the caller gives one."""
    return float(job.cluster.gpu.memory_bytes if capacity_bytes is None else capacity_bytes)


def headroom(job, layout: Layout, capacity_bytes: float | None = None) -> float:
    """Bytes left on the worst GPU (negative when it does not fit), device-level total."""
    return capacity(job, capacity_bytes) - memory_breakdown(job, layout).total


def fits(job, layout: Layout, capacity_bytes: float | None = None) -> bool:
    return headroom(job, layout, capacity_bytes) >= 0


def max_micro_batch(job, layout: Layout, capacity_bytes: float | None = None) -> int:
    """Largest micro-batch that fits with the rest of the layout unchanged; 0 if even 1 does not."""
    cap = capacity(job, capacity_bytes)
    return _largest(lambda mb: memory_breakdown(job, layout.with_(micro_batch=mb)).total <= cap,
                    MAX_MICRO_BATCH)


def max_seq_len(job, layout: Layout, capacity_bytes: float | None = None) -> int:
    """Longest sequence that fits with the rest of the layout unchanged; 0 if none does.

    With context parallelism the sequence stays a multiple of 2 * cp (each rank holds two chunks
    for causal load balancing, as torchtitan and Megatron do).
    """
    cap = capacity(job, capacity_bytes)
    step = 2 * layout.cp if layout.cp > 1 else 1

    def ok(k: int) -> bool:
        w = replace(job.workload, seq_len=k * step)
        return memory_breakdown(replace(job, workload=w), layout).total <= cap

    return _largest(ok, MAX_SEQ_LEN // step) * step


def _largest(ok, limit: int) -> int:
    """Largest n in [1, limit] with ok(n), for ok monotone (true then false); 0 if ok(1) is false."""
    if not ok(1):
        return 0
    lo = 1
    hi = 2
    while hi <= limit and ok(hi):
        lo, hi = hi, hi * 2
    hi = min(hi, limit + 1)  # ok(hi) is false or hi is past the limit
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo
