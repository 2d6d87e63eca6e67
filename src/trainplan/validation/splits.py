"""The out-of-sample splits of `trainplan validate`, beside leave one source out (LOSO):

  time        fit on the sources published before a split date (validation/dates.py), predict the
              records published on or after it; one fold per split date, key 'time<YYYY-MM-DD';
  family      leave one model family out (the record's model.family, ModelSpec.model_type: llama,
              gpt, deepseek_v3, ...), key 'family=NAME';
  generation  leave one GPU generation out (GPUSpec.arch: ampere, hopper, blackwell), key
              'generation=NAME'.

Each fold is a set of coefficients fitted without the records it predicts (calibration/build.py
writes them in the profile's `splits`, as LOSO's in its `folds`). This module only says which
records a fold is fitted on and which fold predicts a record: it fits nothing.
"""

from __future__ import annotations

import datetime

LOSO, TIME, FAMILY, GENERATION = "loso", "time", "family", "generation"
METHODS = (LOSO, TIME, FAMILY, GENERATION)
DESCRIPTION = {
    LOSO: "leave one source out",
    TIME: "fit on sources published before {date}, predict those published on or after it",
    FAMILY: "leave one model family out",
    GENERATION: "leave one GPU generation out",
}


def family(case) -> str:
    return case.job.model.model_type


def generation(case) -> str:
    return case.job.cluster.gpu.arch


def time_key(date: datetime.date) -> str:
    return f"time<{date.isoformat()}"


def fold_keys(cases, dates) -> dict[str, list]:
    """Every split fold of `cases` (the fitted records) -> the cases it is fitted on. A time fold is
    fitted on the dated cases before its date; one whose training set or prediction set would be
    empty is left out."""
    out = {}
    for d in dates.split_dates:
        before = [c for c in cases if (p := dates.of(c.record)) is not None and p < d]
        if before and len(before) < len(cases):
            out[time_key(d)] = before
    for name, key in ((FAMILY, family), (GENERATION, generation)):
        for value in sorted({key(c) for c in cases}):
            rest = [c for c in cases if key(c) != value]
            if rest:
                out[f"{name}={value}"] = rest
    return out


def predicting_key(method: str, case, dates, date: datetime.date | None = None) -> str | None:
    """The fold that predicts `case` out of sample under `method` (for TIME, the split at `date`),
    or None when the method does not predict it (published before the date, or undated)."""
    if method == LOSO:
        return case.source_key
    if method == TIME:
        p = dates.of(case.record)
        return time_key(date) if p is not None and p >= date else None
    if method == FAMILY:
        return f"{FAMILY}={family(case)}"
    return f"{GENERATION}={generation(case)}"
