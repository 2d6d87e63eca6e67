"""Run every CPU benchmark the same way each time; each writes its JSON under bench/results/.

    make bench                      # all of them (several minutes on 2 cores)
    python bench/run_all.py search_speed estimate_speed   # a few

bench/gpu_check.py runs here too; on a machine without CUDA it takes its tiny CPU path, and on a
GPU it writes bench/results/gpu_check.json (predicted vs measured memory, step time, MFU).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
BENCHES = ("search_speed", "estimate_speed", "memory_speed", "memory_vs_published", "moe_out_of_sample",
           "hand_tuning", "trace_speed", "trainer_overhead", "probe_speed", "gpu_check")


def main(names: list[str]) -> int:
    unknown = sorted(set(names) - set(BENCHES))
    if unknown:
        print(f"unknown benchmark {unknown[0]!r}; known: {', '.join(BENCHES)}", file=sys.stderr)
        return 2
    failed = []
    for name in names or BENCHES:
        t = time.perf_counter()
        r = subprocess.run([sys.executable, str(HERE / f"{name}.py")], check=False)
        print(f"== {name}: exit {r.returncode} in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        if r.returncode:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
