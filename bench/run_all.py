"""Run every benchmark the same way each time; each writes its stamped JSON under bench/results/.

    make bench                      # all of them (tens of minutes on 2 cores)
    python bench/run_all.py search_speed estimate_speed   # a few

Results cannot go stale unnoticed. Every benchmark writes through bench/_stamp.py, which stamps the
file with the commit it was measured at (`dirty` if src/ or bench/ had uncommitted changes), the
UTC time and the script. tests/bench/test_bench_results.py fails when a result has no stamp, when
its commit is not an ancestor of HEAD, when a benchmark listed here has no result, or when a
result names a script not listed here. After a change that moves a number, `make bench` and commit
the results with the change.

The rule for bench/results/: a file at its top level is written by a script listed in BENCHES and
names it in its stamp. bench/gpu_check.py runs here too: on a machine without CUDA it takes its
tiny CPU path (gpu_check_cpu.json), on a GPU it writes gpu_check.json (predicted vs measured
memory, step time, MFU). Anything no listed script writes (a result kept for history, such as a
"before" measurement, a device's probe output from bench/probe_device.sh, a table assembled by
hand) lives in bench/results/archive/, which the test does not read and `make bench` does not
touch.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
# benchmark -> its arguments (the ones that print unless asked to write take --write)
BENCHES = {
    "search_speed": [], "estimate_speed": [], "memory_speed": ["--write"], "memory_vs_published": ["--write"],
    "moe_out_of_sample": ["--write"], "hand_tuning": [], "trace_speed": [], "trainer_overhead": [],
    "probe_speed": [], "moe_ep_overhead": [], "gpu_check": [], "cli_speed": [], "closed_loop": ["--write"],
}


def main(names: list[str]) -> int:
    unknown = sorted(set(names) - set(BENCHES))
    if unknown:
        print(f"unknown benchmark {unknown[0]!r}; known: {', '.join(BENCHES)}", file=sys.stderr)
        return 2
    failed = []
    for name in names or BENCHES:
        t = time.perf_counter()
        r = subprocess.run([sys.executable, str(HERE / f"{name}.py"), *BENCHES[name]], check=False)
        print(f"== {name}: exit {r.returncode} in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        if r.returncode:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
