"""Out-of-sample errors of a validation dataset under every split (validation/splits.py), the band
pool they make (band.py) and its coverage.

Each method predicts a record with the fold that did not see it: LOSO the fold without its source,
the time split the fold fitted before the split date (records published on or after it only), the
family and generation splits the fold without the record's model family or GPU generation. A
family, generation or source that the profile was never fitted on is predicted by the full
profile: it is out of sample already. A split the profile carries no fold of (a profile fitted
before the splits existed, or a team's calibration) is reported as not available, never guessed.

The band pool: the tokens/s errors of LOSO, the primary time split and the published runs kept out
of every fit (validation/holdout.py), of runs whose layout the source states ('full', 'layout';
'partial' records are sanity checks, not runs like a plan); the unseen-generation and
unseen-architecture widths are the p90 fold errors of the generation and family splits.
"""

from __future__ import annotations

from trainplan.band import (
    MIN_RUNS,
    MIN_SOURCES,
    RunError,
    bands_from_dict,
    coverage,
    fold_error,
    p90,
)
from trainplan.models.layers import model_features
from trainplan.profile import Profile
from trainplan.validation.dates import source_dates
from trainplan.validation.errors import METRICS, model_group, rel_error, scale_group, summarize
from trainplan.validation.run import predict_case
from trainplan.validation.splits import (
    DESCRIPTION,
    FAMILY,
    GENERATION,
    LOSO,
    TIME,
    family,
    generation,
    predicting_key,
    time_key,
)

POOL_QUALITIES = ("full", "layout")
GROUPINGS = ("quality", "generation", "model", "scale", "stack", "family")
HOLDOUT = "holdout"


def _attributes(c) -> dict:
    return {"id": c.id, "source_key": c.source_key, "quality": c.quality, "generation": generation(c),
            "model": model_group(c.job.model.moe.num_experts if c.job.model.moe else None),
            "scale": scale_group(c.job.cluster.num_gpus), "stack": c.layout.stack, "family": family(c),
            "features": model_features(c.job.model)}


def _fold(prof: Profile, method: str, key: str) -> Profile | None:
    """The profile predicting under `key`: its fold; the full profile where a family or generation
    was never fitted (a profile with splits has a fold of each one it fitted); None where the split
    is not available."""
    if method == LOSO:
        return prof.fold(key)
    if (p := prof.split_fold(key)) is not None:
        return p
    return None if method == TIME or not prof.splits else prof


def method_rows(cases, prof: Profile, method: str, dates, date=None) -> list[dict] | None:
    """One row per record the method predicts ({attributes, error: {metric: e}}); None when the
    profile carries no fold for it."""
    if method != LOSO and not prof.splits:
        return None
    rows = []
    for c in cases:
        if c.skipped_reason:
            continue
        key = predicting_key(method, c, dates, date)
        if key is None:
            continue
        p = _fold(prof, method, key)
        if p is None:
            if method == TIME:
                return None
            continue
        pred = predict_case(c, p, cross_validated=False)
        rows.append({**_attributes(c), "error": {k: rel_error(pred[k], c.measured.get(k)) for k in METRICS}})
    return rows


def _run_errors(rows, method: str) -> list[RunError]:
    out = []
    for r in rows:
        e = r["error"]["tokens_per_s_per_gpu"]
        if e is None or r["quality"] not in POOL_QUALITIES:
            continue
        out.append(RunError(r["id"], r["source_key"], method, r["generation"], r["model"], r["scale"],
                            r["stack"], r["quality"], tuple(r["features"]), e))
    return out


def _p90_fold(rows) -> float | None:
    errs = [fold_error(r["error"]["tokens_per_s_per_gpu"]) for r in rows or ()
            if r["error"]["tokens_per_s_per_gpu"] is not None and r["quality"] in POOL_QUALITIES]
    return p90(errs) if errs else None


def out_of_sample(cases, prof: Profile, holdout=(), dates=None) -> dict:
    """Every method's errors (summarised per GROUPINGS), the band pool and its coverage."""
    dates = dates or source_dates()
    methods, rows_of = {}, {}
    plan = [(LOSO, None), *((TIME, d) for d in dates.split_dates), (FAMILY, None), (GENERATION, None)]
    for method, date in plan:
        name = time_key(date) if method == TIME else method
        rows = method_rows(cases, prof, method, dates, date)
        desc = DESCRIPTION[method].format(date=date.isoformat() if date else "")
        if rows is None:
            methods[name] = {"description": desc, "available": False,
                             "why": f"profile {prof.name} carries no {name} fold: refit it with validate --fit"}
            continue
        rows_of[name] = rows
        methods[name] = {"description": desc, "available": True, "predicted": len(rows),
                         "summary": summarize(rows, GROUPINGS)}
    primary = time_key(dates.primary)
    hold_rows = method_rows(holdout, prof, LOSO, dates) if holdout else []
    pool = _run_errors(rows_of.get(LOSO, []), LOSO) + _run_errors(rows_of.get(primary, []), primary)
    pool += _run_errors(hold_rows, HOLDOUT)
    unseen = {k: v for k, v in (("generation", _p90_fold(rows_of.get(GENERATION))),
                                ("architecture", _p90_fold(rows_of.get(FAMILY)))) if v is not None}
    band_data = {"min_runs": MIN_RUNS, "min_sources": MIN_SOURCES,
                 "methods": [LOSO, primary, HOLDOUT][: 3 if hold_rows else 2], "unseen": unseen,
                 "runs": [r.to_dict() for r in pool]}
    undated = sorted({c.source_key for c in cases if not c.skipped_reason and dates.of(c.record) is None})
    return {"split_dates": [d.isoformat() for d in dates.split_dates], "primary": dates.primary.isoformat(),
            "undated_sources": undated, "methods": methods, "band": band_data,
            "coverage": coverage(bands_from_dict(band_data)) if pool else None}
