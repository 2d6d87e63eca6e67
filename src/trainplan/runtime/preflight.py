"""Checks made before a run spends anything: the device the plan needs, and a checkpoint directory
that is writable and has room. Each fails in seconds with one line, where the same fault would
otherwise surface at the first save (for a 405B plan, hours into the run). Torch-free: `trainplan
train` runs them before it starts torchrun, and every rank runs them again (other launchers).
"""

from __future__ import annotations

import errno
import importlib.util
import os
import re
import shutil
from dataclasses import dataclass, replace
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


# The fused kernels a plan costs a Mamba layer with (costs/activations.py: mamba_ssm's selective scan
# and chunked SSD scan, causal_conv1d's convolution, which keep a few tensors per token and recompute
# the rest). Without them transformers runs its PyTorch reference scan, which keeps the per-step and
# per-chunk fp32 intermediates: a Nemotron-H 8B Mamba-2 block at 2,048 tokens holds 2,124 MB where the
# kernels hold 288 MB (trace/calibrate.py, the hybrid_ssm traces), and Jamba's Mamba-1 layers likewise.
SCAN_KERNELS = ("mamba_ssm", "causal_conv1d")


def check_scan_kernels(model, device: str, find=importlib.util.find_spec) -> None:
    """Refuse, in one line, a Mamba model on GPUs without the scan kernels its plan was costed with:
    it would run transformers' reference scan and hold several times the planned activations (on CPU,
    a functional check, the reference scan is what there is)."""
    from trainplan.models.layers import MAMBA, MAMBA2, layer_pattern

    if device != "cuda" or not {k.attention for k in layer_pattern(model)} & {MAMBA, MAMBA2}:
        return
    missing = [m for m in SCAN_KERNELS if find(m) is None]
    if missing:
        raise TrainplanError(
            f"{model.name}'s Mamba layers were costed with mamba_ssm's and causal_conv1d's fused scan kernels, and "
            f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed: transformers would run its "
            "PyTorch reference scan, which holds about 7x the planned activations per Mamba layer; pip install "
            "mamba-ssm causal-conv1d (built for this torch and CUDA), or run with --device cpu as a functional check")


# What torch.distributed.checkpoint's FileSystemWriter writes around the tensors (torch 2.13,
# measured on the demo's save with 2 gloo ranks: 722 items, tests/runtime/test_checkpoint_size.py
# pins the prediction against a real save). Every tensor piece is its own torch.save record.
ITEM_BYTES = 1_577  # zip framing of one tensor record (headers, pickle, 64-byte data alignment); measured 1,577
GROUP_ITEM_BYTES = 1_261  # one param-group setting (lr, betas, ...) as its own record; measured 1,261
# flatten_optimizer_state_dict stores each param group's settings once per parameter: torch 2.13's
# AdamW has 12 (lr, betas, eps, weight_decay, amsgrad, foreach, maximize, capturable, differentiable,
# fused, decoupled_weight_decay, and the scheduler's initial_lr).
GROUP_KEYS = 12
METADATA_ITEM_BYTES = 400  # `.metadata` per item: its index, offset and chunk (measured 263 with the demo's names)
EXTRAS_BYTES = 32 * 1024  # extras-rank<R>.pt: step, scheduler, RNG states, grad scaler (measured 14.8 KiB)
MANIFEST_FILE_BYTES = 200  # manifest.json per file: name, size, sha256 (measured ~110)
BLOCK_BYTES = 4096  # every file ends in a partly used file-system block
MARGIN = 0.05  # on top of all of it: longer names, another torch's framing


@dataclass(frozen=True, slots=True)
class CheckpointSize:
    """Bytes of one checkpoint as the trainer writes it (checkpoint.save), by part."""

    states: float  # every parameter as stored (fp32 master) and AdamW's two moments (costs/states.py)
    counters: float  # AdamW's step (one fp32 scalar per parameter tensor) and persistent buffers
    framing: float  # a torch.save record per tensor piece, step and param-group setting
    metadata: float  # DCP's .metadata
    extras: float  # extras-rank<R>.pt of every rank, manifest.json, block rounding of every file
    margin: float

    @property
    def total(self) -> float:
        return self.states + self.counters + self.framing + self.metadata + self.extras + self.margin

    def describe(self) -> str:
        return (f"{gib(self.total)} each: {gib(self.states)} weights and AdamW states, "
                f"{gib(self.framing + self.metadata + self.counters + self.extras)} DCP records, metadata "
                f"and extras, {MARGIN:.0%} margin")


def checkpoint_size(plan, world: int, tensors: int, buffer_bytes: float = 0.0, buffers: int = 0) -> CheckpointSize:
    """One checkpoint of `plan` on `world` ranks whose model has `tensors` parameter tensors and
    `buffers` persistent buffers of `buffer_bytes` (checkpoint.expected_size counts them).

    States: every parameter as stored between steps (the fp32 master copy; the compute dtype when
    the recipe has none, as pure bf16) and AdamW's two moments (costs/states.py
    checkpoint_bytes_per_param, FSDP2 convention: 4 + 2 x 4 bytes/param for bf16 mixed, 2 + 2 x 2
    for pure bf16). Each of those three tensors is written as one record per piece: a tensor is
    split over at most world / (dp_replicate x pp) ranks (replicas are written once, a pipeline stage's
    tensors live on its ranks only), the bound used here. Plus a step counter, GROUP_KEYS settings
    per parameter tensor and a record per buffer; .metadata per record; each rank's extras file;
    the manifest; a partial block per file; then MARGIN."""
    from trainplan.costs.states import ADAM_MOMENTS, checkpoint_bytes_per_param
    from trainplan.models.params import count_params

    L = plan.layout
    # The trainer saves as FSDP2 does under every sharding (under zero1, DDP holds the stored params).
    states = count_params(plan.job.model).total * checkpoint_bytes_per_param(L.recipe, "fsdp")
    pieces = max(1, world // max(1, L.dp_replicate * L.pp))
    records = tensors * (1 + ADAM_MOMENTS) * pieces + tensors + buffers
    group_records = tensors * GROUP_KEYS
    files = 2 * world + 2  # a DCP file and an extras file per rank, .metadata, manifest.json
    size = CheckpointSize(
        states=float(states), counters=4.0 * tensors + buffer_bytes,
        framing=float(records * ITEM_BYTES + group_records * GROUP_ITEM_BYTES),
        metadata=float((records + group_records) * METADATA_ITEM_BYTES),
        extras=float(world * EXTRAS_BYTES + files * (MANIFEST_FILE_BYTES + BLOCK_BYTES)), margin=0.0)
    return replace(size, margin=MARGIN * size.total)


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


def check_checkpoint_dir(root: Path, one: CheckpointSize, keep: int = DEFAULT_KEEP) -> None:
    """Raise a one-line TrainplanError unless `root` can be created, written, and has room for
    `keep` checkpoints of size `one`: what a save needs at its peak, the kept ones and the one
    being written (checkpoint.save prunes to keep - 1 first; the older ones go only once the new
    one is verified)."""
    one_checkpoint = one.total
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
            f"{gib(keep * one_checkpoint)} ({one.describe()}); free space, "
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
