"""A framework's training log as the run directory trainplan's reference trainer writes (issue #22
item 5, DESIGN.md "The team's own stack"): `measurements.jsonl` of trainplan-measurement/1 step
records (runtime/metrics.py StepRecord), `summary.json` (metrics.summarize plus the trainer's run
keys) and, with a plan, `plan.json`; so `compare-run` and `calibrate --runs` read an ingested run as
they read a trained one, and nothing downstream knows where it came from.

What a record holds, in order of preference:
  1. what the log states (export/<framework>_log.py, its lines and sources in <framework>_log.toml);
  2. what follows from it and the run's shape (world size, sequence length, global batch: the log's
     own, else the plan's), computed as the trainer computes it: tokens/s from the step time or the
     step time from tokens/s, MFU from TFLOP/s and the GPU's bf16 dense peak (precision.mfu_peak),
     TFLOP/s in the planner's FLOPs convention from tokens/s and the plan's model;
  3. nothing: None, and the summary's `ingested.not_stated` names the field. Nothing is invented.
The summary's `ingested.derived` says how each field of (2) was computed.

The GPU the run measured decides what it may be compared with and calibrate (calibration/device.py):
the device the log names (matched to the catalog; a name the catalog lacks is kept as printed, so
compare-run and calibrate refuse it by name), else --gpu, else the plan's GPU; none of them is a
one-line error.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from dataclasses import asdict, replace
from pathlib import Path

from trainplan.errors import TrainplanError
from trainplan.export.logs import CAUSAL, NONCAUSAL, Log, Step, parser
from trainplan.runtime.metrics import MEASUREMENT_SCHEMA, StepRecord, flops_per_token, summarize

# The StepRecord fields a log may leave unstated (schema, step, skipped always are).
MEASURED = ("loss", "lr", "grad_norm", "tokens", "step_time_s", "tokens_per_s", "tokens_per_s_per_gpu",
            "tflops_per_gpu", "mfu", "mfu_noncausal", "peak_allocated_gib", "peak_reserved_gib")


def read_logs(paths: list[str], fmt: str) -> Log:
    """The steps and facts of `paths` (one run's logs) in format `fmt`. A step on several lines (ranks
    that each print it, or files that repeat it) is read once: its first line, with the largest memory
    any of its lines states (the worst rank, as the planner predicts it)."""
    mod = parser(fmt)
    merged: Log | None = None
    by_step: dict[int, Step] = {}
    memory: list[dict] = []
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                log = mod.parse(f, str(path))
        except OSError as e:
            raise TrainplanError(f"{path}: cannot read it ({e.strerror or e})") from None
        if merged is None:
            merged = replace(log, steps=[], memory={})
        memory.append(log.memory)
        for k in ("device_name", "device_kind", "device_gib", "world_size", "seq_len", "global_batch"):
            if getattr(merged, k) is None:
                setattr(merged, k, getattr(log, k))
        for s in log.steps:
            was = by_step.setdefault(s.step, s)
            if was is not s:
                was.peak_allocated_gib = _max(was.peak_allocated_gib, s.peak_allocated_gib)
                was.peak_reserved_gib = _max(was.peak_reserved_gib, s.peak_reserved_gib)
    if not by_step:
        raise TrainplanError(f"{', '.join(map(str, paths))}: no step lines of {mod.FRAMEWORK} {mod.RELEASE} "
                             f"(is --format {fmt} the framework that wrote it?); nothing written")
    for stated in memory:  # memory lines of any file, for the steps any file's lines hold
        for k, (alloc, reserved) in stated.items():
            if k in by_step:
                s = by_step[k]
                s.peak_allocated_gib, s.peak_reserved_gib = _max(s.peak_allocated_gib, alloc), _max(s.peak_reserved_gib, reserved)
    merged.steps = [by_step[k] for k in sorted(by_step)]
    return merged


def _max(a, b):
    return b if a is None else a if b is None else max(a, b)


def device_of(log: Log, gpu: str | None, plan) -> tuple[str, object | None, str]:
    """(GPU name the run measured, its catalog GPUSpec or None, where that came from)."""
    from trainplan.hardware import find_gpu

    asked = find_gpu(gpu) if gpu else None
    if log.device_name:
        spec = match_gpu(log.device_name, log.device_gib)
        name = spec.name if spec else log.device_name
        if asked is not None and name != asked.name:
            raise TrainplanError(f"the log says the run ran on {log.device_name!r} ({name}), --gpu says {asked.name}; "
                                 "leave --gpu out (the log's device is what the run measured)")
        return name, spec, "log"
    if asked is not None:
        return asked.name, asked, "--gpu"
    if plan is not None:
        return plan.job.cluster.gpu.name, plan.job.cluster.gpu, "plan"
    raise TrainplanError(f"the {log.framework} log names no device: give --plan plan.json (the run's plan, whose GPU "
                         "it ran on) or --gpu NAME (`trainplan hardware`), so calibrate can tell its GPU")


def match_gpu(printed: str, gib: float | None):
    """The catalog GPU a printed device name ('NVIDIA H100 80GB HBM3') is, by its family word
    ('h100') and, between variants, the memory nearest the printed capacity; None if none is."""
    from trainplan.hardware import gpus
    from trainplan.units import GiB

    words = printed.lower().replace("-", " ").split()
    found = [g for g in gpus().values() if g.name.split("-")[0] in words]
    if not found:
        return None
    return min(found, key=lambda g: abs(g.memory_bytes / GiB - gib)) if gib is not None else found[0]


def _shape(log: Log, plan) -> dict:
    """world_size, seq_len, global_batch: the log's, else the plan's; a log and a plan that disagree
    are not one run (one-line error)."""
    out = {"world_size": log.world_size, "seq_len": log.seq_len,
           "global_batch": log.global_batch or next((s.global_batch for s in log.steps if s.global_batch), None)}
    if plan is None:
        return out
    planned = {"world_size": plan.job.cluster.num_gpus, "seq_len": plan.job.workload.seq_len,
               "global_batch": plan.job.workload.global_batch}
    for k, v in planned.items():
        if out[k] is not None and out[k] != v:
            raise TrainplanError(f"the log's run has {k} {out[k]}, the plan {v}: --plan must be the plan the "
                                 "run executed")
        out[k] = v
    return out


def records(log: Log, shape: dict, spec, plan) -> tuple[list[StepRecord], dict[str, str]]:
    """The step records and, for each field computed rather than read, how (module docstring, 2)."""
    from trainplan.precision import mfu_peak

    world, seq = shape["world_size"], shape["seq_len"]
    peak = mfu_peak(spec) if spec is not None else None
    model = plan.job.model if plan is not None else None
    flops = {c: flops_per_token(model, seq, causal=c == CAUSAL) for c in (CAUSAL, NONCAUSAL)} if model and seq else {}
    stated_causal = log.flops_convention == CAUSAL
    derived: dict[str, str] = {}

    def how(field: str, text: str) -> None:
        derived.setdefault(field, text)

    out = []
    for s in log.steps:
        batch = s.global_batch or shape["global_batch"]
        tokens = batch * seq if batch and seq else None
        if tokens:
            how("tokens", "global batch * sequence length")
        time_s, per_gpu, tps = s.step_time_s, s.tokens_per_s_per_gpu, None
        if time_s is None and per_gpu and tokens and world:
            time_s = tokens / (per_gpu * world)
            how("step_time_s", "tokens per step / (tokens/s per GPU * world size)")
        if tokens and time_s:
            tps = tokens / time_s
            how("tokens_per_s", "tokens per step / step time")
        if per_gpu is None and tps and world:
            per_gpu = tps / world
            how("tokens_per_s_per_gpu", "tokens/s / world size")
        # TFLOP/s and MFU in the planner's convention, causal attention at half (runtime/metrics.py)
        tflops = s.tflops_per_gpu if stated_causal else None
        if tflops is None and per_gpu and flops:
            tflops = per_gpu * flops[CAUSAL] / 1e12
            how("tflops_per_gpu", "tokens/s per GPU * the plan model's FLOPs per token (causal)")
        mfu = tflops * 1e12 / peak if tflops and peak else None
        if mfu is not None:
            how("mfu", "TFLOP/s per GPU (causal) / the GPU's bf16 dense peak (precision.mfu_peak)")
        noncausal = None if stated_causal else s.mfu
        if noncausal is None and not stated_causal and s.tflops_per_gpu and peak:
            noncausal = s.tflops_per_gpu * 1e12 / peak
            how("mfu_noncausal", "the log's TFLOP/s (non-causal) / the GPU's bf16 dense peak")
        if noncausal is None and per_gpu and flops and peak:
            noncausal = per_gpu * flops[NONCAUSAL] / peak
            how("mfu_noncausal", "tokens/s per GPU * the plan model's FLOPs per token (non-causal) / bf16 dense peak")
        reserved = s.peak_reserved_gib
        out.append(StepRecord(
            schema=MEASUREMENT_SCHEMA, step=s.step, loss=_finite(s.loss), lr=s.lr, grad_norm=_finite(s.grad_norm),
            tokens=tokens, step_time_s=time_s, tokens_per_s=tps, tokens_per_s_per_gpu=per_gpu,
            tflops_per_gpu=tflops, mfu=mfu, mfu_noncausal=noncausal,
            peak_mem_gib=reserved, peak_mem_kind="reserved" if reserved is not None else None,
            peak_allocated_gib=s.peak_allocated_gib, peak_reserved_gib=reserved, skipped=s.skipped,
        ))
    return out, derived


def _finite(x):
    return x if x is not None and math.isfinite(x) else None


def ingest(paths: list[str], fmt: str, out: str | Path, plan_path: str | None = None, gpu: str | None = None) -> dict:
    """Read `paths`, write the run directory `out` (all of it or nothing); returns its summary."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise TrainplanError(f"--out {out} exists and is not an empty directory; give a new one (a run directory "
                             "holds one run)")
    plan = None
    if plan_path is not None:
        from trainplan.plan import load_plan

        plan = load_plan(plan_path)
    log = read_logs(paths, fmt)
    name, spec, gpu_from = device_of(log, gpu, plan)
    shape = _shape(log, plan)
    recs, derived = records(log, shape, spec, plan)
    rows = [asdict(r) for r in recs]
    not_stated = [k for k in MEASURED if all(r[k] is None for r in rows)]
    summary = {
        **summarize(rows),
        # summarize takes the last record's kind; a log that states memory on some steps only
        # (Megatron's report_memory) states reserved memory whenever it states any
        "peak_mem_kind": "reserved" if any(r["peak_reserved_gib"] is not None for r in rows) else None,
        "start_step": 0,
        "loop_time_s": None,
        "resumed_from": None, "skipped_checkpoints": [], "stopped_by": None, "error": None,
        "checkpoint": None, "model_file": None,
        "measurements": str(out / "measurements.jsonl"),
        "world_size": shape["world_size"],
        "device": log.device_kind or "cuda",  # as the trainer writes it; a GPU named by --gpu or the plan is CUDA
        "gpu": name,  # calibration/device.run_device reads it first
        "peak_flops_gpu": spec.name if spec is not None else None,  # as the trainer writes it: the catalog GPU
        "flops_per_token": flops_per_token(plan.job.model, shape["seq_len"]) if plan is not None else None,
        "layout": plan.layout.short() if plan is not None else None,
        "precision": plan.layout.precision if plan is not None else None,
        "model": plan.job.model.name if plan is not None else None,
        "ingested": {
            "format": log.framework, "release": log.release, "logs": [str(p) for p in paths],
            "step_lines": len(recs), "gpu_from": gpu_from, "device_printed": log.device_name,
            "plan_gpu": plan.job.cluster.gpu.name if plan is not None else None,
            "not_stated": not_stated,
            "derived": {k: v for k, v in derived.items() if k not in not_stated},
            "shape": shape,
        },
    }
    files = {"measurements.jsonl": "".join(json.dumps(r) + "\n" for r in rows),
             "summary.json": json.dumps(summary, indent=2) + "\n"}
    if plan is not None:
        files["plan.json"] = plan.to_json()
    _write_run(out, files)
    return summary


def _write_run(out: Path, files: dict[str, str]) -> None:
    """Every file of the run directory, or none: written into a temporary directory beside `out`,
    then moved into it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.ingest-", dir=out.parent))
    try:
        for name, text in files.items():
            (tmp / name).write_text(text)
        out.mkdir(exist_ok=True)
        for name in files:
            os.replace(tmp / name, out / name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
