"""What a GPU's rates rest on, and how much wider a plan's band is where nobody measured them.

The step time runs every GEMM at the GPU's matmul ceiling (gpus.toml `matmul_ceiling`, the best-shape
rate measured with the MAMF benchmark over the dense peak) unless a machine profile prices it. Where the
ceiling is marked `estimated` (no measurement of that GPU: GB300, the 500 W H100, L40S), it was inferred
from sibling GPUs, and the rate it stands for may lie anywhere among the rates measured on them. The
plan's band (estimate.py) widens by that spread, computed from the catalog itself, never typed in:

    widening = max over the ceiling's dtypes of (highest / lowest measured ceiling) - 1

over the measured GPUs of the same architecture, or over every measured GPU when the architecture has
fewer than two. The plan prints one line that names the estimate and the widening
(Estimate.derived).

This is the band code's one input about evidence (issue 23 item 2): `Widening.error` for a GPU, zero
for a GPU whose ceiling was measured.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from trainplan.hardware.catalog import gpus
from trainplan.hardware.types import GPUSpec

ESTIMATED_CEILING = "matmul_ceiling"


@dataclass(frozen=True, slots=True)
class Widening:
    error: float  # added to the band's relative error (0 = the ceiling was measured)
    lines: tuple[str, ...] = ()  # what the plan prints about it


NONE = Widening(0.0)


def ceiling_widening(gpu: GPUSpec) -> Widening:
    """The band widening for `gpu` (NONE when its matmul ceiling was measured)."""
    if ESTIMATED_CEILING not in gpu.estimated:
        return NONE
    return _widening(gpu.name, gpu.arch, tuple(sorted(gpu.matmul_ceiling)))


@functools.cache
def _widening(name: str, arch: str, dtypes: tuple[str, ...]) -> Widening:
    measured = [g for g in gpus().values() if ESTIMATED_CEILING not in g.estimated]
    siblings = [g for g in measured if g.arch == arch]
    pool, where = (siblings, f"{arch} GPUs") if len(siblings) >= 2 else (measured, "all GPUs")
    spread = 0.0
    for dt in dtypes:
        vals = [g.matmul_ceiling[dt] for g in pool if dt in g.matmul_ceiling]
        if len(vals) >= 2:
            spread = max(spread, max(vals) / min(vals) - 1)
    names = ", ".join(g.name for g in pool)
    line = (f"{name}: matmul ceiling is an estimate, not a measurement (gpus.toml sources); band widened by "
            f"{spread:.1%}, the spread of the ceilings measured on {where} ({names})")
    return Widening(spread, (line,))
