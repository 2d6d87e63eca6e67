"""Arguments and output shared by several commands."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def positive_int(text: str) -> int:
    """argparse type: a positive integer, with a message that says so."""
    import argparse

    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {v}")
    return v


def tokens(text: str) -> int:
    """argparse type: a token count such as 1000000, 15T, 300B, 2.5e12."""
    import argparse

    t = text.strip().upper().replace("_", "")
    scale = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}.get(t[-1:], 1)
    try:
        v = float(t[:-1] if scale != 1 else t) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a token count like 1e12, 300B or 15T, got {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive token count, got {text!r}")
    return int(v)


def print_json(obj) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=False, default=_default)
    sys.stdout.write("\n")


def _default(o):
    if hasattr(o, "to_dict"):
        return o.to_dict()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")

