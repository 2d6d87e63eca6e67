"""Calibrate on the user's own runs: fit the residual coefficients from measured tokens/s of runs
that `trainplan train` wrote (or logs converted to the same records, docs/machine-profile.md), with
leave-one-run-out cross-validation, starting from the packaged profile and a machine profile.

A calibration that cannot poison plans (issue 27), in the order checked:
  1. every run measured the GPU the profile predicts it on (calibration/device.py): a CPU run of a
     GPU plan, or a run on another GPU, is refused by name;
  2. only the coefficients the runs have evidence for move (calibration/evidence.py); the others
     keep the start profile's value, and the profile says which and why;
  3. a coefficient the fit drives to its bound (calibration/fitting.py BOUNDS) is refused: no
     physical value explains the runs, so the gap is elsewhere (a stack the model does not price,
     a broken run), and a bound is no answer;
  4. the fit must predict the runs it has not seen (leave one run out) better than the start
     profile predicts them; the error reported is that one, never the error on the fitted runs.
A refusal is a TrainplanError: one line, and no profile written.

Each run is its own group (its `source_key`), so the cross-validated error is that of a run the
fit has not seen.
"""

from __future__ import annotations

import datetime
import statistics
from dataclasses import dataclass, replace

from trainplan.calibration.device import mismatch
from trainplan.calibration.evidence import MIN_APART, MIN_RUNS, MIN_SHARE, choose
from trainplan.calibration.fitting import BOUNDS, coefficient, fit, predicted_tps
from trainplan.errors import TrainplanError
from trainplan.job import Job
from trainplan.layout import Layout
from trainplan.profile import FittedOn, Profile

# Residuals on the kernel rates, the HBM bandwidth and the overlap: what differs between one
# team's machine and software and the published records. Bounded as calibration/fitting.BOUNDS.
RUN_PARAMS = ("machine_compute", "machine_hbm", "gemm_eff", "attn_eff", "hbm_eff", "overlap")
METHOD = "leave one run out"


@dataclass(frozen=True)
class RunCase:
    id: str  # the run directory's name
    job: Job
    layout: Layout
    measured: dict  # tokens_per_s_per_gpu, step_time_s (medians after warm-up)
    device: str | None = None  # what it ran on: 'cpu' or a catalog GPU (device.run_device); None: its plan's GPU
    path: str = ""  # where it was read from
    date: str | None = None  # ISO date it was measured (summary.json written)

    @property
    def source_key(self) -> str:
        return self.id

    @property
    def gpu(self) -> str:
        """The GPU its plan (and so every prediction of it) is for."""
        return self.job.cluster.gpu.name


def from_record(case) -> RunCase:
    """A published record (validation/dataset.Case) as one of a team's runs, so the loop a team runs
    (ingest, then calibrate) can be measured on the dev set (bench/closed_loop.py): its measured
    tokens/s and step time, on its record's GPU (device None: its plan's), its own group (its id)."""
    if case.skipped_reason or case.job is None:
        raise TrainplanError(f"record {case.id} is not representable ({case.skipped_reason}); it cannot stand for a run")
    tps = case.measured.get("tokens_per_s_per_gpu")
    if not tps or tps <= 0:
        raise TrainplanError(f"record {case.id} has no measured tokens_per_s_per_gpu; a run to calibrate on needs it")
    return RunCase(case.id, case.job, case.layout,
                   {"tokens_per_s_per_gpu": tps, "step_time_s": case.measured.get("step_time_s")})


def _errors(cases, prof_for) -> list[float]:
    return [predicted_tps(c, prof_for(c)) / c.measured["tokens_per_s_per_gpu"] - 1 for c in cases]


def _stats(errs: list[float]) -> dict:
    a = sorted(abs(e) for e in errs)
    return {"count": len(a), "median_abs": statistics.median(a) if a else None,
            "p90_abs": a[max(0, -(-9 * len(a) // 10) - 1)] if a else None,  # nearest rank: the max under 10 runs
            "max_abs": a[-1] if a else None, "mean_signed": statistics.fmean(errs) if errs else None}


def _first_last(dates) -> tuple[str, ...]:
    d = sorted(set(dates))
    return tuple(d[:1] + d[-1:]) if len(d) > 1 else tuple(d)


def check_devices(cases: list[RunCase], start: Profile) -> str:
    """The one GPU the runs measured and the start profile may be calibrated for; refuses a run of
    another device than its plan's GPU, runs of several GPU types, and a start profile fitted on
    runs of another GPU."""
    for c in cases:
        if (why := mismatch(f"run {c.id}", c.device or c.gpu, c.gpu, f"profile {start.name}")):
            raise TrainplanError(why)
    gpus = sorted({c.gpu for c in cases})
    if len(gpus) > 1:
        raise TrainplanError(f"runs of {', '.join(gpus)}: calibrate one GPU type at a time (a profile holds one set "
                             "of residuals); give each its own --out")
    f = start.fitted_on
    if f is not None and f.kind == "runs" and gpus[0] not in f.gpus:
        raise TrainplanError(f"profile {start.name} was fitted on runs of {', '.join(f.gpus)}, these ran on {gpus[0]}; "
                             "start from the packaged profile (no --profile)")
    return gpus[0]


def pinned(full: Profile, start: Profile, params) -> dict[str, str]:
    """The moved coefficients the fit left at a bound they did not start at: name -> 'value (bound)'."""
    out = {}
    for p in params:
        v, was = coefficient(full, p), coefficient(start, p)
        for side, b in zip(("lower", "upper"), BOUNDS[p]):
            if abs(v - b) <= 1e-9 * max(1.0, abs(b)) and abs(was - b) > 1e-9 * max(1.0, abs(b)):
                out[p] = f"{v:.3g} (its {side} bound; was {was:.3g})"
    return out


def calibrate(cases: list[RunCase], start: Profile, name: str = "calibrated") -> Profile:
    """`start` with the coefficients of RUN_PARAMS the runs have evidence for fitted on every run,
    checked as the module docstring says; folds (one per run, fitted without it) and the errors
    before (start) and after (leave one run out) in cv_error, the runs in fitted_on."""
    gpu = check_devices(cases, start)
    ev = choose(cases, start, RUN_PARAMS)
    if not ev.moved:
        why = (f"a coefficient moves only with {MIN_RUNS} or more runs in which its term is >= {MIN_SHARE:.0%} of the "
               "step" if len(cases) < MIN_RUNS else "; ".join(f"{p}: {r}" for p, r in ev.kept.items()))
        raise TrainplanError(f"calibration refused: {len(cases)} run(s) move no coefficient ({why}); "
                             f"nothing written: give {MIN_RUNS} or more runs of different layouts")
    kw = {"params": ev.moved, "frameworks": False, "sweeps": 6}
    full = fit(cases, start, **kw)
    if (bad := pinned(full, start, ev.moved)):
        raise TrainplanError("calibration refused: the fit drives " + ", ".join(f"{p} to {v}" for p, v in bad.items())
                             + ": no physical value explains these runs (a broken run, or a stack or device the "
                             f"model does not price); nothing written, keep profile {start.name}")
    folds = {c.id: fit([o for o in cases if o.id != c.id], start, **kw) for c in cases}
    before = _errors(cases, lambda c: start)
    after = _errors(cases, lambda c: folds[c.id])
    b, a = _stats(before), _stats(after)
    if a["median_abs"] > b["median_abs"]:
        raise TrainplanError(f"calibration refused: on runs it has not seen ({METHOD}) the fit errs by a median "
                             f"{a['median_abs']:.1%}, the start profile {start.name} by {b['median_abs']:.1%}; "
                             f"nothing written, keep profile {start.name}")
    cv = {"tokens_per_s_per_gpu": {"all": a, "before": b, "p90_abs": a["p90_abs"]},
          "runs": {c.id: {"before": x, "after": y} for c, x, y in zip(cases, before, after)}, "method": METHOD}
    fitted_on = FittedOn(kind="runs", count=len(cases), gpus=(gpu,), models=tuple(sorted({c.job.model.name for c in cases})),
                         sources=tuple(c.path or c.id for c in cases),
                         dates=_first_last(c.date for c in cases if c.date),
                         method=METHOD)
    meta = {"fitted_at": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%MZ"), "fitted": list(ev.moved),
            "values": {p: coefficient(full, p) for p in ev.moved}, "kept": ev.kept, "start": start.name,
            "machines": [m.name for m in start.machines],
            "evidence": {"min_runs": MIN_RUNS, "min_share": MIN_SHARE, "min_apart": MIN_APART}}
    return replace(full, name=name, source=f"trainplan calibrate on {len(cases)} runs: {', '.join(c.id for c in cases)}",
                   folds={k: {p: coefficient(v, p) for p in ev.moved} for k, v in folds.items()}, cv_error=cv,
                   meta=meta, fitted_on=fitted_on)
