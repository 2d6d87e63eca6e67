"""Calibrate on the user's own runs: fit the residual coefficients from measured tokens/s of runs
that `trainplan train` wrote (or logs converted to the same records, docs/machine-profile.md), with
leave-one-run-out cross-validation, starting from the packaged profile and a machine profile.

Few runs, few coefficients: only the residuals a run can tell apart are fitted (RUN_PARAMS); the
published-data fit (calibration/build.py) keeps the rest. Each run is its own group (its
`source_key`), so the cross-validated error is that of a run the fit has not seen.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

from trainplan.calibration.fitting import fit, predicted_tps
from trainplan.job import Job
from trainplan.layout import Layout
from trainplan.profile import Profile

# Residuals on the kernel rates, the HBM bandwidth and the overlap: what differs between one
# team's machine and software and the published records. Bounded as calibration/fitting.BOUNDS.
RUN_PARAMS = ("machine_compute", "machine_hbm", "gemm_eff", "attn_eff", "hbm_eff", "overlap")


@dataclass(frozen=True)
class RunCase:
    id: str  # the run directory's name
    job: Job
    layout: Layout
    measured: dict  # tokens_per_s_per_gpu, step_time_s (medians after warm-up)

    @property
    def source_key(self) -> str:
        return self.id


def _errors(cases, prof_for) -> list[float]:
    return [predicted_tps(c, prof_for(c)) / c.measured["tokens_per_s_per_gpu"] - 1 for c in cases]


def _stats(errs: list[float]) -> dict:
    a = sorted(abs(e) for e in errs)
    return {"count": len(a), "median_abs": statistics.median(a) if a else None,
            "max_abs": a[-1] if a else None, "mean_signed": statistics.fmean(errs) if errs else None}


def calibrate(cases: list[RunCase], start: Profile, name: str = "calibrated") -> Profile:
    """`start` with RUN_PARAMS fitted on every run; folds (one per run, fitted without it) and the
    errors before (start) and after (cross-validated, leave one run out) in cv_error."""
    kw = {"params": RUN_PARAMS, "frameworks": False, "sweeps": 6}
    full = fit(cases, start, **kw)
    folds = {c.id: fit([o for o in cases if o.id != c.id], start, **kw) for c in cases} if len(cases) > 1 else {}
    before = _errors(cases, lambda c: start)
    after = _errors(cases, lambda c: folds[c.id]) if folds else []
    per_run = {c.id: {"before": b, "after": (after[i] if after else None)} for i, (c, b) in enumerate(zip(cases, before))}
    cv = {"tokens_per_s_per_gpu": {"all": _stats(after), "before": _stats(before),
                                   "p90_abs": max((abs(e) for e in after), default=0.25)},
          "runs": per_run, "method": "leave one run out" if folds else "one run: no cross-validation"}
    fitted = {k: getattr(full, k) for k in RUN_PARAMS}
    return replace(full, name=name, source=f"trainplan calibrate on {len(cases)} run(s): {', '.join(c.id for c in cases)}",
                   folds={k: {p: getattr(v, p) for p in RUN_PARAMS} for k, v in folds.items()}, cv_error=cv,
                   meta={"fitted": list(RUN_PARAMS), "values": fitted, "start": start.name,
                         "machines": [m.name for m in start.machines]})
