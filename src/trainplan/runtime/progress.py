"""Progress inside one optimizer step: with many micro-batches (gradient accumulation) a step can
take minutes (a 4M-token batch on one small node: 512 micro-batches), and the per-step line
(metrics.Recorder) would leave the user looking at nothing. Rank 0 says where the step is, at most
once every EVERY_S seconds:

    step 1: micro-batch 16/512, 41 s, ~22 min per step

Torch-free: the trainer passes a `sync` that waits for the device, called only before a line is
printed (a GPU runs behind the Python loop that queues its kernels; the count must be what ran).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

EVERY_S = 10.0  # seconds between two progress lines within a step (and before the first one)


def duration(seconds: float) -> str:
    """41 s, 22 min, 3.5 h."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class StepProgress:
    """`start(step, micro_batches)` when a step begins, `done(k)` after its k-th micro-batch."""

    def __init__(self, enabled: bool, every_s: float = EVERY_S, sync: Callable[[], None] = lambda: None,
                 clock: Callable[[], float] = time.monotonic, out=None):
        self.enabled, self.every_s, self.sync, self.clock = enabled, every_s, sync, clock
        self.out = out
        self.step, self.total, self.t0, self.last = 0, 0, 0.0, 0.0

    def start(self, step: int, micro_batches: int) -> None:
        self.step, self.total = step, micro_batches
        self.t0 = self.last = self.clock()

    def done(self, k: int) -> None:
        if not self.enabled or k >= self.total or self.clock() - self.last < self.every_s:
            return
        self.sync()
        now = self.clock()
        elapsed = now - self.t0
        self.last = now
        print(f"step {self.step}: micro-batch {k}/{self.total}, {duration(elapsed)}, "
              f"~{duration(elapsed * self.total / k)} per step", file=self.out or sys.stderr, flush=True)
