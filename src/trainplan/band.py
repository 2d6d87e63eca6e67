"""A plan's throughput band: the p90 out-of-sample error of the measured runs most like the plan.

The one home of the band (estimate.py reads it through Profile.throughput_band). Its data is the
profile's `cv_error.out_of_sample` (calibration/build.py, validation/oos.py): for every published run
predicted by a fit that did not see it (leave one source out, the time split, the published runs
kept out of every fit), the signed tokens/s error and what the run was:

  generation  GPU generation (GPUSpec.arch)            model   'dense' or 'moe'
  scale       'gpus<256' or 'gpus>=256' (scale_group)   stack   the stack that ran it (Layout.stack)
  quality     how fully the source specified the run ('full', 'layout'; a plan is 'full')

Nearest group: all five attributes equal to the plan's; when that group holds fewer than MIN_RUNS
distinct runs from MIN_SOURCES sources, the last attribute of ATTRIBUTES is let go, then the next, down to every run. The
band is the 90% split-conformal bound of the group's fold errors, max(p/m, m/p) - 1, taken over sources
rather than runs (`conformal_p90`), so that "x/(1+e) to x*(1+e)" holds the next run nine times in ten.
Sources, not runs, are the exchangeable units: one source's runs share a framework release and a setup,
and their errors move together. With the plain p90 of runs the bands held 107 of the 129 out-of-sample
runs (83%) when each was predicted without its own source; with the bound over sources, 114 (88%;
`trainplan validate`, bench/accuracy_table.py).

Widened, and said in words, where nothing like the plan was measured: a GPU generation no run had
takes the p90 error of runs predicted without their generation (leave one generation out); a model
feature no run had (MoE, MLA, a sliding window, MTP: model_features) that of runs predicted without
their model family. Those are the measured errors of exactly that situation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

# Distinct runs a group needs before its p90 sets the band: with fewer, the p90 is the largest
# error or one interpolated next to it, and a group of three lucky runs would promise 3%.
MIN_RUNS = 10
# ... from at least this many sources: one source's runs share its setup and its errors move together
# (a perf table of one framework release), so ten runs of one source are nearer one observation than ten.
MIN_SOURCES = 3
ATTRIBUTES = ("generation", "model", "scale", "stack", "quality")  # most alike first; let go from the end
UNSEEN = {"generation": "leave one GPU generation out", "architecture": "leave one model family out"}

# Runs this large are few and where a wrong plan costs most: their errors are reported on their own.
LARGE_SCALE_GPUS = 256


def scale_group(num_gpus: int | None) -> str:
    """The scale group of a run: 'gpus>=256' or 'gpus<256' ('gpus=?': GPU count not published)."""
    if isinstance(num_gpus, bool) or not isinstance(num_gpus, int):  # not published, or not a count
        return "gpus=?"
    return f"gpus>={LARGE_SCALE_GPUS}" if num_gpus >= LARGE_SCALE_GPUS else f"gpus<{LARGE_SCALE_GPUS}"


def fold_error(signed: float) -> float:
    """max(p/m, m/p) - 1 of a signed relative error (p - m) / m: the e of the smallest band
    x/(1+e)..x*(1+e) around the prediction p that holds the measurement m."""
    r = 1.0 + signed
    return max(r, 1.0 / r) - 1.0


def conformal_p90(runs: list[RunError]) -> float:
    """The 90% split-conformal bound of `runs`' fold errors with each source one exchangeable unit
    (Vovk et al. 2005; Lei et al. 2018, JASA 113:1094, the finite-sample level ceil((n+1) q) / n):
    each of the S sources weighs 1, shared by its runs, and the bound is the smallest error whose
    runs at or below it weigh at least min(S, ceil(0.9 (S + 1))). Nine sources or fewer: the
    largest error of the group."""
    weight: dict[str, int] = {}
    for r in runs:
        weight[r.source_key] = weight.get(r.source_key, 0) + 1
    sources = len(weight)
    need = min(sources, math.ceil(0.9 * (sources + 1) - 1e-9))
    held = 0.0
    for r in sorted(runs, key=lambda r: r.fold):
        held += 1.0 / weight[r.source_key]
        if held >= need - 1e-9:
            return r.fold
    return max(r.fold for r in runs)


def p90(values: list[float]) -> float:
    """Linear-interpolation 90th percentile (numpy's default), as validation/errors.percentile."""
    a = sorted(values)
    pos = 0.9 * (len(a) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(a) - 1)
    return a[lo] + (a[hi] - a[lo]) * (pos - lo)


@dataclass(frozen=True, slots=True)
class RunError:
    """One out-of-sample prediction of a published run (one run may have one per method)."""

    id: str
    source_key: str
    method: str  # 'loso', 'time<YYYY-MM-DD', 'holdout'
    generation: str
    model: str
    scale: str
    stack: str
    quality: str
    features: tuple[str, ...]
    error: float  # signed (predicted - measured) / measured, tokens/s per GPU

    @property
    def fold(self) -> float:
        return fold_error(self.error)

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k in self.__slots__ if (v := getattr(self, k)) is not None}


@dataclass(frozen=True, slots=True)
class Band:
    error: float  # the band is x/(1+error) to x*(1+error)
    basis: str  # what it is the error of, in words (printed beside the band)
    runs: int  # distinct runs in the group
    group: tuple[tuple[str, str], ...] = ()  # the attributes matched
    widened: tuple[str, ...] = ()  # 'generation', 'architecture': nothing like the plan measured


@dataclass(frozen=True)
class Bands:
    runs: tuple[RunError, ...]
    unseen: dict  # 'generation' / 'architecture' -> p90 fold error of that split (UNSEEN)
    min_runs: int = MIN_RUNS
    min_sources: int = MIN_SOURCES
    _memo: dict = field(default_factory=dict, compare=False, repr=False)

    def band(self, generation: str, model: str, scale: str, stack: str, quality: str = "full",
             features: tuple[str, ...] = (), without_source: str | None = None) -> Band:
        """The band of a run or plan with these attributes; `without_source`: from the runs of the
        other sources only (the coverage check: a run's band never contains its own error)."""
        key = (generation, model, scale, stack, quality, features, without_source)
        if (hit := self._memo.get(key)) is None:
            hit = self._memo[key] = self._band(dict(zip(ATTRIBUTES, key)), features, without_source)
        return hit

    def _band(self, want: dict, features, without_source) -> Band:
        pool = [r for r in self.runs if r.source_key != without_source]
        if not pool:
            return Band(max(self.unseen.values(), default=0.0), "no out-of-sample run measured", 0, (), ("generation",))
        for n in range(len(ATTRIBUTES), -1, -1):
            matched = ATTRIBUTES[:n]
            group = [r for r in pool if all(getattr(r, k) == want[k] for k in matched)]
            if (len({r.id for r in group}) >= self.min_runs and len({r.source_key for r in group}) >= self.min_sources) \
                    or n == 0:
                break
        runs = len({r.id for r in group})
        err = conformal_p90(group)
        like = ", ".join(want[k] for k in matched)
        over = f"over {len({r.source_key for r in group})} sources"
        basis = (f"the p90 error ({over}) of {runs} out-of-sample runs like this plan's ({like})" if matched else
                 f"the p90 error ({over}) of all {runs} out-of-sample runs (fewer than {self.min_runs} like this plan's)")
        widened, why = [], []
        if not any(r.generation == want["generation"] for r in pool) and "generation" in self.unseen:
            widened.append("generation")
            why.append(f"no {want['generation']} run was ever measured")
        seen = {f for r in pool for f in r.features}
        if (new := sorted(set(features) - seen)) and "architecture" in self.unseen:
            widened.append("architecture")
            why.append(f"no measured run had {', '.join(new)}")
        for w in widened:
            err = max(err, self.unseen[w])
        if widened:
            splits = " and ".join(f"{UNSEEN[w]} ({self.unseen[w]:.0%})" for w in widened)
            basis += f", widened: {' and '.join(why)}, so the p90 error of runs predicted {splits}"
        return Band(err, basis, runs, tuple((k, want[k]) for k in matched), tuple(widened))


# The band of a profile without any measured error (the bare priors, a profile written by hand).
ASSUMED_ERROR = 0.25


def cross_validated_error(cv_error: dict, moe: bool, min_records: int) -> float:
    """The band of a profile without out-of-sample errors (a team's `trainplan calibrate`, a profile
    written before them): the cross-validated p90 |error| of its fully specified runs (cv_error
    tokens_per_s_per_gpu.p90_abs; ASSUMED_ERROR when it has none), widened to the p90 of the model's
    own kind (group 'model=moe' / 'model=dense') where at least `min_records` runs of it were
    measured, in the cross-validation or on published runs kept out of the fit (cv_error.holdout)."""
    group = f"model={'moe' if moe else 'dense'}"
    cv = cv_error.get("tokens_per_s_per_gpu", {})
    held = cv_error.get("holdout", {}).get("tokens_per_s_per_gpu", {})
    err = cv.get("p90_abs", ASSUMED_ERROR)
    for kind in (cv.get(group, {}), held.get(group, {})):
        if kind.get("count", 0) >= min_records and kind.get("p90_abs") is not None:
            err = max(err, kind["p90_abs"])
    return err


def bands_from_dict(d: dict) -> Bands:
    """The `out_of_sample` object of a profile's cv_error (written by calibration/build.py)."""
    runs = tuple(RunError(**{**r, "features": tuple(r.get("features", ()))}) for r in d["runs"])
    return Bands(runs, dict(d.get("unseen", {})), d.get("min_runs", MIN_RUNS), d.get("min_sources", MIN_SOURCES))


_PARSED: dict[int, tuple[dict, Bands]] = {}  # id of a profile's out_of_sample dict -> (it, parsed)


def bands_of(cv_error: dict) -> Bands | None:
    """The Bands of a profile's cv_error, parsed once per dict; None when it has no out_of_sample."""
    d = cv_error.get("out_of_sample")
    if d is None:
        return None
    hit = _PARSED.get(id(d))
    if hit is None or hit[0] is not d:  # the dict is kept in the entry, so its id is not reused
        hit = _PARSED[id(d)] = (d, bands_from_dict(d))
    return hit[1]


def coverage(bands: Bands) -> dict:
    """The share of out-of-sample runs whose measurement lies inside their own band, each band
    computed without the run's source: overall, per method and per value of each attribute."""
    inside: list[tuple[RunError, bool]] = []
    for r in bands.runs:
        b = bands.band(r.generation, r.model, r.scale, r.stack, r.quality, r.features, without_source=r.source_key)
        inside.append((r, r.fold <= b.error + 1e-12))

    def share(rows):
        return {"count": len(rows), "inside": sum(ok for _, ok in rows),
                "share": sum(ok for _, ok in rows) / len(rows) if rows else None}

    out = {"all": share(inside), "by_method": {}}
    for key in ("method", *ATTRIBUTES):
        groups: dict[str, list] = {}
        for r, ok in inside:
            groups.setdefault(getattr(r, key), []).append((r, ok))
        out[f"by_{key}"] = {k: share(v) for k, v in sorted(groups.items())}
    out["target"] = 0.9
    out["min_runs"] = bands.min_runs
    out["min_sources"] = bands.min_sources
    return out
