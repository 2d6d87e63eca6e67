"""The one exception a user can cause.

Anything a person writes or a file holds that trainplan cannot use raises `TrainplanError` with a
one-line message saying what is wrong and what to do. The CLI prints it without a traceback and
exits with code 2. `assert` stays for programmer invariants.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

EXIT_USAGE = 2


class TrainplanError(Exception):
    """A user-facing error: one line, what is wrong and what to do."""


def unknown(kind: str, name: str, known: Iterable[str], hint: str = "") -> TrainplanError:
    """Error for a name that is not in a registry: lists the known names, suggests the nearest."""
    known = sorted(known)
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
    did_you_mean = f"did you mean {close[0]!r}? " if close else ""
    tail = f" {hint}" if hint else ""
    return TrainplanError(
        f"unknown {kind} {name!r}: {did_you_mean}known: {', '.join(known)}.{tail}"
    )
