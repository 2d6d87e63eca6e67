"""Error statistics of predictions against measurements: signed relative error per record and
count / median |error| / p90 |error| / max |error| / mean signed error per group."""

from __future__ import annotations

from trainplan.band import LARGE_SCALE_GPUS, scale_group  # noqa: F401  (one home: the band groups runs by scale)

METRICS = ("peak_mem_gib", "step_time_s", "tokens_per_s_per_gpu", "mfu")


def rel_error(predicted: float | None, measured: float | None) -> float | None:
    """(predicted - measured) / measured; None when either is missing."""
    if predicted is None or measured is None or measured == 0:
        return None
    return (predicted - measured) / measured


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default) of an already sorted list."""
    if len(sorted_values) == 1:
        return sorted_values[0]
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def stats(errors: list[float]) -> dict:
    if not errors:
        return {"count": 0}
    a = sorted(abs(e) for e in errors)
    return {
        "count": len(errors),
        "median_abs": percentile(a, 0.5),
        "p90_abs": percentile(a, 0.9),
        "max_abs": a[-1],
        "mean_signed": sum(errors) / len(errors),
    }


def model_group(num_experts) -> str:
    """The model group of a record: 'moe' (routed experts) or 'dense'."""
    return "moe" if isinstance(num_experts, int) and not isinstance(num_experts, bool) and num_experts > 1 else "dense"


def summarize(rows: list[dict],
              groupings: tuple[str, ...] = ("quality", "gpu", "precision", "framework", "scale", "model")) -> dict:
    """rows: {"error": {metric: e|None}, "quality":..., "gpu":..., ...}. Returns per-metric stats,
    overall and per value of each grouping key."""
    out: dict = {}
    for metric in METRICS:
        errs = [r["error"][metric] for r in rows if r["error"].get(metric) is not None]
        entry = {"all": stats(errs)}
        for g in groupings:
            groups: dict[str, list[float]] = {}
            for r in rows:
                e = r["error"].get(metric)
                if e is not None:
                    groups.setdefault(str(r.get(g)), []).append(e)
            entry[f"by_{g}"] = {k: stats(v) for k, v in sorted(groups.items())}
        out[metric] = entry
    return out
