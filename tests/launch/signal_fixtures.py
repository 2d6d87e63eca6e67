"""A stand-in trainer for the signal tests: torchrun runs it as `-m trainplan.runtime` (a shadow
package first on PYTHONPATH). Each rank writes ready-<rank> with its pid, waits for SIGTERM, SIGINT
or SIGUSR1, writes saved-<rank> with the signal's name (where the real trainer saves a checkpoint)
and exits 0."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

STAND_IN = '''
import os, signal, sys, time
from pathlib import Path
out = Path(os.environ["STANDIN_DIR"])
got = []
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
    signal.signal(s, lambda signum, frame: got.append(signum))
(out / ("tmp-" + os.environ["RANK"])).write_text(str(os.getpid()))
os.replace(out / ("tmp-" + os.environ["RANK"]), out / ("ready-" + os.environ["RANK"]))  # whole or absent
while not got:
    time.sleep(0.05)
(out / ("saved-" + os.environ["RANK"])).write_text(signal.Signals(got[0]).name)
sys.exit(0)
'''


def shadow_runtime(root: Path) -> Path:
    """A directory to put first on PYTHONPATH: `python -m trainplan.runtime` runs the stand-in."""
    pkg = root / "shadow" / "trainplan" / "runtime"
    pkg.mkdir(parents=True)
    (pkg.parent / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text(STAND_IN)
    return root / "shadow"


def wait_for(predicate, limit_s: float = 120.0, what: str = "") -> None:
    """Poll until predicate() holds; fail the test (not hang) after limit_s."""
    end = time.monotonic() + limit_s
    while not predicate():
        assert time.monotonic() < end, f"gave up waiting for {what}"
        time.sleep(0.1)


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


def descendants(pid: int) -> set[int]:
    """Every process below `pid` (Linux /proc)."""
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except (FileNotFoundError, ProcessLookupError):
                continue
            out.update(kids)
            todo += kids
    return out


def kill_all(pids) -> None:
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
