"""Run directories as `trainplan train --out` writes them (plan.json, summary.json), built directly:
the measured tokens/s is the planner's own prediction under a known profile, times `slower`, so a
test knows what calibrate should find and what compare-run should read. No torch, no process."""

import json
from dataclasses import replace
from pathlib import Path

from trainplan.calibration.fitting import predicted_tps
from trainplan.calibration.runs import RunCase
from trainplan.hardware import Cluster, find_node
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.models import resolve
from trainplan.plan import Plan
from trainplan.profile import default_profile

INSTANCE = "ml.p5e.48xlarge"  # 8 x h200-sxm-141gb
GPU = "h200-sxm-141gb"
# (model, micro-batch, activation checkpointing, sequence): four layouts whose terms' shares differ
SHAPES = [("llama-3.2-1b", 1, "none", 4096), ("llama-3.2-1b", 2, "full", 2048),
          ("llama-3.1-8b", 1, "full", 8192), ("llama-3.1-8b", 2, "none", 2048)]


def slower_gemms(factor: float):
    """The packaged profile on a machine whose GEMMs reach `factor` of what it assumes."""
    p = default_profile()
    return replace(p, gemm_eff=p.gemm_eff * factor)


def write_run(d: Path, shape, truth=None, slower: float = 1.0, device: str = "cuda", gpu: str | None = GPU) -> Path:
    model, mb, ac, seq = shape
    job = Job(resolve(model), Cluster(find_node(INSTANCE), 1), Workload(seq, 8 * mb))
    layout = Layout(micro_batch=mb, ac=ac, dp_shard=8, precision="bf16")
    tps = predicted_tps(RunCase(d.name, job, layout, {}), truth or default_profile()) / slower
    d.mkdir(parents=True, exist_ok=True)
    (d / "plan.json").write_text(Plan(job, layout).to_json())
    summary = {"world_size": 8, "device": device, "model": model, "layout": layout.short(), "steps": 20,
               "tokens_per_s_per_gpu": tps, "step_time_s": job.workload.tokens_per_step / tps / 8,
               "mfu": None, "peak_mem_gib": None}
    if gpu is not None and device != "cpu":
        summary["peak_flops_gpu"] = gpu  # the catalog GPU the trainer matched the device name to
    (d / "summary.json").write_text(json.dumps(summary))
    return d


def write_runs(root: Path, truth=None, slower: float = 1.0, shapes=SHAPES) -> list[str]:
    return [str(write_run(root / f"run{i}", s, truth, slower)) for i, s in enumerate(shapes)]
