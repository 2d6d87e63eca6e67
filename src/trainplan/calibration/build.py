"""Build a calibration profile from a validation dataset: keep the coefficients the time split
supports (calibration/support.py), fit them on every source, once per held-out source (LOSO) and
once per fold of the other splits (calibration/splits.py), and record the cross-validated errors,
the out-of-sample band pool (band.py) and the data used."""

from __future__ import annotations

import datetime
from dataclasses import replace

from trainplan.calibration.fitting import BOUNDS, FITTED, fit, loso
from trainplan.profile import FittedOn, Profile

FIT_QUALITIES = ("full", "layout")  # records with a known layout; 'partial' ones are too uncertain


def training_cases(cases) -> list:
    return [c for c in cases if not c.skipped_reason and c.quality in FIT_QUALITIES
            and c.measured.get("tokens_per_s_per_gpu")]


def published_fitted_on(train) -> FittedOn:
    """What a fit on published records was fitted on (the profile's `fitted_on`)."""
    return FittedOn(kind="published", count=len(train), gpus=tuple(sorted({c.job.cluster.gpu.name for c in train})),
                    models=tuple(sorted({c.job.model.name for c in train})),
                    sources=tuple(sorted({c.source_key for c in train})), method="leave one source out")


def holdout_error(prof: Profile) -> dict:
    """The tokens/s error of the published runs kept out of every fit (validation/holdout.py, their
    table-only records), each predicted as validate predicts a record (the fold without its source):
    all of them and by model kind, the groups band.cross_validated_error reads for a profile without an
    out-of-sample pool."""
    from trainplan.validation.holdout import HOLDOUT_DATASET, holdout_cases
    from trainplan.validation.run import run

    cases = holdout_cases()
    s = run(cases, prof, cross_validated=True)["summary"]
    t = s["tokens_per_s_per_gpu"]
    return {"tokens_per_s_per_gpu": {"all": t["all"], **{f"model={k}": v for k, v in t["by_model"].items()}},
            "dataset": f"trainplan/validation/data/{HOLDOUT_DATASET.name}", "records": s["records"],
            "skipped": s["skipped"]}


def build_profile(cases, dataset_name: str, progress=None, machines: tuple | None = None, dates=None,
                  holdout: bool = True) -> Profile:
    """`machines`: the machine profiles the fit reads (default: the packaged ones); the residuals
    machine_compute / machine_hbm are fitted on the records whose GPU has one. `dates`: the sources'
    publication dates (default: the packaged ones, validation/dates.py). `holdout`: add the packaged
    published runs kept out of every fit to the band pool (the packaged dev dataset's own)."""
    from trainplan.calibration.splits import split_folds
    from trainplan.calibration.support import split_cases, support
    from trainplan.machine.profile import packaged
    from trainplan.validation.dates import source_dates
    from trainplan.validation.holdout import holdout_cases
    from trainplan.validation.oos import out_of_sample
    from trainplan.validation.run import run

    dates = dates or source_dates()
    train = training_cases(cases)
    start = Profile(machines=packaged() if machines is None else machines)
    before, after = split_cases(train, dates)
    sup = support(train, start, dates, progress=progress) if before and after else None
    kw = {"params": tuple(sup["kept"]), "frameworks": sup["frameworks"]} if sup else {}
    full = fit(train, start, **kw)
    folds = loso(train, start, progress=progress, **kw)
    splits = split_folds(train, start, dates, progress=progress, **kw)
    prof = replace(full, name="dev-loso", source=f"fitted on {dataset_name}: {len(train)} records "
                   f"({', '.join(FIT_QUALITIES)}) from {len({c.source_key for c in train})} sources",
                   folds={k: v.coefficients() for k, v in folds.items()},
                   splits={k: v.coefficients() for k, v in splits.items()})
    summary = run(cases, prof, cross_validated=True)["summary"]
    cv = {}
    for metric in ("tokens_per_s_per_gpu", "step_time_s", "peak_mem_gib", "mfu"):
        cv[metric] = {"all": summary[metric]["all"]}
        for group in ("quality", "gpu", "precision", "framework", "model"):
            cv[metric] |= {f"{group}={k}": v for k, v in summary[metric][f"by_{group}"].items()}
    cv["tokens_per_s_per_gpu"]["p90_abs"] = summary["tokens_per_s_per_gpu"]["by_quality"].get(
        "full", summary["tokens_per_s_per_gpu"]["all"]).get("p90_abs", 0.25)
    cv["records"] = sorted(c.id for c in train)
    cv["holdout"] = holdout_error(prof)
    hold = holdout_cases() if holdout else ()
    cv["out_of_sample"] = out_of_sample(cases, prof, holdout=hold, dates=dates)["band"]
    # peak_mem_gib involves no fitted coefficient: its error is the memory model's own, computed
    # here from the memory model as it is today; `meta.fitted_at` dates it (the search widens its
    # memory band by the p90_abs of cv_error.peak_mem_gib, Profile.memory_band; tests/calibration check
    # it has not drifted).
    fitted = list(kw.get("params", FITTED))
    meta = {"fitted_at": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%MZ"),
            "fitted": fitted, "bounds": {k: list(BOUNDS[k]) for k in fitted},
            "framework_factors": ("median predicted/measured step time per framework, >= 2 sources"
                                  if kw.get("frameworks", True) else "none: not supported by the time split"),
            "pinned": {p: (sup["coefficients"][p]["prior"]) for p in sup["dropped"]} if sup else {},
            "support": sup}
    return replace(prof, cv_error=cv, meta=meta, fitted_on=published_fitted_on(train))
