"""Fit the folds of the out-of-sample splits (validation/splits.py): the time split's fold per split
date, one fold per model family and per GPU generation left out, each fitted as the full profile."""

from __future__ import annotations

from trainplan.calibration.fitting import fit_many
from trainplan.validation.splits import fold_keys


def split_folds(train, start, dates, progress=None, **kw) -> dict:
    """Split key -> the profile fitted on that fold's cases."""
    return fit_many({k: (cases, {}) for k, cases in fold_keys(train, dates).items()}, start, progress=progress, **kw)
