"""Arguments and output shared by several commands.

The argparse types here are the CLI's edge: each returns a checked value or raises
ArgumentTypeError, which the parser (cli.py) prints as one line. Numbers are finite and bounded,
so that nothing downstream computes with NaN, infinity or a size no machine has.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

# Upper bounds on what a person can ask for. They are sanity limits, far beyond any real run (the
# largest published pre-training runs are ~40T tokens on ~100k GPUs), that keep every derived
# number finite and every search bounded.
MAX_COUNT = 10**9  # any count of GPUs, nodes, sequences, steps, layers ...
MAX_NUMBER = 1e15  # dollars, GiB, and other plain quantities


def positive_int(text: str) -> int:
    """argparse type: a positive integer, with a message that says so."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {v}")
    if v > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"{v} is beyond the limit of {MAX_COUNT:,}")
    return v


def _finite(text: str, what: str, number: str | None = None) -> float:
    """float(number or text), refusing NaN and infinity; errors quote `text`, what the user typed."""
    try:
        v = float(text if number is None else number)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r} (not a finite number)")
    return v


def positive_number(text: str) -> float:
    """argparse type: a finite number > 0 (dollars, GiB), bounded by MAX_NUMBER."""
    v = _finite(text, "a positive number")
    if not 0 < v <= MAX_NUMBER:
        raise argparse.ArgumentTypeError(f"expected a positive number up to {MAX_NUMBER:g}, got {text!r}")
    return v


def fraction(text: str) -> float:
    """argparse type: a finite number in [0, 1)."""
    v = _finite(text, "a fraction in [0, 1)")
    if not 0 <= v < 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1), got {text!r}")
    return v


def tokens(text: str) -> int:
    """argparse type: a token count such as 1000000, 15T, 300B, 2.5e12."""
    t = text.strip().upper().replace("_", "")
    scale = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}.get(t[-1:], 1)
    what = "a token count like 1e12, 300B or 15T"
    v = _finite(text, what, t[:-1] if scale != 1 else t) * scale
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive token count, got {text!r}")
    from trainplan.job import MAX_TOKENS  # here, not at the top: `trainplan models` needs no job

    if v > MAX_TOKENS:
        raise argparse.ArgumentTypeError(f"{text!r} tokens is beyond the limit of {MAX_TOKENS:.0e}")
    return int(v)


def print_json(obj) -> None:
    """JSON on stdout. NaN and infinity are not JSON: refuse to print them, naming where."""
    from trainplan.errors import TrainplanError

    try:
        text = json.dumps(obj, indent=2, sort_keys=False, default=_default, allow_nan=False)
    except ValueError:
        where = _nonfinite(json.loads(json.dumps(obj, default=_default)), "$")
        raise TrainplanError(
            f"refusing to print a non-finite number (NaN or infinity) at {where} in the JSON output; "
            "this is a bug in trainplan, please report it with the command line"
        ) from None
    sys.stdout.write(text + "\n")


def _nonfinite(o, path: str) -> str | None:
    from trainplan.parsing import nonfinite_at

    return nonfinite_at(o, path)


def _default(o):
    if hasattr(o, "to_dict"):
        return o.to_dict()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def read_run(run_dir: str | Path):
    """(summary dict, Plan) of a run directory as `trainplan train --out` writes it (summary.json,
    plan.json), read by compare-run and calibrate: one-line errors for a directory that is not one,
    or a summary without a world size; the plan is read by plan.load_plan with the run's world size,
    so a plan edited out of shape gets the same one-line error as `--plan plan.json`."""
    from trainplan.errors import TrainplanError
    from trainplan.parsing import read_json
    from trainplan.plan import load_plan

    run = Path(run_dir)
    if not (run / "summary.json").is_file() or not (run / "plan.json").is_file():
        raise TrainplanError(f"{run_dir}: not a run directory (needs plan.json and summary.json from `trainplan train`, "
                             "or `trainplan ingest --plan`)")
    summary = read_json(run / "summary.json", "run summary")
    world = summary.get("world_size") if isinstance(summary, dict) else None
    if isinstance(world, bool) or not isinstance(world, int) or world <= 0:
        raise TrainplanError(f"{run / 'summary.json'}: world_size must be a positive integer, got {world!r}; "
                             "give the --out of `trainplan train`")
    return summary, load_plan(run / "plan.json", world=world)
