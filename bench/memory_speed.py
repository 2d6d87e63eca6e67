"""Time of one memory_breakdown call for layouts of Llama 3.1 405B (pp 1-32, interleaved, partial
checkpointing, ZeRO-1 and FSDP), warm caches as the search sees them, and the first (cold) call.

    .venv/bin/python bench/memory_speed.py [--write]

Target (issue 2 follow-up): < 30 us per warm call for any layout. Not a test: wall-clock numbers
depend on the machine; --write stores them in bench/results/memory_speed.json as data.
"""

from __future__ import annotations

import json
import platform
import sys
import time
from pathlib import Path

import _stamp

from trainplan.costs import memory
from trainplan.costs.memory import memory_breakdown
from trainplan.costs.states import stage_params
from trainplan.hardware import Cluster, find_node
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.models import resolve
from trainplan.models.layers import ffn_kinds
from trainplan.models.stages import max_stage_layers, stage_layers

REPEAT = 200
BLOCKS = 15


def _block(job, L) -> float:
    t = time.perf_counter()
    for _ in range(REPEAT):
        memory_breakdown(job, L)
    return (time.perf_counter() - t) / REPEAT


def layouts():
    """(name, pp, Layout) over the pipeline depths and policies the search visits."""
    for pp, vp in ((1, 1), (2, 1), (4, 1), (8, 1), (9, 7), (16, 1), (18, 7), (21, 3), (32, 1), (63, 2)):
        sched = "interleaved" if vp > 1 else "1f1b"
        for ac, sharding in (("selective", "zero1"), ("partial", "zero1"), ("full", "fsdp")):
            per_stage = max_stage_layers(126, pp)
            yield (f"pp{pp}/v{vp} {ac} {sharding}", pp,
                   Layout(tp=8, pp=pp, vp=vp, pp_schedule=sched, dp_shard=2, sharding=sharding, ac=ac,
                          ac_layers=max(1, per_stage // 2) if ac == "partial" else 0, grad_accum=64,
                          precision="fp8_tensorwise"))


def clear():
    caches = (getattr(memory, n, None) for n in ("_stage_activations", "_candidate_stages", "_layer", "_context"))
    for f in (*caches, stage_params, ffn_kinds, stage_layers):
        if hasattr(f, "cache_clear"):  # also runs against older trees (before/after comparisons)
            f.cache_clear()


def main(argv) -> int:
    m = resolve("llama-3.1-405b")
    rows = []
    for name, pp, L in layouts():
        job = Job(m, Cluster(find_node("ml.p5.48xlarge"), 2 * pp), Workload(seq_len=8192, global_batch=128))
        clear()
        t = time.perf_counter()
        memory_breakdown(job, L)
        cold = time.perf_counter() - t
        warm = min(_block(job, L) for _ in range(BLOCKS))  # the least-disturbed block, as timeit advises
        rows.append({"layout": name, "cold_us": round(cold * 1e6, 1), "warm_us": round(warm * 1e6, 2)})
        print(f"{name:28} cold {cold * 1e6:8.1f} us  warm {warm * 1e6:6.2f} us")
    worst = max(r["warm_us"] for r in rows)
    summary = {"max_warm_us": worst, "target_us": 30, "meets_target": worst < 30,
               "python": platform.python_version(), "machine": platform.processor() or platform.machine()}
    print(json.dumps(summary))
    if "--write" in argv:
        _stamp.write(Path(__file__).resolve().parent / "results" / "memory_speed.json",
                     {"benchmark": "memory_speed", "model": "llama-3.1-405b", "rows": rows, "summary": summary},
                     __file__)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
