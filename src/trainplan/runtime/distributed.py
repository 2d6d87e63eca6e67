"""Process group, device and the small collectives the trainer needs."""

from __future__ import annotations

import os
import socket
from contextlib import closing

import torch
import torch.distributed as dist

from trainplan.errors import TrainplanError


class RunStopped(TrainplanError):
    """A reason to end the run that every rank agreed on (a full disk, non-finite losses, no
    usable checkpoint): every rank raises it, rank 0 prints it."""


def free_port() -> int:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init(kind: str | None = None, timeout_s: float = 600) -> torch.device:
    """Join the process group torchrun set up (or make a one-process group when run directly).
    NCCL on CUDA, gloo on CPU. `kind`: "cuda", "cpu", or None for whichever there is
    (preflight.choose_device decides it)."""
    from datetime import timedelta

    if "RANK" not in os.environ:
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(free_port()))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if (kind or ("cuda" if torch.cuda.is_available() else "cpu")) == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s),
                                device_id=device if device.type == "cuda" else None)
    return device


def shutdown() -> None:
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def reduce_step(loss_sum: float, signals: tuple[bool, ...], device: torch.device) -> tuple[float, tuple[bool, ...]]:
    """One all-reduce per step for two facts: the mean loss over ranks, and which stop signals
    any rank received (a signal reaches ranks at different moments, or one rank only; all must
    stop after the same step). A non-finite loss on any rank makes the mean non-finite."""
    t = torch.tensor([loss_sum, *(1.0 if s else 0.0 for s in signals)], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return (t[0] / dist.get_world_size()).item(), tuple(bool(v > 0) for v in t[1:].tolist())


def agree(message: str | None) -> str | None:
    """Collective: the first rank's message, on every rank (None when no rank has one). For
    failures one rank sees (its disk, its file) that all ranks must act on together."""
    if dist.get_world_size() == 1:
        return message
    every: list = [None] * dist.get_world_size()
    dist.all_gather_object(every, message)
    return next((m for m in every if m), None)


def clip_grad_norm(params, max_norm: float, pp_group=None, norm_skip=None) -> float:
    """Global gradient-norm clipping over DTensor and plain parameters. Parameters may live on
    different meshes (tp blocks on (dp, tp), embeddings on dp), which torch's clip_grad_norm_
    cannot stack; so the squared norm is summed per mesh, made full, then combined. With
    pipeline parallelism each rank holds only its stages: the squares are summed over `pp_group`;
    `norm_skip` (the last stage's copy of a tied embedding) is clipped but counted once, on the first stage."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.experimental import implicit_replication

    params = list(params)
    by_mesh: dict = {}
    for p in params:
        if p.grad is not None:
            key = p.grad.device_mesh if isinstance(p.grad, DTensor) else None
            by_mesh.setdefault(key, []).append(p)
    total_sq = None
    for ps in by_mesh.values():
        counted = [p.grad for p in ps if p is not norm_skip]
        if not counted:
            continue
        sq = torch.nn.utils.get_total_norm(counted, 2.0, foreach=True) ** 2
        if isinstance(sq, DTensor):
            sq = sq.full_tensor()
        total_sq = sq if total_sq is None else total_sq + sq
    if pp_group is not None:
        if total_sq is None:
            total_sq = torch.zeros((), device=params[0].device if params else "cpu")
        total_sq = total_sq.float()
        dist.all_reduce(total_sq, group=pp_group)
    if total_sq is None:
        return 0.0
    norm = total_sq.sqrt()
    with implicit_replication():
        for ps in by_mesh.values():
            torch.nn.utils.clip_grads_with_norm_(ps, max_norm, norm, foreach=True)
    return float(norm)
