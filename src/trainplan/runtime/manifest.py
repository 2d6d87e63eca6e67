"""Checksums of a checkpoint directory: `manifest.json`, written last, checked before a load.

    {"schema": "trainplan-checkpoint/1", "step": 40, "world_size": 8,
     "files": {"__0_0.distcp": {"bytes": 123, "sha256": "..."}, ".metadata": {...}, ...}}

Each rank hashes the files it wrote (its DCP shard files and its extras file; rank 0 also DCP's
`.metadata`), the digests are gathered, and the manifest is written through a temporary file and
a rename, so a checkpoint directory without a readable manifest is one whose save did not finish
(killed, half-synced from S3, emptied). Torch-free: the tests and the CLI read manifests too.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

NAME = "manifest.json"
SCHEMA = "trainplan-checkpoint/1"
_CHUNK = 1 << 22


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_CHUNK):
            h.update(block)
    return h.hexdigest()


def own_files(directory: Path, rank: int) -> list[str]:
    """The files `rank` wrote into a checkpoint directory: DCP names its data files
    `__<rank>_<n>.distcp` (FileSystemWriter); the coordinator (rank 0) writes `.metadata`."""
    names = []
    for p in directory.iterdir():
        if p.name.startswith(f"__{rank}_") or p.name == f"extras-rank{rank}.pt" or (rank == 0 and p.name == ".metadata"):
            names.append(p.name)
    return sorted(names)


def describe(directory: Path, names: list[str]) -> dict[str, dict]:
    return {n: {"bytes": (directory / n).stat().st_size, "sha256": sha256(directory / n)} for n in names}


def write(directory: Path, step: int, world_size: int, files: dict[str, dict]) -> None:
    tmp = directory / (NAME + ".tmp")
    body = {"schema": SCHEMA, "step": step, "world_size": world_size, "files": dict(sorted(files.items()))}
    with open(tmp, "w") as f:
        f.write(json.dumps(body, indent=1) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, directory / NAME)


def read(directory: Path) -> tuple[dict | None, str]:
    """(the manifest, "") or (None, why it cannot be used)."""
    path = directory / NAME
    if not path.is_file():
        listed = [p.name for p in directory.iterdir()] if directory.is_dir() else []
        return None, "empty directory" if not listed else f"no {NAME} (its save did not finish)"
    try:
        body = json.loads(path.read_text())
        files = body["files"]
        if body.get("schema") != SCHEMA or not isinstance(files, dict) or not files:
            raise ValueError("unexpected content")
    except (OSError, ValueError, KeyError, TypeError) as e:
        return None, f"unreadable {NAME} ({e})"
    return body, ""


def check(directory: Path, files: dict[str, dict], names: list[str], digests: bool) -> str:
    """The first problem among `names` (present, size, and with `digests` the sha256), or ""."""
    for n in names:
        want = files[n]
        p = directory / n
        if not p.is_file():
            return f"{n} is missing"
        size = p.stat().st_size
        if size != want["bytes"]:
            return f"{n} has {size} bytes, its manifest says {want['bytes']} (truncated or overwritten)"
        if digests and sha256(p) != want["sha256"]:
            return f"{n} does not match its sha256 in {NAME} (corrupted)"
    return ""
