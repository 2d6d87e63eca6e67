"""Predict every representable record of a validation dataset and compare with what was measured.

Predictions are cross-validated when the profile carries leave-one-source-out folds: a record is
predicted with the coefficients fitted without its own source (calibration/fitting.py), so the error
reported is the held-out error, not the fit error.

Comparisons:
  * tokens_per_s_per_gpu and step_time_s: directly.
  * peak_mem_gib: against the allocator's reserved total when the source says 'reserved'
    (torchtitan's logger), its allocated total when it says 'allocated' or the framework's logger
    is known to print max_memory_allocated (dataset.peak_mem_kind), else against the device total
    (reserved + NCCL + CUDA context).
  * mfu: in the record's own convention. A record's FLOPs per token under its convention are
    F = mfu x mfu_peak / tokens_per_s (both measured); the predicted MFU is predicted tokens/s x F /
    peak, so the MFU error equals the throughput error whenever both are published. Where only MFU
    is published, F is Megatron's formula (full attention, Narayanan et al. eq. 3), which the
    dataset's notes name for most such records, against `mfu_peak_tflops`.
"""

from __future__ import annotations

from trainplan.estimate import estimate
from trainplan.precision import mfu_peak
from trainplan.profile import Profile
from trainplan.units import TFLOPS, GiB
from trainplan.validation.dataset import Case, peak_mem_kind
from trainplan.validation.errors import METRICS, model_group, rel_error, scale_group, summarize


def predict_case(case: Case, prof: Profile, cross_validated: bool = True) -> dict:
    p = prof.fold(case.source_key) if cross_validated else prof
    e = estimate(case.job, case.layout, p)
    meas = case.measured
    kind = peak_mem_kind(case)
    mem = {"reserved": e.memory.total_reserved, "allocated": e.memory.total_allocated}.get(kind, e.memory.total)
    tps = e.tokens_per_s_per_gpu
    mfu = None
    if meas.get("mfu") is not None:
        if meas.get("tokens_per_s_per_gpu"):
            mfu = tps * meas["mfu"] / meas["tokens_per_s_per_gpu"]
        else:
            peak = (meas.get("mfu_peak_tflops") or 0) * TFLOPS or mfu_peak(case.job.cluster.gpu)
            mfu = e.mfu_noncausal * e.peak_tflops_per_gpu * TFLOPS / peak  # from the estimate's peak to the record's
    return {"peak_mem_gib": mem / GiB, "step_time_s": e.step_time_s, "tokens_per_s_per_gpu": tps,
            "mfu": mfu, "_estimate": e, "_profile": p.name}


def flags(case: Case) -> list[str]:
    """Why a record may not be representable, kept in the output (never dropped, still fitted)."""
    out = []
    hw = case.record.get("hardware", {})
    if "power" in (hw.get("detail") or "").lower() and "limit" in (hw.get("detail") or "").lower() \
            and hw.get("power_limit_w") is None:
        out.append("GPU power-limited, limit not stated: predicted at full clocks")
    tps = case.measured.get("tokens_per_s_per_gpu")
    if tps:
        from trainplan.costs.flops import model_flops

        ceiling = case.layout.recipe.matmul_ceiling(case.job.cluster.gpu)
        implied = tps * model_flops(case.job.model).model_per_token(case.job.workload.seq_len)
        if implied > ceiling:
            out.append(f"measured rate implies {implied / ceiling:.0%} of the measured matmul ceiling")
    return out


def run(cases: list[Case], prof: Profile, cross_validated: bool = True) -> dict:
    records, rows = [], []
    for c in cases:
        base = {"id": c.id, "source_key": c.source_key, "quality": c.quality, "framework": c.framework,
                "gpu": c.record.get("hardware", {}).get("gpu"),
                "precision": c.record.get("train", {}).get("precision"),
                "scale": scale_group(c.record.get("hardware", {}).get("num_gpus")),
                "model": model_group((c.record.get("model") or {}).get("num_experts"))}
        if c.skipped_reason:
            records.append({**base, "predicted": None, "measured": None, "error": None,
                            "assumptions": list(c.assumptions), "skipped_reason": c.skipped_reason,
                            "flags": []})
            continue
        pred = predict_case(c, prof, cross_validated)
        measured = {k: c.measured.get(k) for k in METRICS}
        err = {k: rel_error(pred[k], measured[k]) for k in METRICS}
        rec = {**base, "layout": c.layout.short(), "profile": pred["_profile"], "flags": flags(c),
               "predicted": {k: pred[k] for k in METRICS}, "measured": measured, "error": err,
               "assumptions": list(c.assumptions), "skipped_reason": None}
        records.append(rec)
        rows.append({**base, "error": err})
    summary = summarize(rows)
    summary["records"] = len(cases)
    summary["predicted"] = len(rows)
    summary["skipped"] = len(cases) - len(rows)
    summary["with_assumptions"] = sum(1 for c in cases if c.assumptions and not c.skipped_reason)
    summary["cross_validated"] = bool(cross_validated and prof.folds)
    summary["profile"] = prof.name
    return {"records": records, "summary": summary}
