"""Goodput: the share of wall time that trains, once failures and checkpoint saves are paid.

A job of G GPUs fails at rate lambda x G (lambda: unexpected interruptions per GPU-second, from a
published run, hardware/reliability.toml), so its mean time between failures is M = 1 / (lambda G).
Saving a checkpoint blocks training for delta = checkpoint bytes / storage write throughput; a
failure costs the restart R (relaunch, plus reading the checkpoint back at the same throughput) and
the work since the last save, on average half a segment (tau + delta) / 2.

First-order model (Young 1974, "A first order approximation to the optimum checkpoint interval",
CACM 17(9); Daly 2006, FGCS 22(3), eq. 1-2 without the higher-order terms):

    goodput(tau) = tau / (tau + delta) x (1 - (R + (tau + delta) / 2) / M)

which is largest near tau = sqrt(2 delta M), Young's interval (exactly so when delta and R are
small against M). The interval is rounded to whole optimizer steps (at least one) and the goodput
is that of the rounded interval.

Pure arithmetic: the inputs (checkpoint bytes from costs/states.py, step time from the estimate,
storage and failure rate from the catalog) come from the caller.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainplan.hardware.reliability import Reliability


@dataclass(frozen=True, slots=True)
class Goodput:
    goodput: float  # share of wall time spent on training that is kept, in [0, 1]
    checkpoint_interval_steps: int
    checkpoint_interval_s: float
    checkpoint_bytes: float  # whole job (all GPUs together)
    save_s: float  # blocking save of one checkpoint
    restart_s: float  # relaunch + reading the checkpoint back
    mtbf_s: float  # mean time between failures of the whole job
    failures_per_gpu_hour: float
    storage: str
    storage_bytes_per_s: float
    sources: tuple[str, ...]

    @property
    def lost_to_failures(self) -> float:
        """Share of wall time lost to restarts and re-done work."""
        seg = self.checkpoint_interval_s + self.save_s
        return (self.restart_s + seg / 2) / self.mtbf_s

    @property
    def lost_to_saves(self) -> float:
        return self.save_s / (self.checkpoint_interval_s + self.save_s)

    def to_dict(self) -> dict:
        out = {k: getattr(self, k) for k in self.__slots__}
        out["sources"] = list(self.sources)
        return out


def young_interval(save_s: float, mtbf_s: float) -> float:
    """Young's optimum checkpoint interval sqrt(2 delta M), seconds of training between saves."""
    return math.sqrt(2.0 * save_s * mtbf_s)


def goodput_at(interval_s: float, save_s: float, restart_s: float, mtbf_s: float) -> float:
    seg = interval_s + save_s
    return max(0.0, interval_s / seg * (1.0 - (restart_s + seg / 2) / mtbf_s))


def goodput(step_s: float, gpus: int, checkpoint_bytes: float, rel: Reliability) -> Goodput:
    """Goodput and the checkpoint interval that maximises it for a job of `gpus` GPUs whose
    optimizer step takes `step_s` seconds and whose checkpoint holds `checkpoint_bytes`."""
    bw = rel.storage.bytes_per_s
    save = checkpoint_bytes / bw
    restart = rel.restart_s + checkpoint_bytes / bw
    mtbf = 1.0 / (rel.failures.per_gpu_s * gpus)
    steps = max(1, round(young_interval(save, mtbf) / step_s))
    tau = steps * step_s
    return Goodput(goodput_at(tau, save, restart, mtbf), steps, tau, checkpoint_bytes, save, restart, mtbf,
                   rel.failures.per_gpu_hour, rel.storage.name, bw,
                   (rel.failures.source, rel.storage.source, rel.storage.capacity_source, rel.restart_source))
