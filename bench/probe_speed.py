"""`trainplan probe` wall time (issue 12). Targets are for one GPU: --quick <= 3 min, full <= 15 min
(bench/probe_device.sh measures them on a lent device). Here: the CPU path of the same code
(`--device cpu --quick`, what CI runs), one process and two gloo ranks under torchrun.

    .venv/bin/python bench/probe_speed.py [--out bench/results/probe_speed.json]

Not a test: timings depend on the machine and on what else runs (the load average is recorded).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _stamp

SRC = Path(__file__).resolve().parents[1] / "src"


def timed(argv: list[str]) -> float:
    env = os.environ | {"PYTHONPATH": str(SRC)}
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, env=env, capture_output=True)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench/results/probe_speed.json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        probe = ["-m", "trainplan", "probe", "--device", "cpu", "--quick", "--gpu", "h100-sxm-80gb"]
        one = timed([sys.executable, *probe, "--out", f"{d}/one.json"])
        two = timed([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", *probe,
                     "--out", f"{d}/two.json"])
    result = {"schema": "trainplan-bench/1", "bench": "probe_speed", "machine": platform.node(),
              "load_avg": os.getloadavg(),
              "cpu_quick_one_process_s": round(one, 1), "cpu_quick_two_gloo_ranks_s": round(two, 1),
              "note": "process start and torch import included; GPU targets (quick <= 180 s, full <= 900 s) "
                      "are measured by bench/probe_device.sh on a lent GPU"}
    _stamp.write(args.out, result, __file__, indent=2)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
