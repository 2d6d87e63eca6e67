"""Parsing at the edges: dicts from files or flags become frozen typed objects, or a one-line error."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from trainplan.errors import TrainplanError


def check_keys(data: dict, allowed: set[str], where: str, required: set[str] = frozenset()) -> None:
    """Reject unknown keys (naming the key and the allowed ones) and missing required keys."""
    extra = sorted(set(data) - allowed)
    if extra:
        raise TrainplanError(
            f"{where}: unknown key {extra[0]!r}; allowed keys: {', '.join(sorted(allowed))}"
        )
    missing = sorted(required - set(data))
    if missing:
        raise TrainplanError(f"{where}: missing required key {missing[0]!r}")


def read_json(path: str | Path, what: str) -> Any:
    p = Path(path)
    if not p.is_file():
        raise TrainplanError(f"{what} {str(p)!r} does not exist or is not a file")
    try:
        return json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise TrainplanError(
            f"{what} {str(p)!r} is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})"
        ) from None
    except UnicodeDecodeError:
        raise TrainplanError(f"{what} {str(p)!r} is not UTF-8 text") from None


def read_toml(path: Path) -> dict:
    with open(path, "rb") as f:
        return tomllib.load(f)
