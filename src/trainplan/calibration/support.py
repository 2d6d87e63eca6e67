"""Coefficients kept only where the time split supports them (issue 23).

On the primary time split (validation/dates.py: fit on the sources published before the date,
predict the fitted-quality records published on or after it), each fitted coefficient is fitted
once with every other one and once pinned at its prior (the start profile's value, profile.py),
the others still fitted; the per-stack step-time factors (`framework_time`) likewise, as one. A
coefficient is supported when fitting it lowers the error on the later sources, mean |log(predicted
/ measured)| of tokens/s (the fit's own objective, fitting.objective), by at least TOLERANCE; the
others are pinned at their prior in the shipped profile. One pass, each judged against fitting all:
the errors of the kept set are reported beside those of all, so an interaction shows.
"""

from __future__ import annotations

from trainplan.calibration.fitting import FITTED, coefficient, fit_many, objective, predicted_tps
from trainplan.profile import Profile

FRAMEWORKS = "framework_time"  # the per-stack step-time factors, judged as one coefficient
# The least drop in mean |log error| that counts as support: 0.1%, the precision validate prints.
TOLERANCE = 0.001


def _stats(cases, prof: Profile) -> dict:
    errs = sorted(abs(predicted_tps(c, prof) / c.measured["tokens_per_s_per_gpu"] - 1) for c in cases)
    mid = len(errs) // 2
    return {"count": len(errs), "mean_abs_log": objective(cases, prof),
            "median_abs": errs[mid] if len(errs) % 2 else (errs[mid - 1] + errs[mid]) / 2,
            "p90_abs": errs[min(len(errs) - 1, int(0.9 * (len(errs) - 1) + 0.5))]}


def split_cases(train, dates):
    """(fitted before the primary date, predicted on or after it); undated cases are in neither."""
    when = [(c, dates.of(c.record)) for c in train]
    return ([c for c, d in when if d is not None and d < dates.primary],
            [c for c, d in when if d is not None and d >= dates.primary])


def support(train, start: Profile, dates, params=FITTED, progress=None) -> dict:
    """The support table of each coefficient in `params` and of FRAMEWORKS on the primary split,
    which are kept, and the later sources' error with all fitted and with the kept set fitted."""
    before, after = split_cases(train, dates)
    jobs = {"all": (before, {"params": tuple(params)}), FRAMEWORKS: (before, {"params": tuple(params), "frameworks": False})}
    jobs |= {p: (before, {"params": tuple(q for q in params if q != p)}) for p in params}
    fits = fit_many(jobs, start, progress=progress)
    with_all = _stats(after, fits["all"])
    table = {}
    for p in (*params, FRAMEWORKS):
        pinned = _stats(after, fits[p])
        table[p] = {"prior": dict(start.framework_time) if p == FRAMEWORKS else coefficient(start, p),
                    "fitted": dict(fits["all"].framework_time) if p == FRAMEWORKS else coefficient(fits["all"], p),
                    "error_fitted": with_all["mean_abs_log"], "error_pinned": pinned["mean_abs_log"],
                    "median_pinned": pinned["median_abs"], "p90_pinned": pinned["p90_abs"],
                    "supported": with_all["mean_abs_log"] < pinned["mean_abs_log"] - TOLERANCE}
    kept = tuple(p for p in params if table[p]["supported"])
    frameworks = table[FRAMEWORKS]["supported"]
    final = fit_many({"kept": (before, {"params": kept, "frameworks": frameworks})}, start)["kept"]
    return {"split": dates.primary.isoformat(), "fitted_on": len(before), "predicted": len(after),
            "tolerance": TOLERANCE, "coefficients": table, "kept": list(kept), "frameworks": frameworks,
            "dropped": [p for p in (*params, FRAMEWORKS) if not table[p]["supported"]],
            "error_all_fitted": with_all, "error_kept_fitted": _stats(after, final)}
