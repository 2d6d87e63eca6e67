"""Which coefficients a set of runs can move: a coefficient is fitted only where enough runs see the
term it scales, and see it differently from the terms already fitted.

A run "sees" a coefficient by how much its predicted step time answers to it: the elasticity
|d log t / d log c| (for a coefficient at 0, the change of log t per +0.1), computed with the start
profile. It is about the share of the step the term takes: a GEMM efficiency has an elasticity near
the GEMMs' share of the step, an overlap fraction near the share of communication it hides.
Elasticities come from the runs' layouts and the cost model alone, never from what the runs
measured, so choosing the coefficients this way leaks nothing into the cross-validation.

The rule (issue 27: one CPU run moved six coefficients to their bounds):
  1. the term is at least MIN_SHARE of the step in at least MIN_RUNS runs;
  2. it is told apart from the coefficients already chosen (taken in order of evidence, the largest
     total elasticity first): the part of its per-run elasticities that theirs do not explain
     (Gram-Schmidt residual) reaches MIN_APART in some run. Runs of one shape give every term the
     same share, so they can fit one scale and no second coefficient;
  3. at most (runs - 1) coefficients move: each fold of the leave-one-run-out cross-validation
     fits them on one run fewer.
Everything else keeps the start profile's value, with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from trainplan.calibration.fitting import BOUNDS, coefficient, predicted_tps, with_coefficient
from trainplan.profile import Profile

MIN_RUNS = 3  # runs that must see a coefficient's term
MIN_SHARE = 0.10  # elasticity at which a run sees it: the term is about a tenth of the step
MIN_APART = 0.05  # elasticity a coefficient must show beyond those already chosen, in some run
STEP = 0.9  # the relative change the elasticity is measured over (+0.1 for a coefficient at 0)


@dataclass(frozen=True)
class Evidence:
    moved: tuple[str, ...]  # the coefficients the fit may move, in the order chosen
    kept: dict  # coefficient -> why it keeps the start profile's value
    elasticity: dict  # coefficient -> its elasticity per run, in the runs' order


def elasticity(case, prof: Profile, p: str) -> float:
    """|d log t / d log p| of the case's predicted step time at `prof` (per +0.1 at p = 0)."""
    lo, hi = BOUNDS[p]
    v = coefficient(prof, p)
    if v <= 0:
        v2, scale = min(hi, 0.1), 1.0
    else:
        v2 = v * STEP if v * STEP >= lo else min(hi, v / STEP)
        scale = abs(math.log(v2 / v))
    if v2 == v or scale == 0:
        return 0.0
    return abs(math.log(predicted_tps(case, with_coefficient(prof, p, v2)) / predicted_tps(case, prof))) / scale


def choose(cases: Sequence, start: Profile, params: Sequence[str]) -> Evidence:
    """The coefficients of `params` the runs `cases` can move (module docstring), and why not the rest."""
    n = len(cases)
    e = {p: [elasticity(c, start, p) for c in cases] for p in params}
    moved: list[str] = []
    basis: list[list[float]] = []  # orthonormal directions of the chosen coefficients' elasticities
    kept = {}
    for p in sorted(params, key=lambda q: -sum(e[q])):
        seen = sum(x >= MIN_SHARE for x in e[p])
        if seen < MIN_RUNS:
            kept[p] = f"its term is >= {MIN_SHARE:.0%} of the step in {seen} of {n} run(s), needs {MIN_RUNS}"
            continue
        if len(moved) >= n - 1:
            kept[p] = f"{n} runs move at most {n - 1} coefficients (one is left out to cross-validate)"
            continue
        rest = list(e[p])
        for b in basis:
            dot = sum(x * y for x, y in zip(rest, b))
            rest = [x - dot * y for x, y in zip(rest, b)]
        apart = max(abs(x) for x in rest)
        if apart < MIN_APART:
            kept[p] = (f"the runs do not tell it apart from {', '.join(moved)}: its share varies {apart:.1%} "
                       f"beyond theirs, needs {MIN_APART:.1%}")
            continue
        norm = math.sqrt(sum(x * x for x in rest))
        basis.append([x / norm for x in rest])
        moved.append(p)
    return Evidence(tuple(moved), {p: kept[p] for p in params if p in kept}, e)
