"""The one exception a user can cause.

Anything a person writes or a file holds that trainplan cannot use raises `TrainplanError` with a
one-line message saying what is wrong and what to do. The CLI prints it without a traceback and
exits with code 2. `assert` stays for programmer invariants.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Iterable

EXIT_USAGE = 2


class TrainplanError(Exception):
    """A user-facing error: one line, what is wrong and what to do."""


def unknown(
    kind: str, name: str, known: Iterable[str], hint: str = "", aliases: dict[str, str] | None = None
) -> TrainplanError:
    """Error for a name that is not in a registry: lists the known names, suggests the nearest.

    `aliases` maps other spellings to known names, so that 'p6-b20' suggests 'ml.p6-b200.48xlarge'.
    """
    known = sorted(known)
    spellings = {k: k for k in known} | (aliases or {})
    close = difflib.get_close_matches(name.lower(), list(spellings), n=1, cutoff=0.5)
    did_you_mean = f"did you mean {spellings[close[0]]!r}? " if close else ""
    tail = f" {hint}" if hint else ""
    return TrainplanError(
        f"unknown {kind} {name!r}: {did_you_mean}known: {', '.join(known)}.{tail}"
    )


class OneLineParser(argparse.ArgumentParser):
    """argparse whose usage errors are one line, like every other trainplan error:
    `trainplan plan: error: argument --nodes: expected a positive integer, got 'x' (see --help)`,
    exit 2. Subcommand parsers inherit the class (add_subparsers uses the parent's type). Used by
    the CLI and by each rank's entry (`python -m trainplan.runtime`)."""

    def error(self, message: str):
        one_line = " ".join(message.split())
        self.exit(EXIT_USAGE, f"{self.prog}: error: {one_line} (see --help)\n")
