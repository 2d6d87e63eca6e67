"""Checks made before a run spends anything: the device the plan needs, and a checkpoint directory
that is writable and has room. Each fails in seconds with one line, where the same fault would
otherwise surface at the first save (for a 405B plan, hours into the run). Torch-free: `trainplan
train` runs them before it starts torchrun, and every rank runs them again (other launchers).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from pathlib import Path

from trainplan.errors import TrainplanError
from trainplan.runtime import faults

DEFAULT_KEEP = 2  # checkpoints kept; also how many the directory must have room for
_RECLAIMABLE = re.compile(r"^step-\d{8}(\.partial|\.deleting)?$")  # not .bad: kept for a person


def choose_device(requested: str | None, gpu_plan: bool, cuda_available: bool) -> str:
    """"cuda" or "cpu". A plan is made for GPUs: run on CPU only when asked (--device cpu); the
    demo takes whatever there is."""
    if requested == "cpu":
        return "cpu"
    if requested == "cuda" or gpu_plan:
        if not cuda_available:
            raise TrainplanError(
                "this plan is for GPUs but torch sees none (torch.cuda.is_available() is False); run it on a "
                "GPU machine, or pass --device cpu to run it on CPU with gloo (a functional check, not a measurement)")
        return "cuda"
    return "cuda" if cuda_available else "cpu"


def checkpoint_bytes(plan) -> float:
    """Bytes of one checkpoint of `plan`: what the trainer saves is every parameter as stored
    between steps (the fp32 master copy; the compute dtype when the recipe has none, as pure bf16)
    and AdamW's two moments, in the recipe's bytes per element (costs/states.py, FSDP2 convention:
    4 + 2 x 4 bytes/param for bf16 mixed, 2 + 2 x 2 for pure bf16). Scheduler, RNG and DCP
    metadata are kilobytes."""
    from trainplan.costs.states import ADAM_MOMENTS
    from trainplan.models.params import count_params
    from trainplan.precision import recipe

    r = recipe(plan.layout.precision)
    return count_params(plan.job.model).total * ((r.master_bytes or r.param_bytes) + ADAM_MOMENTS * r.optimizer_bytes)


def gib(n: float) -> str:
    return f"{n / 2**40:.1f} TiB" if n >= 2**40 else f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def held_bytes(root: Path) -> int:
    """Bytes in finished and unfinished checkpoint directories under `root`: a save reclaims them
    (older ones are pruned and stale .partial directories removed before it writes)."""
    total = 0
    if not root.is_dir():
        return 0
    for d in root.iterdir():
        if d.is_dir() and _RECLAIMABLE.match(d.name):
            total += sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
    return total


def check_checkpoint_dir(root: Path, one_checkpoint: float, keep: int = DEFAULT_KEEP) -> None:
    """Raise a one-line TrainplanError unless `root` can be created, written, and has room for
    `keep` checkpoints of `one_checkpoint` bytes (what a save needs at its peak: the kept ones,
    the one being written included)."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        if err := faults.readonly_error(root):
            raise err
        probe = root / f".trainplan-write-test-{os.getpid()}"
        with open(probe, "wb") as f:
            f.write(b"trainplan")
            f.flush()
            os.fsync(f.fileno())
        probe.unlink()
    except OSError as e:
        what = os.strerror(e.errno) if e.errno else str(e)
        if e.errno == errno.ENOSPC:
            raise TrainplanError(no_space_message(root, one_checkpoint)) from None
        raise TrainplanError(f"checkpoint directory {root} is not writable ({what}); choose a writable "
                             "--checkpoint-dir (on a shared or persistent volume for multi-node runs)") from None
    free = shutil.disk_usage(root).free
    need = keep * one_checkpoint - held_bytes(root)
    if free < need:
        raise TrainplanError(
            f"checkpoint directory {root} has {gib(free)} free but {keep} checkpoints of this plan need about "
            f"{gib(keep * one_checkpoint)} ({gib(one_checkpoint)} each: weights and AdamW states); free space, "
            "or choose a larger --checkpoint-dir")


def no_space_message(root: Path, one_checkpoint: float, step: int | None = None, previous: str | None = None) -> str:
    at = f" while saving the checkpoint of step {step}" if step is not None else ""
    kept = f"; the previous checkpoint {previous} is intact" if previous else ""
    free = shutil.disk_usage(root).free if root.exists() else 0
    return (f"no space left on device{at} in {root} ({gib(free)} free, a checkpoint needs about "
            f"{gib(one_checkpoint)}){kept}: free space or point --checkpoint-dir at a larger volume, then rerun "
            "to resume")


def looks_like_disk_full(error: BaseException, root: Path, one_checkpoint: float) -> bool:
    """A failed save is a full disk when an ENOSPC/EDQUOT is in the exception chain, or when the
    file system has less room left than a checkpoint needs: torch's zip writer reports a full disk
    only as `inline_container.cc ... unexpected pos` without an errno (checked: torch 2.13, tmpfs)."""
    seen, todo = set(), [error]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        todo += [e.__cause__, e.__context__]
        failures = getattr(e, "failures", None)  # DCP's CheckpointException: {rank: (exception, trace)}
        if isinstance(failures, dict):
            todo += [f[0] if isinstance(f, tuple) else f for f in failures.values()]
    try:
        return shutil.disk_usage(root).free < one_checkpoint
    except OSError:
        return False
