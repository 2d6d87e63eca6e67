"""Which checkpoint directories exist, which are kept, which are pinned. Torch-free, one process:
the collective callers (checkpoint.py) run these on the first local rank of each node.

    <root>/step-00000030/           finished (has manifest.json)
    <root>/step-00000040.partial/   being written; never read; removed by the next save
    <root>/step-00000020.deleting/  being pruned (renamed first, so a kill mid-delete leaves nothing
                                    that looks like a checkpoint)
    <root>/step-00000050.bad/       found unusable at a restart and moved aside, kept for a person
    <root>/pinned.json              {"step": 30, "reason": ...}: never pruned

Keep-last-N counts the checkpoint being written: before a save the oldest are pruned down to N-1
(never the newest, never a pinned one), so a save needs room for N checkpoints, not N+1.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

_FINAL = re.compile(r"^step-(\d{8})$")
PIN = "pinned.json"


def step_dir(root: Path, step: int) -> Path:
    return root / f"step-{step:08d}"


def finished(root: str | Path | None) -> list[tuple[int, Path]]:
    """(step, directory) of the published checkpoints, newest first; usable or not."""
    if not root or not Path(root).is_dir():
        return []
    found = [(int(m.group(1)), p) for p in Path(root).iterdir() if (m := _FINAL.match(p.name)) and p.is_dir()]
    return sorted(found, reverse=True)


def pinned(root: Path) -> int | None:
    try:
        return int(json.loads((root / PIN).read_text())["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def pin(root: Path, step: int, reason: str) -> None:
    """Protect the checkpoint of `step` from pruning, once per directory: the first pin stays."""
    if pinned(root) is not None:
        return
    tmp = root / (PIN + ".tmp")
    tmp.write_text(json.dumps({"step": step, "reason": reason}) + "\n")
    os.replace(tmp, root / PIN)


def remove_stale(root: Path) -> None:
    """Unfinished saves and interrupted prunes left by a killed run."""
    for p in root.iterdir():
        if p.is_dir() and p.name.startswith("step-") and p.name.endswith((".partial", ".deleting")):
            shutil.rmtree(p, ignore_errors=True)


def prune(root: Path, keep: int) -> None:
    """Keep the newest `keep` (at least one) finished checkpoints and the pinned one."""
    protected = pinned(root)
    kept = 0
    for step, p in finished(root):
        if step == protected:
            continue
        kept += 1
        if kept > max(keep, 1):
            gone = p.with_name(p.name + ".deleting")
            os.replace(p, gone)
            shutil.rmtree(gone, ignore_errors=True)


def move_aside(path: Path) -> Path | None:
    """Rename an unusable checkpoint out of the way (`.bad`, `.bad-2`, ...); None if not here."""
    if not path.is_dir():
        return None
    target, n = path.with_name(path.name + ".bad"), 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.bad-{n}")
    os.replace(path, target)
    return target


def fsync_dir(path: Path) -> None:
    """Make a rename inside `path` durable (POSIX: the directory entry lives in the directory)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
