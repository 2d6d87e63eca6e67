"""Look up a measured rate between measured points: inverse-distance weighting in log space.

A table holds points over a few axes (GEMM M, N, K; attention sequence and heads; message bytes and
ranks). Kernel rates vary with the logarithm of a dimension far more evenly than with the dimension
itself (a GEMM's rate saturates as a dimension doubles, NCCL's bus bandwidth climbs per doubling of
the message), so distances are taken between log2 coordinates. Points need not form a full grid:
published sources measure the shapes of the models they ran (SimuMax's B200 GEMMs), a probe
measures a grid; one rule serves both.

  * a query equal to a point returns that point's value;
  * otherwise the NEIGHBOURS nearest points are weighted by 1 / d^2 and their log values averaged
    (a geometric mean: rates are positive and multiplicative);
  * a query beyond the table's range on an axis is clamped to the range first and the lookup is
    flagged `outside` (the estimate reports it): the value is the table's edge, not an
    extrapolation.

An axis that a table does not have is one its source did not vary: the rate is taken as
independent of it (no flag).

How well the rule reads a table between its points is measured on the table itself: `loo_error`
predicts each point from the others (leave one out) and returns the p90 relative error. A rate
derived through a table (a low-precision GEMM priced from a cited ratio, costs/measured.py) widens
the estimate's band by it.
"""

from __future__ import annotations

import functools
import heapq
import math
from dataclasses import dataclass, field

NEIGHBOURS = 8


@dataclass(frozen=True, slots=True)
class Lookup:
    value: float
    outside: tuple[str, ...] = ()  # "axis=value > max" for each clamped axis


@dataclass(frozen=True, eq=False)
class Grid:
    """Points over named axes; `values` positive. Frozen, hashed by identity (cheap) so that lookups
    can be cached per grid."""

    axes: tuple[str, ...]
    points: tuple[tuple[float, ...], ...]  # coordinates, one tuple per point, in `axes` order
    values: tuple[float, ...]
    # derived once: per-axis log2 coordinates of the points, and each axis's (lo, hi)
    _log_columns: tuple = field(init=False, repr=False, compare=False, hash=False)
    _bounds: tuple = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self):
        columns = tuple(zip(*self.points, strict=True)) if self.points else ()
        object.__setattr__(self, "_log_columns", tuple(tuple(math.log2(c) for c in col) for col in columns))
        object.__setattr__(self, "_bounds", tuple((min(col), max(col)) for col in columns))

    def lo(self, i: int) -> float:
        return self._bounds[i][0]

    def hi(self, i: int) -> float:
        return self._bounds[i][1]

    @functools.cached_property
    def loo_error(self) -> float:
        """p90 over the points of |value read from the other points / the point's value - 1|: how far
        this rule can be off between measured points (0 for a table of one point)."""
        if len(self.points) < 2:
            return 0.0
        errs = []
        for j, (p, v) in enumerate(zip(self.points, self.values, strict=True)):
            rest = [i for i in range(len(self.points)) if i != j]
            g = Grid(self.axes, tuple(self.points[i] for i in rest), tuple(self.values[i] for i in rest))
            errs.append(abs(g.lookup(dict(zip(self.axes, p, strict=True))).value / v - 1.0))
        errs.sort()
        return errs[math.ceil(0.9 * len(errs)) - 1]

    def lookup(self, query: dict[str, float]) -> Lookup:
        """The rate at `query` (axis -> value; extra keys ignored, missing axes are an error)."""
        return self._lookup(tuple(float(query[a]) for a in self.axes))

    @functools.lru_cache(maxsize=65536)  # noqa: B019 - grids live as long as their profile
    def _lookup(self, q: tuple[float, ...]) -> Lookup:
        if not self.axes:
            return Lookup(self.values[0])
        outside = []
        dist = [0] * len(self.points)  # squared log2 distances, summed axis by axis
        for a, v, (lo, hi), column in zip(self.axes, q, self._bounds, self._log_columns, strict=True):
            if v < lo:
                outside.append(f"{a}={v:g} < {lo:g}")
            elif v > hi:
                outside.append(f"{a}={v:g} > {hi:g}")
            y = math.log2(min(max(v, lo), hi))
            dist = [acc + (x - y) * (x - y) for acc, x in zip(dist, column)]
        near = heapq.nsmallest(NEIGHBOURS, zip(dist, range(len(dist))))  # ties: the lower index, as a scan
        if near[0][0] < 1e-12:
            return Lookup(self.values[near[0][1]], tuple(outside))
        wsum = sum(1.0 / d for d, _ in near)
        logv = sum(math.log(self.values[j]) / d for d, j in near) / wsum
        return Lookup(math.exp(logv), tuple(outside))
