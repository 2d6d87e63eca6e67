"""Fit the profile's efficiency coefficients on measured tokens/s, with leave-one-source-out
cross-validation (the group is the record's `source_key`: a paper, a framework's perf table).

Objective: mean |log(predicted / measured)| of tokens/s per GPU over the training records (robust
to a few outliers; the median error is what the targets ask for). Optimiser: bounded coordinate
search on a multiplicative grid that shrinks when a sweep finds nothing better. Pure Python, no
numpy: it runs where the planner runs. A full fit over the dev file takes seconds; LOSO repeats it
once per source.

Two kinds of coefficients:
  * global ones (profile.COEFFICIENTS) and a GEMM factor per GPU architecture relative to Hopper
    (`arch:ampere`, `arch:blackwell`; Hopper holds most records and anchors gemm_eff);
  * a step-time factor per stack (the layout's `stack`, the record's framework preset): the median
    of predicted / measured step time over the stack's records, kept only when at least
    MIN_SOURCES different sources show it (one source alone would be memorised, not learned).
    Global fit and stack factors alternate.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace

from trainplan.costs.steptime import step_time
from trainplan.profile import Profile

# Physical bounds: efficiencies are fractions of a ceiling (a measured MAMF, the bf16 peak, the HBM
# datasheet bandwidth) and cannot exceed 1; d_half is a GEMM dimension between a warp tile and a
# few CTA tiles.
BOUNDS = {
    "gemm_eff": (0.3, 1.0),
    "attn_eff": (0.1, 1.0),
    "moe_gemm_eff": (0.2, 1.0),
    "d_half": (16.0, 512.0),
    "hbm_eff": (0.2, 1.0),
    "overlap": (0.0, 1.0),
    "tp_overlap": (0.0, 1.0),
    # residuals on a machine profile's measured rates (profile.py), kept small: a step's kernels run
    # somewhat slower than alone, or a little faster than the table's nearest (smaller) measured shape.
    # Wider bounds let the few records of one GPU type turn the residual into that GPU's fudge factor
    # (with 0.5-1.2 the B200 fit went to 0.5, driven by two torchtitan fp8 records the model
    # over-predicts 2x whatever the kernels; docs/machine-profile.md)
    "machine_compute": (0.8, 1.2),
    "machine_hbm": (0.8, 1.25),
    "arch:ampere": (0.5, 1.0),
    "arch:blackwell": (0.5, 1.0),
}
FITTED = ("gemm_eff", "attn_eff", "moe_gemm_eff", "d_half", "hbm_eff", "overlap", "tp_overlap", "machine_compute",
          "machine_hbm")
MIN_SOURCES = 2


def coefficient(prof: Profile, p: str) -> float:
    """The value of fitted coefficient `p` ('arch:NAME': that architecture's GEMM factor)."""
    if p.startswith("arch:"):
        return prof.arch_gemm_eff.get(p[5:], 1.0)
    return getattr(prof, p)


def with_coefficient(prof: Profile, p: str, v: float) -> Profile:
    """`prof` with coefficient `p` set to `v`."""
    if p.startswith("arch:"):
        return replace(prof, arch_gemm_eff={**prof.arch_gemm_eff, p[5:]: v})
    return replace(prof, **{p: v})


def predicted_tps(case, prof: Profile) -> float:
    job = case.job
    t = step_time(job, case.layout, prof).time.total
    return job.workload.tokens_per_step / t / job.cluster.num_gpus


def framework_factors(cases: Sequence, prof: Profile) -> dict[str, float]:
    """Median predicted/measured step time per stack seen in >= MIN_SOURCES sources."""
    base = replace(prof, framework_time={})
    by_fw: dict[str, list] = {}
    for c in cases:
        by_fw.setdefault(c.layout.stack, []).append(c)
    out = {}
    for fw, cs in sorted(by_fw.items()):
        if len({c.source_key for c in cs}) < MIN_SOURCES:
            continue
        logs = sorted(math.log(predicted_tps(c, base) / c.measured["tokens_per_s_per_gpu"]) for c in cs)
        mid = len(logs) // 2
        med = logs[mid] if len(logs) % 2 else (logs[mid - 1] + logs[mid]) / 2
        out[fw] = round(math.exp(med), 4)
    return out


def objective(cases: Sequence, prof: Profile) -> float:
    total = 0.0
    for c in cases:
        total += abs(math.log(predicted_tps(c, prof) / c.measured["tokens_per_s_per_gpu"]))
    return total / max(1, len(cases))


def fit(cases: Sequence, start: Profile | None = None, sweeps: int = 8,
        params: Sequence[str] = FITTED, progress: Callable[[str], None] | None = None,
        frameworks: bool = True) -> Profile:
    """Global coefficients, then framework factors, then the global ones again with the factors."""
    prof = _search(cases, start or Profile(), sweeps, params, progress)
    if not frameworks:
        return prof
    prof = replace(prof, framework_time=framework_factors(cases, prof))
    prof = _search(cases, prof, sweeps, params, progress)
    return replace(prof, framework_time=framework_factors(cases, prof))


def _search(cases, prof: Profile, sweeps, params, progress) -> Profile:
    """Coordinate search from `prof` minimising `objective`."""
    best = objective(cases, prof)
    steps = [0.6, 0.8, 0.9, 1.1, 1.25, 1.6]
    for sweep in range(sweeps):
        improved = False
        for p in params:
            lo, hi = BOUNDS[p]
            cur = coefficient(prof, p)
            cands = {min(hi, max(lo, cur * f)) for f in steps}
            if p in ("overlap", "tp_overlap"):  # fractions: additive steps too
                cands |= {min(hi, max(lo, cur + d)) for d in (-0.3, -0.1, -0.03, 0.03, 0.1, 0.3)}
            for v in sorted(cands):
                trial = with_coefficient(prof, p, v)
                o = objective(cases, trial)
                if o < best - 1e-9:
                    best, prof, improved = o, trial, True
        if progress:
            progress(f"sweep {sweep + 1}: mean |log error| {best:.4f}")
        if not improved:
            steps = [1 + (f - 1) / 2 for f in steps]
            if max(abs(f - 1) for f in steps) < 0.02:
                break
    return prof


def fit_many(jobs: dict, start: Profile | None = None, progress: Callable[[str], None] | None = None,
             **kw) -> dict[str, Profile]:
    """name -> (cases, extra fit keywords): one independent fit per name, in parallel processes."""
    import os
    from concurrent.futures import ProcessPoolExecutor

    out = {}
    with ProcessPoolExecutor(max_workers=max(1, min(len(jobs), os.cpu_count() or 1))) as pool:
        futures = {k: pool.submit(fit, cases, start, **(kw | extra)) for k, (cases, extra) in jobs.items()}
        for k in jobs:
            out[k] = futures[k].result()
            if progress:
                progress(f"fold {k}: {out[k].coefficients()}")
    return out


def loso(cases: Sequence, start: Profile | None = None, progress: Callable[[str], None] | None = None,
         **kw) -> dict[str, Profile]:
    """One profile per source, each fitted on all the other sources."""
    keys = sorted({c.source_key for c in cases})
    folds = fit_many({k: ([c for c in cases if c.source_key != k], {}) for k in keys}, start, **kw)
    if progress:
        for k in keys:
            progress(f"fold without {k}: {folds[k].coefficients()}")
    return folds
