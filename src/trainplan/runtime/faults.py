"""Fault injection for the fault-tolerance tests: `TRAINPLAN_FAULT`, read here and nowhere else.

Unset (every real run), each query below answers False after one dictionary lookup. Set, it holds
a comma-separated list of `KIND[@WHEN][:RANK]`; WHEN is a step number as measurements.jsonl counts
them (1-based), a range `5-7`, or an open range `5-`; RANK limits the fault to one global rank.

    nan@5       the loss of step 5 is multiplied by NaN before backward (so are its gradients);
                not under pipeline parallelism, whose schedule computes the loss itself
    kill@5      the rank SIGKILLs itself at the start of step 5 (a crash: nothing is saved)
    term@5 int@5 usr1@5   the rank sends itself SIGTERM / SIGINT / SIGUSR1 at the start of step 5
    enospc@4    the save of step 4 fails with OSError(ENOSPC) after its shards are written
    fill@4      before the save of step 4, a ballast file fills the checkpoint file system (refused
                on a file system larger than 1 GiB, so a stray switch cannot fill a real disk)
    killsave@4  SIGKILL during the save of step 4, after the shards, before the manifest
    readonly    the start-up check finds the checkpoint directory read-only (EROFS); for machines
                where the tests run as root and chmod cannot make a directory read-only
"""

from __future__ import annotations

import errno
import os
import re
import signal
from dataclasses import dataclass
from pathlib import Path

from trainplan.errors import TrainplanError

ENV = "TRAINPLAN_FAULT"
KINDS = ("nan", "kill", "term", "int", "usr1", "enospc", "fill", "killsave", "readonly")
_SIGNALS = {"term": signal.SIGTERM, "int": signal.SIGINT, "usr1": signal.SIGUSR1}
_FILL_LIMIT_BYTES = 1 << 30
_ITEM = re.compile(r"^(?P<kind>[a-z0-9]+)(?:@(?P<first>\d+)(?P<range>-(?P<last>\d+)?)?)?(?::(?P<rank>\d+))?$")


@dataclass(frozen=True)
class Fault:
    kind: str
    first: int | None  # None: every step
    last: int | None  # None: no end
    rank: int | None  # None: every rank

    def covers(self, step: int | None, rank: int) -> bool:
        if self.rank is not None and self.rank != rank:
            return False
        if step is None or self.first is None:
            return True
        return self.first <= step and (self.last is None or step <= self.last)


def parse(text: str) -> tuple[Fault, ...]:
    faults = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        m = _ITEM.match(item)
        if not m or m["kind"] not in KINDS:
            raise TrainplanError(f"{ENV}: cannot read {item!r}; expected KIND[@STEP[-STEP]][:RANK] with KIND one "
                                 f"of {', '.join(KINDS)} (e.g. nan@5, kill@3:1); unset {ENV} for a normal run")
        first = int(m["first"]) if m["first"] else None
        last = first if not m["range"] else (int(m["last"]) if m["last"] else None)
        faults.append(Fault(m["kind"], first, last, int(m["rank"]) if m["rank"] else None))
    return tuple(faults)


_cache: dict[str, tuple[Fault, ...]] = {}


def active(kind: str, step: int | None = None) -> bool:
    """Whether a `kind` fault applies to this rank at `step` (None: at any step)."""
    text = os.environ.get(ENV, "")
    if not text:
        return False
    if text not in _cache:
        _cache[text] = parse(text)
    rank = int(os.environ.get("RANK", "0"))
    return any(f.kind == kind and f.covers(step, rank) for f in _cache[text])


def at_step_start(step: int) -> None:
    """The step-boundary faults: a crash, or a signal the rank sends itself."""
    if active("kill", step):
        os.kill(os.getpid(), signal.SIGKILL)
    for kind, sig in _SIGNALS.items():
        if active(kind, step):
            os.kill(os.getpid(), sig)


def before_save(step: int, root: Path) -> None:
    if active("fill", step):
        _fill(root)


def after_shards(step: int) -> None:
    """Between the shard files and the manifest of the save of `step`."""
    if active("killsave", step):
        os.kill(os.getpid(), signal.SIGKILL)
    if active("enospc", step):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC) + f" ({ENV})")


def readonly_error(path: Path) -> OSError | None:
    return OSError(errno.EROFS, os.strerror(errno.EROFS) + f" ({ENV})", str(path)) if active("readonly") else None


def _fill(root: Path) -> None:
    total = os.statvfs(root).f_blocks * os.statvfs(root).f_frsize
    if total > _FILL_LIMIT_BYTES:
        raise TrainplanError(f"{ENV}=fill refuses to fill {root}: its file system holds {total} bytes (> 1 GiB); "
                             "use it on a small tmpfs only")
    try:
        with open(root / ".fault-ballast", "ab") as f:
            while True:
                f.write(b"\0" * (1 << 16))
                f.flush()
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
