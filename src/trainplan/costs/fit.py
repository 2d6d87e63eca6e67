"""Does a layout fit, with what headroom, and how far can micro-batch and sequence length grow.

One definition of "fits", called by the estimate, `trainplan fit`, the search's evaluator and
its longest-sequence answers:

    fits  <=>  need * (1 + memory_error) <= capacity

  * need: the memory model's device-level total for the worst GPU (costs/memory.py: allocated +
    allocator reserve + NCCL buffers + CUDA context, what nvidia-smi shows);
  * capacity: the memory the framework can use. The whole device (GPUSpec.memory_bytes), since
    need already counts what the CUDA context and NCCL take; a caller may give less (--capacity-gib);
  * memory_error: the uncertainty band, a relative error. 0 is the point estimate; the search uses
    the calibration profile's cross-validated peak-memory error so that a plan it recommends fits
    even when the model under-predicts by its usual error.

The search calls these thousands of times: each is a handful of memory_breakdown calls (pure
arithmetic, per-stage parameter counts cached per model), and the largest micro-batch or sequence
length is found by doubling then bisection, never by enumeration. Memory grows monotonically with
both, which is what makes bisection exact.

Longest sequence: a multiple of SEQ_GRANULE (and of 2 * cp: each context-parallel rank holds two
chunks for causal load balancing, as torchtitan and Megatron do). Training sequences are chosen in
such steps (attention kernels tile by 64-128 tokens, sequence parallelism needs a multiple of tp,
and published runs use multiples of 1K); a length to the token (19,849) is one nobody trains at,
and a coarser grid (2^k x {1, 1.25, 1.5, 1.75}) would hide up to a fifth of what fits.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from trainplan.costs.memory import memory_breakdown
from trainplan.layout import Layout

SEQ_GRANULE = 1024  # the longest sequence is a multiple of this (module docstring)
MAX_SEQ_LEN = 2**20  # and at most 1 Mi tokens: the answer stops there (a search cap, not a limit)
# Upper limit of the doubling search for micro-batches: far beyond any GPU memory (a guard).
MAX_MICRO_BATCH = 1 << 20


def capacity(job, capacity_bytes: float | None = None) -> float:
    """Memory per GPU the framework can use: the GPU's memory unless the caller gives one."""
    return float(job.cluster.gpu.memory_bytes if capacity_bytes is None else capacity_bytes)


def within(need_bytes: float, capacity_bytes: float, memory_error: float = 0.0) -> bool:
    """The fit rule: the need, widened by the relative memory error, stays within capacity."""
    return need_bytes * (1 + memory_error) <= capacity_bytes


def headroom(job, layout: Layout, capacity_bytes: float | None = None) -> float:
    """Bytes left on the worst GPU (negative when it does not fit), device-level total."""
    return capacity(job, capacity_bytes) - memory_breakdown(job, layout).total


def fits(job, layout: Layout, capacity_bytes: float | None = None, memory_error: float = 0.0) -> bool:
    return within(memory_breakdown(job, layout).total, capacity(job, capacity_bytes), memory_error)


def max_micro_batch(job, layout: Layout, capacity_bytes: float | None = None, memory_error: float = 0.0) -> int:
    """Largest micro-batch that fits with the rest of the layout unchanged; 0 if even 1 does not."""
    cap = capacity(job, capacity_bytes)
    return _largest(lambda mb: within(memory_breakdown(job, layout.with_(micro_batch=mb)).total, cap, memory_error),
                    1, MAX_MICRO_BATCH)


def seq_step(cp: int) -> int:
    """The granularity of the longest-sequence answer for context parallelism `cp`."""
    return math.lcm(SEQ_GRANULE, 2 * cp)


def longest_seq(ok: Callable[[int], bool], cp: int = 1, shortest: int = 0, limit: int = MAX_SEQ_LEN) -> int:
    """Longest multiple of seq_step(cp), from `shortest` up to `limit`, for which `ok(seq)` holds
    (ok monotone: true, then false); 0 when not even the shortest one does.

    `ok` is the caller's fit check at that sequence length (the search's evaluator, or
    `max_seq_len`'s memory model); this function owns the granularity and the bisection."""
    step = seq_step(cp)
    lo, hi = shortest_seq(cp, shortest) // step, limit // step
    if lo > hi or not ok(lo * step):
        return 0
    if ok(hi * step):
        return hi * step  # the cap: small models on many GPUs reach it in one check
    # At most 1024 multiples between the ends: plain bisection, about ten memory checks.
    return _bisect(lambda k: ok(k * step), lo, hi) * step


def shortest_seq(cp: int = 1, shortest: int = 0) -> int:
    """The first length `longest_seq` tries: `shortest` rounded up to a multiple of seq_step(cp)."""
    step = seq_step(cp)
    return max(1, -(-shortest // step)) * step


def max_seq_len(job, layout: Layout, capacity_bytes: float | None = None, memory_error: float = 0.0) -> int:
    """Longest sequence that fits with the rest of the layout unchanged; 0 if none does."""
    cap = capacity(job, capacity_bytes)

    def ok(seq: int) -> bool:
        w = replace(job.workload, seq_len=seq)
        return within(memory_breakdown(replace(job, workload=w), layout).total, cap, memory_error)

    return longest_seq(ok, layout.cp)


def _largest(ok, lo: int, hi: int) -> int:
    """Largest n in [lo, hi] with ok(n), for ok monotone (true then false); 0 if ok(lo) is false."""
    if lo > hi or not ok(lo):
        return 0
    good = lo
    n = max(2 * lo, lo + 1)
    while n <= hi and ok(n):
        good, n = n, 2 * n
    return _bisect(ok, good, min(n, hi + 1))  # ok(n) is false or n is past the limit


def _bisect(ok, good: int, bad: int) -> int:
    """Largest n in [good, bad) with ok(n), given ok(good) and not ok(bad) (or bad past the end)."""
    while bad - good > 1:
        mid = (good + bad) // 2
        if ok(mid):
            good = mid
        else:
            bad = mid
    return good
