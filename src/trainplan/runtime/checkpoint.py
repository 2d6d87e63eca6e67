"""Distributed checkpoints (torch.distributed.checkpoint) that are complete or invisible.

Layout of a checkpoint directory:

    <dir>/step-00000030/            a finished checkpoint (DCP files + one extras file per rank)
    <dir>/step-00000040.partial/    being written; never read

Every rank writes its shards of the model and optimizer with DCP into the `.partial` directory,
plus `extras-rank<R>.pt` (scheduler, step, its RNG states, grad scaler); after a barrier the
directory is renamed to its final name. A rename inside one directory is atomic on POSIX file
systems, so a reader sees the whole checkpoint or none of it (a kill mid-write leaves only a
`.partial` directory, which `latest` ignores and the next save of that step replaces).

The directory may be shared by all nodes (a cluster file system) or local to each node (SageMaker's
/opt/ml/checkpoints, which SageMaker syncs to one S3 prefix and restores to every node): the
first local rank of each node prepares and renames, one node after the other, so a shared
directory is renamed once and local ones each once.
"""

from __future__ import annotations

import os
import random
import re
import shutil
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

_FINAL = re.compile(r"^step-(\d{8})$")


def step_dir(root: Path, step: int) -> Path:
    return root / f"step-{step:08d}"


def latest(root: str | Path | None) -> Path | None:
    """The newest complete checkpoint under `root`, or None."""
    if not root or not Path(root).is_dir():
        return None
    done = [(int(m.group(1)), p) for p in Path(root).iterdir() if (m := _FINAL.match(p.name)) and p.is_dir()]
    return max(done)[1] if done else None


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


def _app_state(model, optimizer) -> dict:
    from torch.distributed.checkpoint.state_dict import get_state_dict

    from trainplan.runtime.parallel import checkpointed

    model_sd, optim_sd = get_state_dict(model, checkpointed(optimizer), options=_options())
    return {"model": model_sd, "optim": optim_sd}


def save(root: str | Path, step: int, model, optimizer, scheduler, scaler=None, keep: int = 2) -> Path:
    """Collective: every rank calls it. Returns the final directory."""
    import torch.distributed.checkpoint as dcp

    root = Path(root)
    final = step_dir(root, step)
    tmp = final.with_name(final.name + ".partial")
    rank = dist.get_rank()

    def prepare():
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(exist_ok=True)

    def publish():
        if not tmp.is_dir():  # a shared directory another node already renamed
            return
        if final.exists():  # a re-save of the same step (resumed run): replace it whole
            shutil.rmtree(final)
        os.replace(tmp, final)
        _prune(root, keep)

    _node_by_node(prepare)
    dcp.save(_app_state(model, optimizer), checkpoint_id=str(tmp))
    extras = {"step": step, "scheduler": scheduler.state_dict(), "rng": _rng_state(),
              "scaler": scaler.state_dict() if scaler is not None else None}
    torch.save(extras, tmp / f"extras-rank{rank}.pt")
    dist.barrier()
    _node_by_node(publish)
    return final


def _node_by_node(fn) -> None:
    """Run fn on the first local rank of each node, one node at a time (torchrun's GROUP_RANK is
    the node index), with barriers between: collective."""
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", dist.get_world_size()))
    nodes = max(1, dist.get_world_size() // local_world)
    me = (int(os.environ.get("GROUP_RANK", "0")) if int(os.environ.get("LOCAL_RANK", "0")) == 0 else None)
    for node in range(nodes):
        if me == node:
            fn()
        dist.barrier()


def _prune(root: Path, keep: int) -> None:
    done = sorted((int(m.group(1)), p) for p in root.iterdir() if (m := _FINAL.match(p.name)))
    for _, p in done[:-keep] if keep > 0 else []:
        shutil.rmtree(p, ignore_errors=True)


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
