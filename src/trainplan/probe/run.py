"""Run the microbenchmarks of probe/grids.py and assemble a machine profile (trainplan-machine/1)
with its provenance: the machine, the date and the software the numbers were measured with."""

from __future__ import annotations

import datetime
import platform
import socket

import torch

from trainplan.errors import TrainplanError
from trainplan.machine.profile import SCHEMA, machine_from_dict
from trainplan.probe import kernels, network
from trainplan.probe.grids import grid


def detect_gpu(device: str) -> str:
    """The hardware catalog key of this machine's GPU ('cpu' for a CPU probe)."""
    if device == "cpu":
        return "cpu"
    from trainplan.hardware import find_gpu

    name = torch.cuda.get_device_name(0)
    words = name.lower().replace("nvidia", "").split()
    for cand in ("-".join(words), words[0] if words else ""):
        try:
            return find_gpu(cand).name
        except TrainplanError:
            continue
    raise TrainplanError(f"GPU {name!r} is not in the hardware catalog; name it with --gpu")


def provenance(device: str, gpu: str, label: str | None) -> dict:
    sw = {"torch": torch.__version__, "python": platform.python_version()}
    if device == "cuda":
        sw |= {"cuda": torch.version.cuda, "cudnn": str(torch.backends.cudnn.version()),
               "nccl": ".".join(map(str, torch.cuda.nccl.version())),
               "device_name": torch.cuda.get_device_name(0)}
    machine = f"{socket.gethostname()} ({device}: {sw.get('device_name', platform.processor() or 'cpu')})"
    note = f"measured on {device}, labelled {gpu!r} by --gpu" if label else None
    out = {"kind": "probe", "source": "trainplan probe", "machine": machine,
           "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%MZ"), "software": sw}
    return out | ({"note": note} if note else {})


def measure(device: str, quick: bool, gpu: str | None = None, instance: str | None = None, step=None) -> dict:
    """The profile as a dict (rank 0's; other ranks return {} after the collectives)."""
    if device == "cuda" and not torch.cuda.is_available():
        raise TrainplanError("--device cuda: torch sees no CUDA device; use --device cpu")
    g = grid(device, quick)
    rank, _, nodes = network.world()
    tables = []
    if rank == 0:
        tables = _kernel_tables(device, g, step)
    rows = network.collectives(device, g.message_bytes, g.repeats, step)
    if rank != 0:
        return {}
    src = "trainplan probe (this machine)"
    for (op, tier) in sorted({(r["op"], r["tier"]) for r in rows}):
        t = {"kind": "collective", "op": op, "tier": tier, "axes": ["bytes", "ranks"],
             "points": [[r["bytes"], r["ranks"], r["busbw_gbps"]] for r in rows if (r["op"], r["tier"]) == (op, tier)],
             "latency_us": min(r["time_s"] for r in rows if (r["op"], r["tier"]) == (op, tier)) * 1e6,
             "source": f"{src}: {nodes} node(s), torch.distributed busbw (nccl-tests factors)"}
        if tier == "efa":
            t["instances"] = [instance or "unnamed"]
        tables.append(t)
    label = gpu
    d = {"schema": SCHEMA, "name": f"probe-{label or detect_gpu(device)}", "gpu": label or detect_gpu(device),
         "provenance": provenance(device, label or detect_gpu(device), label), "tables": tables}
    machine_from_dict(d, "probe result")  # what we write must load
    return d


def _kernel_tables(device: str, g, step) -> list[dict]:
    src = "trainplan probe (this machine)"
    out = []
    for dt in g.dtypes:
        pts = []
        for m, n, k in g.gemm_mnk:
            r = kernels.gemm_tflops(m, n, k, dt, device, g.repeats)
            if r is not None:
                pts.append([m, n, k, r])
            if step:
                step(f"gemm {dt} {m}x{n}x{k}")
        if pts:
            out.append({"kind": "gemm", "dtype": dt, "axes": ["m", "n", "k"], "points": pts,
                        "source": f"{src}: torch.matmul / torch._scaled_mm"})
    grouped = {p: [] for p in ("fwd", "dgrad", "wgrad")}
    for e, t, n, k in g.grouped:
        for p, r in kernels.grouped_gemm_tflops(e, t, n, k, device, g.repeats).items():
            grouped[p].append([e, t, n, k, r])
        if step:
            step(f"grouped gemm {e}x{t}")
    out += [{"kind": "grouped_gemm", "dtype": "bf16", "pass": p, "axes": ["experts", "tokens_per_expert", "n", "k"],
             "points": pts, "source": f"{src}: torch.bmm over equal-sized experts"} for p, pts in grouped.items()]
    att = {"fwd": [], "bwd": []}
    for s, h, kv, d in g.attention:
        for p, r in kernels.attention_tflops(s, h, kv, d, device, g.repeats).items():
            att[p].append([s, h, kv, d, r])
        if step:
            step(f"attention s={s} h={h}")
    out += [{"kind": "attention", "pass": p, "causal": True, "kernel": "sdpa",
             "axes": ["seq", "heads", "kv_heads", "head_dim"], "points": pts,
             "source": f"{src}: torch scaled_dot_product_attention, causal, batch 1"} for p, pts in att.items()]
    ew: dict[str, list] = {}
    for elems in g.elementwise_elems:
        for name, gbps in kernels.elementwise_gbps(elems, device, g.repeats).items():
            ew.setdefault(name, []).append([elems * 2, gbps])
        if step:
            step(f"element-wise {elems}")
    out += [{"kind": "elementwise", "kernel": k, "axes": ["bytes"], "points": pts,
             "source": f"{src}: eager torch kernels, bytes = inputs read + outputs written"} for k, pts in ew.items()]
    return out


def steps(device: str, quick: bool) -> int:
    """How many progress steps `measure` takes on rank 0 (for the bar's total)."""
    g = grid(device, quick)
    _, n, _ = network.world()
    nets = len(network.OPS) * len(g.message_bytes) if n > 1 else 0
    return len(g.dtypes) * len(g.gemm_mnk) + len(g.grouped) + len(g.attention) + len(g.elementwise_elems) + nets
