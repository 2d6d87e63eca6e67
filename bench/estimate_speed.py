"""estimate() speed (issues 4 and 25): the search calls it thousands of times. Target (#25): at
least 10,000 estimates per CPU second for Llama 3.1 405B without pipeline parallelism, step time only
as the search's ranking calls it (and, reported beside it, with the memory model), one process.
The first pass over the layouts is timed apart (`cold`): it fills the memo caches (trainplan/memo.py)
that a search fills as it goes; the repeated passes are the rate with them warm. Also records the
same for validate: the whole dev dataset, cross-validated.

    .venv/bin/python bench/estimate_speed.py [--out bench/results/estimate_speed.json]

Not a test: timings depend on the machine and on what else runs (the load average is recorded).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import _stamp

from trainplan.estimate import estimate
from trainplan.hardware import Cluster, find_node
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.models import resolve
from trainplan.profile import default_profile

DEV = Path(__file__).resolve().parents[2] / "shared" / "validation" / "published_dev.json"


def layouts() -> list[Layout]:
    """Distinct layouts of 405B on 16 p6-b200 nodes (128 GPUs), no pp: what the search screens."""
    out = []
    for tp in (1, 2, 4, 8):
        for cp in (1, 2, 4):
            for ac in ("none", "selective", "full"):
                for mb in (1, 2):
                    for prec in ("bf16", "fp8_tensorwise", "mxfp8"):
                        out.append(Layout(precision=prec, ac=ac, micro_batch=mb, tp=tp, cp=cp,
                                          dp_shard=128 // (tp * cp), grad_accum=max(1, 8 // mb)))
    return out


def rate(job, ls, prof, with_memory: bool, seconds: float = 2.0) -> float:
    """Estimates per CPU second, repeating the layouts for `seconds` of CPU."""
    n, t0 = 0, time.process_time()
    while time.process_time() - t0 < seconds:
        for L in ls:
            estimate(job, L, prof, with_memory=with_memory)
        n += len(ls)
    return n / (time.process_time() - t0)


def cold_rate(job, ls, prof) -> float:
    """Estimates per CPU second of the first pass (memo caches empty but for the warm-up's)."""
    t0 = time.process_time()
    for L in ls:
        estimate(job, L, prof, with_memory=False)
    return len(ls) / (time.process_time() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/results/estimate_speed.json")
    args = ap.parse_args()
    job = Job(resolve("llama-3.1-405b"), Cluster(find_node("ml.p6-b200.48xlarge"), 16), Workload(8192, 1024))
    prof = default_profile()
    ls = layouts()
    for L in ls[:10]:  # warm the per-model caches
        estimate(job, L, prof)
    res = {
        "bench": "estimate_speed",
        "model": "llama-3.1-405b", "instance": "ml.p6-b200.48xlarge", "nodes": 16,
        "layouts": len(ls),
        "estimates_per_cpu_s_cold": cold_rate(job, ls[10:], prof),
        "estimates_per_s_step_time_only": rate(job, ls, prof, False),
        "estimates_per_s_with_memory": rate(job, ls, prof, True),
        "target_per_s": 10000,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "loadavg": os.getloadavg()},
    }
    if DEV.is_file():
        from trainplan.validation.dataset import load_dataset
        from trainplan.validation.run import run

        t0 = time.perf_counter()
        _, cases = load_dataset(DEV)
        run(cases, prof)
        res["validate_dev_s"] = time.perf_counter() - t0
        res["validate_records"] = len(cases)
    _stamp.write(args.out, res, __file__)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
