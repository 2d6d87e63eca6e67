"""Writing files so that a failure leaves nothing half-written.

A low module: every layer that writes a file the user keeps (plans, reports, launch scripts,
calibration data) calls this, so it sits below all of them (tests/core/test_layering.py).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: str | Path, text: str) -> None:
    """Write a file so that it is complete or absent: no half-written output on failure."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        # mkstemp creates 0600; a plan or report is an ordinary file, readable as the umask allows.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
