"""The stamp every benchmark result carries, and the one writer of bench/results/*.json.

    _stamp.write(path, result, __file__)    # in a benchmark script: the JSON, stamped

The stamp says what was measured and when: the commit (`git rev-parse HEAD`), `dirty` when src/ or
bench/ (outside bench/results) had uncommitted changes at the time, the UTC time, and the script
that wrote the file. tests/bench/test_bench_results.py fails on a result without a stamp, or whose
commit is not an ancestor of HEAD, so a number measured before the code it describes changed
cannot pass for a current one. Where the tree is not a git checkout (a copy on a lent device),
BENCH_COMMIT names the commit it was copied from.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def stamp(script: str) -> dict:
    """{"commit", "dirty", "measured_at", "script"} for a result `script` (a path) writes now."""
    try:
        commit = _git("rev-parse", "HEAD")
        dirty = bool(_git("status", "--porcelain", "--", "src", "bench", ":(exclude)bench/results"))
    except (OSError, subprocess.CalledProcessError):
        commit, dirty = os.environ.get("BENCH_COMMIT", ""), None  # a copy without git: unknown
        if not commit:
            raise SystemExit("bench: not a git checkout; set BENCH_COMMIT to the commit this tree was "
                             "copied from") from None
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"commit": commit, "dirty": dirty, "measured_at": when,
            "script": Path(script).resolve().relative_to(ROOT).as_posix()}


def write(path: str | Path, result: dict, script: str, indent: int = 1) -> Path:
    """Write `result` as JSON at `path` with its stamp first; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"stamp": stamp(script), **result}, indent=indent) + "\n")
    return path


def machine() -> dict:
    """The machine a timing ran on, as the speed benchmarks record it beside their numbers."""
    return {"cpus": os.cpu_count(), "load_average_1m": os.getloadavg()[0],
            "python": platform.python_version(), "platform": platform.platform()}
