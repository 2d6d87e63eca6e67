"""The device a run measured: the one rule calibrate and compare-run read it by.

A run's speed describes the device it ran on, and only that one: the planner predicts catalog GPUs
(hardware/gpus.toml) and has no CPU device, so a CPU run of a plan made for an H200 is not a
measurement of the H200 (issue 27: one such run, fitted, pinned every coefficient at its bound and
halved a B200 plan; compared, it read measured/predicted 3,559 for the step time).

Torch-free and planner-free: compare-run reads runs where only the runtime is installed.
"""

from __future__ import annotations

CPU = "cpu"


def run_device(summary: dict, plan_gpu: str) -> str:
    """'cpu', or the catalog name of the GPU the run measured.

    `summary`: the run's summary.json. `trainplan train` writes `device` ('cuda' or 'cpu') and, on a
    GPU, `peak_flops_gpu`: the catalog GPU its device name matched (the plan's GPU when none did).
    A summary from another trainer may name it as `gpu`; without any of these, the run is taken to
    have run on its plan's GPU (`plan_gpu`), as docs/machine-profile.md says."""
    if str(summary.get("device") or "cuda").lower() == CPU:
        return CPU
    for key in ("gpu", "peak_flops_gpu"):
        if isinstance(summary.get(key), str) and summary[key]:
            return summary[key]
    return plan_gpu


def mismatch(run: str, device: str, gpu: str, what: str, todo: str = "") -> str | None:
    """The one-line refusal when a run's `device` is not `gpu`, its plan's GPU, which `what` predicts
    it on; None when they are the same. `todo`: what to do instead (default: use runs made on `gpu`)."""
    if device == gpu:
        return None
    head = f"{run} ran on {device}, but {what} predicts it on {gpu}, its plan's GPU"
    if device == CPU:
        return (f"{head}: a CPU run's speed says nothing about a GPU's (the planner has no CPU device); "
                + (todo or f"use runs made on {gpu} (`trainplan train` there)"))
    return (f"{head}; " + (todo or f"use runs made on {gpu}, or plan for {device} (`trainplan plan --instance` "
                                   "with that GPU) and train that plan"))
