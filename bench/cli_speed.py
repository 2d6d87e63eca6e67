"""CLI start-up cost (issue 25): the CPU time (user + sys) of `trainplan --help`, `trainplan models`
and two commands' own --help, each in a fresh process as a person runs it. Target: --help and
models at most 0.1 s each on a 2-core machine.

    .venv/bin/python bench/cli_speed.py [--out bench/results/cli_speed.json] [--repeat 9] [--src DIR]

Each command runs once to compile its modules (into a private PYTHONPYCACHEPREFIX: an installed
package has its bytecode), then `--repeat` times, the commands taking turns so that a burst of load
from elsewhere spreads over all of them; the minimum (what the command costs when nothing else
competes: other work only adds) is held against the target, the median beside it. The same is
measured with bytecode off (PYTHONDONTWRITEBYTECODE=1: every module compiled on every run, as in a
checkout whose environment sets it), for reference, not against the target. --src times another
checkout's src/ (the "before" of a change). Not a test: timings depend on the machine and on what
else runs (the load average is recorded).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import _stamp

# name -> the arguments of `python`: trainplan's commands, and the interpreter alone for scale (what
# a start-up costs on this machine under its load at the time, none of it trainplan's)
COMMANDS = {"--help": ["-m", "trainplan", "--help"], "models": ["-m", "trainplan", "models"],
            "estimate --help": ["-m", "trainplan", "estimate", "--help"],
            "plan --help": ["-m", "trainplan", "plan", "--help"], "(python -c pass)": ["-c", "pass"]}
TARGETS_S = {"--help": 0.1, "models": 0.1}  # issue 25: `trainplan --help` and `trainplan models`


def cpu_s(argv: list[str], env: dict) -> float:
    """User + sys CPU seconds of one `python ARGV` run (its process and its children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, *argv], env=env, check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(modes: dict[str, dict], repeat: int) -> dict:
    """{(command, mode): sorted CPU seconds}: a warm-up run each (the bytecode written, the files in
    the page cache), then `repeat` rounds in which every command runs once in every mode."""
    jobs = [(name, mode) for name in COMMANDS for mode in modes]
    for name, mode in jobs:
        cpu_s(COMMANDS[name], modes[mode])
    runs: dict = {job: [] for job in jobs}
    for _ in range(repeat):
        for name, mode in jobs:
            runs[name, mode].append(cpu_s(COMMANDS[name], modes[mode]))
    return {job: sorted(r) for job, r in runs.items()}


def summary(runs: list[float]) -> dict:
    return {"min_cpu_s": runs[0], "median_cpu_s": statistics.median(runs), "runs_cpu_s": runs}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench/results/cli_speed.json")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--src", default=str(_stamp.ROOT / "src"), help="the src/ directory to time")
    args = ap.parse_args(argv)
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    base["PYTHONPATH"] = str(Path(args.src).resolve())
    rows = []
    with tempfile.TemporaryDirectory(prefix="cli-speed-pyc-") as cache:
        modes = {"bytecode": {**base, "PYTHONPYCACHEPREFIX": cache},
                 "no_bytecode": {**base, "PYTHONDONTWRITEBYTECODE": "1"}}
        runs = measure(modes, args.repeat)
    for name in COMMANDS:
        row = {"command": name if name.startswith("(") else f"trainplan {name}", "target_s": TARGETS_S.get(name),
               **{mode: summary(runs[name, mode]) for mode in modes}}
        target = TARGETS_S.get(name)
        row["meets_target"] = None if target is None else row["bytecode"]["min_cpu_s"] <= target
        rows.append(row)
        b, n = row["bytecode"], row["no_bytecode"]
        print(f"{row['command']:<26}{b['min_cpu_s']:>6.3f} s cpu min ({b['median_cpu_s']:.3f} median) with bytecode, "
              f"{n['min_cpu_s']:>6.3f} ({n['median_cpu_s']:.3f}) without", file=sys.stderr)
    result = {
        "benchmark": "cli_speed",
        "src": os.path.relpath(Path(args.src).resolve(), _stamp.ROOT),
        "repeat": args.repeat,
        "machine": _stamp.machine(),
        "runs": rows,
    }
    _stamp.write(args.out, result, __file__, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
