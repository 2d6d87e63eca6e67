"""Build a calibration profile from a validation dataset: fit on every source, fit once per
held-out source (LOSO), and record the cross-validated errors and the data used."""

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
    all of them and by model kind, the groups Profile.throughput_error reads."""
    from trainplan.validation.dataset import to_case
    from trainplan.validation.holdout import HOLDOUT_DATASET, table_records
    from trainplan.validation.run import run

    cases = [to_case(r) for r in table_records()]
    s = run(cases, prof, cross_validated=True)["summary"]
    t = s["tokens_per_s_per_gpu"]
    return {"tokens_per_s_per_gpu": {"all": t["all"], **{f"model={k}": v for k, v in t["by_model"].items()}},
            "dataset": f"trainplan/validation/data/{HOLDOUT_DATASET.name}", "records": s["records"],
            "skipped": s["skipped"]}


def build_profile(cases, dataset_name: str, progress=None, machines: tuple | None = None) -> Profile:
    """`machines`: the machine profiles the fit reads (default: the packaged ones); the residuals
    machine_compute / machine_hbm are fitted on the records whose GPU has one."""
    from trainplan.machine.profile import packaged
    from trainplan.validation.run import run

    train = training_cases(cases)
    start = Profile(machines=packaged() if machines is None else machines)
    full = fit(train, start)
    folds = loso(train, start, progress=progress)
    prof = replace(full, name="dev-loso", source=f"fitted on {dataset_name}: {len(train)} records "
                   f"({', '.join(FIT_QUALITIES)}) from {len({c.source_key for c in train})} sources",
                   folds={k: v.coefficients() for k, v in folds.items()})
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
    # peak_mem_gib involves no fitted coefficient: its error is the memory model's own, computed
    # here from the memory model as it is today; `meta.fitted_at` dates it (the search widens its
    # memory band by the p90_abs of cv_error.peak_mem_gib, Profile.memory_band; tests/calibration check
    # it has not drifted).
    meta = {"fitted_at": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%MZ"),
            "fitted": list(FITTED), "bounds": {k: list(BOUNDS[k]) for k in FITTED},
            "framework_factors": "median predicted/measured step time per framework, >= 2 sources"}
    return replace(prof, cv_error=cv, meta=meta, fitted_on=published_fitted_on(train))
