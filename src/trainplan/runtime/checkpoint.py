"""Distributed checkpoints (torch.distributed.checkpoint) that are complete, checked, or invisible.

A save: every rank writes its shards of the model and optimizer with DCP into
`<root>/step-NNNNNNNN.partial/`, plus `extras-rank<R>.pt` (scheduler, step, its RNG states, grad
scaler); each rank hashes what it wrote, the digests go into `manifest.json` (written last,
through a rename; manifest.py), and the directory is renamed to its final name. A rename inside
one directory is atomic on POSIX file systems, so a reader sees the whole checkpoint or none of it.
Then each rank checks its files in the published directory against the manifest, and only then are
older checkpoints pruned (retention.py: keep-last-N counts the one being written).

A restore takes the newest checkpoint whose every file matches its manifest (size and sha256, the
files split over the ranks so the checkpoint is read once); an empty, half-written or corrupted
one is named in one line, moved aside (`.bad`) and the previous one taken. Every failure is agreed
across ranks (distributed.agree) so all ranks stop, skip or load together.

The directory may be shared by all nodes (a cluster file system) or local to each node (SageMaker's
/opt/ml/checkpoints, which SageMaker syncs to one S3 prefix and restores to every node): the
first local rank of each node prepares, renames and prunes, one node after the other, so a shared
directory is renamed once and local ones each once. A restore expects every node to see the whole
checkpoint (a shared directory, or SageMaker's restore of the S3 prefix).
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import traceback
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from trainplan.runtime import faults, manifest, preflight, retention
from trainplan.runtime.distributed import RunStopped, agree
from trainplan.runtime.retention import step_dir


def _rng_state() -> dict:
    s = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        s["cuda"] = torch.cuda.get_rng_state()
    return s


def _set_rng_state(s: dict) -> None:
    random.setstate(s["python"])
    np.random.set_state(s["numpy"])
    torch.set_rng_state(s["torch"])
    if "cuda" in s and torch.cuda.is_available():
        torch.cuda.set_rng_state(s["cuda"])


def _options():
    # Optimizer state keyed by parameter name, one entry per parameter: ranks that hold different
    # parameters (pipeline stages) each save their own param-group settings, where the nested
    # form would keep only rank 0's group list (DCP dedups non-tensor values by key).
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(flatten_optimizer_state_dict=True)


def expected_size(plan, world: int, hf: bool = False) -> preflight.CheckpointSize:
    """What one save of `plan` on `world` ranks writes (preflight.checkpoint_size), with the
    tensors counted on the model itself, built on the meta device (no memory, no init): the
    trainer's own Decoder, or the Hugging Face model with `hf`."""
    from trainplan.runtime.build import build_hf_model
    from trainplan.runtime.model import Decoder

    if hf and plan.hf_config:
        model = build_hf_model(plan.hf_config)
    else:
        with torch.device("meta"):
            model = Decoder(plan.job.model, plan.job.workload.seq_len)
    tensors = len(list(model.parameters()))  # a tied embedding is one tensor
    names = {n for n, _ in model.named_parameters(remove_duplicate=False)}
    buffers = [b for n, b in model.state_dict().items() if n not in names and not n.endswith("._extra_state")]
    return preflight.checkpoint_size(plan, world, tensors, float(sum(b.numel() * b.element_size() for b in buffers)),
                                     len(buffers))


def _app_state(model, optimizer) -> dict:
    from torch.distributed.checkpoint.state_dict import get_state_dict

    from trainplan.runtime.parallel import checkpointed

    model_sd, optim_sd = get_state_dict(model, checkpointed(optimizer), options=_options())
    return {"model": model_sd, "optim": optim_sd}


def save(root: str | Path, step: int, model, optimizer, scheduler, scaler=None,
         keep: int = preflight.DEFAULT_KEEP, one_checkpoint: float = 0.0) -> Path:
    """Collective: every rank calls it. Returns the final directory; raises RunStopped (on every
    rank) when the checkpoint cannot be written, removing what it wrote. `one_checkpoint`: the
    expected bytes (expected_size), to tell a full disk from other failures."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    root = Path(root)
    final = step_dir(root, step)
    tmp = final.with_name(final.name + ".partial")
    rank, world = dist.get_rank(), dist.get_world_size()
    previous = next((p.name for s, p in retention.finished(root) if s != step), None)

    def prepare():
        root.mkdir(parents=True, exist_ok=True)
        retention.remove_stale(root)
        retention.prune(root, keep - 1)  # room for the new one: `keep` on disk while it is written
        faults.before_save(step, root)
        tmp.mkdir()

    def fail(error: BaseException | None) -> None:
        why = agree(_describe(error, root, step, one_checkpoint, previous) if error is not None else None)
        if why:
            _on_each_node(lambda: shutil.rmtree(tmp, ignore_errors=True))
            raise RunStopped(why)

    fail(_on_each_node(prepare))
    error, mine = None, {}
    try:
        dcp.save(_app_state(model, optimizer), checkpoint_id=str(tmp))
        extras = {"step": step, "scheduler": scheduler.state_dict(), "rng": _rng_state(),
                  "scaler": scaler.state_dict() if scaler is not None else None}
        with open(tmp / f"extras-rank{rank}.pt", "wb") as f:
            torch.save(extras, f)
            f.flush()
            os.fsync(f.fileno())  # DCP fsyncs its own files (FileSystemWriter sync_files)
        faults.after_shards(step)
        mine = manifest.describe(tmp, manifest.own_files(tmp, rank))
    except (Exception, CheckpointException) as e:  # noqa: BLE001 - any failure is agreed on; DCP raises a BaseException
        error = e
    fail(error)
    parts = [None] * world
    dist.all_gather_object(parts, mine)
    files = {k: v for part in parts for k, v in part.items()}

    def publish():
        if not tmp.is_dir():  # a shared directory another node already renamed
            return
        manifest.write(tmp, step, world, files)
        if final.exists():  # a re-save of the same step (resumed run): replace it whole
            shutil.rmtree(final)
        os.replace(tmp, final)
        retention.fsync_dir(root)

    fail(_on_each_node(publish))
    problem = manifest.check(final, files, sorted(mine), digests=False)
    why = agree(f"checkpoint {final} did not verify after writing: {problem}" if problem else None)
    if why:
        raise RunStopped(why)
    _on_each_node(lambda: retention.prune(root, keep))
    return final


def _describe(error: BaseException, root: Path, step: int, one_checkpoint: float, previous: str | None) -> str:
    if preflight.looks_like_disk_full(error, root, one_checkpoint):
        return preflight.no_space_message(root, one_checkpoint, step, previous)
    failures = getattr(error, "failures", None)  # DCP: the first rank's own exception
    if isinstance(failures, dict) and failures:
        error = next(iter(failures.values()))[0]
    what = "".join(traceback.format_exception_only(type(error), error)).strip().splitlines()[-1]
    kept = f"; the previous checkpoint {previous} is intact" if previous else ""
    return f"saving the checkpoint of step {step} to {root} failed: {what}{kept}"


def _on_each_node(fn) -> BaseException | None:
    """Run fn on the first local rank of each node, one node at a time (torchrun's GROUP_RANK is
    the node index), with barriers between: collective. Returns fn's OSError on the ranks that
    ran it (None elsewhere), so that the caller can agree on it instead of leaving the others
    waiting at a barrier."""
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", dist.get_world_size()))
    nodes = max(1, dist.get_world_size() // local_world)
    me = (int(os.environ.get("GROUP_RANK", "0")) if int(os.environ.get("LOCAL_RANK", "0")) == 0 else None)
    error = None
    for node in range(nodes):
        if me == node:
            try:
                fn()
            except OSError as e:
                error = e
        dist.barrier()
    return error


def pin(root: str | Path, name: str, reason: str) -> None:
    """Collective: keep checkpoint `name` (step-NNNNNNNN) from pruning, for good (retention.pin)."""
    _on_each_node(lambda: retention.pin(Path(root), int(name.removeprefix("step-")), reason))


def restore_point(root: str | Path | None) -> tuple[Path | None, list[str]]:
    """Collective: the newest usable checkpoint under `root` (None: none yet) and the unusable
    newer ones it skipped (moved aside). Raises RunStopped when checkpoints exist and none is
    usable: starting afresh over them is for a person to decide."""
    if not root:
        return None, []
    root = Path(root)
    names = [[p.name for _, p in retention.finished(root)]]
    dist.broadcast_object_list(names, src=0)
    rank, world = dist.get_rank(), dist.get_world_size()
    skipped: dict[str, str] = {}  # name -> why it is unusable, newest first
    for name in names[0]:
        d = root / name
        body, why = manifest.read(d)
        if body is not None:  # each rank reads its share of the files: the checkpoint is read once
            why = manifest.check(d, body["files"], sorted(body["files"])[rank::world], digests=True)
        why = agree(why or None)
        if why:
            skipped[name] = why
            continue
        for bad, reason in skipped.items():
            _on_each_node(lambda bad=bad: retention.move_aside(root / bad))
            if rank == 0:
                print(f"trainplan.runtime: warning: checkpoint {root / bad} is unusable ({reason}); moved aside to "
                      f"{bad}.bad, resuming from {name}", file=sys.stderr, flush=True)
        return d, [f"{root / bad} ({reason})" for bad, reason in skipped.items()]
    if skipped:
        raise RunStopped(f"no usable checkpoint in {root}: " + "; ".join(f"{n} ({w})" for n, w in skipped.items())
                         + "; move them aside to start afresh, or restore a good copy")
    return None, []


def load(path: str | Path, model, optimizer, scheduler, scaler=None) -> int:
    """Collective: restores model, optimizer, scheduler, RNG and scaler; returns the step saved."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    path = Path(path)
    state = _app_state(model, optimizer)
    dcp.load(state, checkpoint_id=str(path))
    from trainplan.runtime.parallel import checkpointed

    set_state_dict(model, checkpointed(optimizer), model_state_dict=state["model"], optim_state_dict=state["optim"],
                   options=_options())
    rank = dist.get_rank()
    extras_file = path / f"extras-rank{rank}.pt"
    if not extras_file.is_file():  # resumed on a different world size: rank 0's schedule and RNG
        extras_file = path / "extras-rank0.pt"
    extras = torch.load(extras_file, weights_only=False)
    scheduler.load_state_dict(extras["scheduler"])
    if scaler is not None and extras.get("scaler"):
        scaler.load_state_dict(extras["scaler"])
    _set_rng_state(extras["rng"])
    return int(extras["step"])


def export_model(model, out_dir: str | Path) -> Path | None:
    """Gather the full model state on rank 0 (to host memory) and write model.safetensors there
    (SageMaker uploads SM_MODEL_DIR when the job ends). Collective; returns the file on rank 0."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    pipe = getattr(model, "pipe", None)
    if pipe is None:
        sd = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    else:
        # Pipeline parallel: each rank holds its stages only. Every rank gathers its stages'
        # tensors one at a time to host memory (collective over its data-parallel group; torch's
        # cpu_offload would keep them on global rank 0 only), then the first rank of each pipeline
        # collects the other stages' (every pipeline does the same; rank 0 writes).
        sd = {}
        for k, v in get_model_state_dict(model).items():
            sd[k] = (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().cpu()
        first = dist.get_global_rank(pipe.group, 0)
        parts = [None] * dist.get_world_size(pipe.group) if dist.get_rank() == first else None
        dist.gather_object(sd, parts, dst=first, group=pipe.group)
        sd = {k: v for part in parts or () for k, v in part.items()}
        if pipe.tied_group is not None:  # the last stage's copy of a tied embedding: not a weight of its own
            sd.pop("output.weight", None)
    if dist.get_rank() != 0:
        return None
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # safetensors refuses tensors that share storage (tied embeddings): store a copy of each.
    save_file({k: v.contiguous().clone() for k, v in sd.items()}, str(out / "model.safetensors"))
    return out / "model.safetensors"
