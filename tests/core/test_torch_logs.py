"""torch_logs drops exactly the four import-time log lines of torchao (two optional kernels that do
not load, two deprecated pytree registrations of its enums) and nothing else those loggers say;
importing the runtime, trace or probe package installs the filters before any torch import."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from trainplan.torch_logs import quiet_torch_imports


def _said(logger: str, msg: str, *args) -> bool:
    """Whether a warning `msg % args` on `logger` gets past its filters."""
    lg = logging.getLogger(logger)
    record = lg.makeRecord(lg.name, logging.WARNING, __file__, 1, msg, args, None)
    return bool(lg.filter(record))


def test_the_four_known_lines_are_dropped_and_nothing_else():
    quiet_torch_imports()
    quiet_torch_imports()  # a second call adds no second filter
    assert sum(1 for f in logging.getLogger("torchao").filters if type(f).__name__ == "_DropKnownNoise") == 1
    so = "/venv/lib/python3.11/site-packages/torchao/_C_mxfp8.cpython-310-x86_64-linux-gnu.so"
    assert not _said("torchao", f"Failed to load {so}: Could not load this library: {so}")
    enum = ("%s is an Enum subclass and is now natively supported by torch.compile as an opaque value type. "
            "Calling register_constant() on Enum subclasses is deprecated and will be an error in a future release.")
    assert not _said("torch.utils._pytree", enum, "<enum 'KernelPreference'>")
    # other messages of the same loggers, and the same text on another logger, still print
    assert _said("torchao", "Failed to load /some/other/library.so: missing")
    assert _said("torchao", "Skipping import of cpp extensions due to incompatible torch version")
    assert _said("torch.utils._pytree", "register_pytree_node is deprecated")
    assert _said("torch.other", f"Failed to load {so}: Could not load this library")


@pytest.mark.torch
@pytest.mark.parametrize("package", ["trainplan.runtime", "trainplan.trace", "trainplan.probe"])
def test_importing_a_torch_package_then_torchao_prints_none_of_them(package):
    pytest.importorskip("torchao")
    code = f"import {package}, torch, torchao.float8, torchao.quantization"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode == 0, p.stderr
    assert "Failed to load" not in p.stderr and "register_constant()" not in p.stderr, p.stderr
