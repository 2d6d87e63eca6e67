"""Collectives across the ranks torchrun started: bus bandwidth per message size (nccl-tests
conventions, costs/comm.FACTORS). NCCL on GPUs; gloo between CPU processes (the CI test, tier
"host"). Every rank runs every collective; rank 0 keeps the results."""

from __future__ import annotations

import os
import statistics
import time

import torch
import torch.distributed as dist

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


def _factor(op: str, n: int) -> float:
    return 2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n


def _call(op: str, buf: torch.Tensor, out: torch.Tensor, n: int):
    if op == "all_reduce":
        dist.all_reduce(buf)
    elif op == "all_gather":
        dist.all_gather_into_tensor(out, buf[: buf.numel() // n])
    elif op == "reduce_scatter":
        dist.reduce_scatter_tensor(out[: buf.numel() // n], buf)
    else:
        dist.all_to_all_single(out, buf)


def world() -> tuple[int, int, int]:
    """(rank, world size, nodes) from torchrun's environment; (0, 1, 1) outside torchrun."""
    n = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_WORLD_SIZE", str(n)))
    return int(os.environ.get("RANK", "0")), n, max(1, n // max(local, 1))


def collectives(device: str, sizes: tuple[int, ...], repeats: int, step=None) -> list[dict]:
    """[{op, tier, bytes, ranks, busbw_gbps}] measured over the whole world; [] with one rank."""
    _, n, nodes = world()
    if n <= 1:
        return []
    tier = "host" if device == "cpu" else ("nvlink" if nodes == 1 else "efa")
    if device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    own = not dist.is_initialized()
    if own:  # torchrun's env:// rendezvous (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE)
        dist.init_process_group("gloo" if device == "cpu" else "nccl")
    try:
        return _measure(device, sizes, repeats, n, tier, step)
    finally:
        if own:
            dist.destroy_process_group()


def _measure(device: str, sizes, repeats: int, n: int, tier: str, step) -> list[dict]:
    rows = []
    for op in OPS:
        for size in sizes:
            elems = max(n, size // 4 // n * n)  # fp32, divisible by the group
            buf = torch.ones(elems, device=device)
            out = torch.empty(elems, device=device)
            try:
                _call(op, buf, out, n)
            except (RuntimeError, NotImplementedError, ValueError):
                break  # this backend has no such collective: leave the op out
            times = []
            for _ in range(repeats):
                dist.barrier()
                if device == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                _call(op, buf, out, n)
                if device == "cuda":
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
            t = statistics.median(times)
            nbytes = elems * 4
            rows.append({"op": op, "tier": tier, "bytes": nbytes, "ranks": n,
                         "busbw_gbps": nbytes * _factor(op, n) / t / 1e9, "time_s": t})
            if step:
                step(f"{op} {nbytes} B")
    return rows
