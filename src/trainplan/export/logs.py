"""A framework's training log read as steps in the planner's units (issue #22 item 5): the parsers
beside each exporter (`trainplan.export.<exporter>_log`) and the one dispatcher `ingest` uses.

A log module defines FRAMEWORK and RELEASE (its exporter's: the release whose log format it reads,
named in its `<exporter>_log.toml` with FILE:LINE for every line it reads) and

  parse(lines, where) -> Log
      the step lines of `lines` (one log file, `where` its name for errors); a line that looks like
      a step line and does not parse raises TrainplanError with `where:line`.

A step holds only what its line states (Step's fields, None where the line says nothing); what a
log does not state is left for `trainplan.ingest` to derive from the plan, or to report as not
stated. Torch-free and planner-free: the parsers read text.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field

from trainplan.errors import TrainplanError

# The conventions a log's TFLOP/s (and MFU) can be quoted in (runtime/metrics.py: `mfu` counts
# causal attention at half the s x s work, `mfu_noncausal` the full square).
CAUSAL, NONCAUSAL = "causal", "noncausal"


@dataclass
class Step:
    """One step line, in the planner's units; None: the line does not state it."""

    step: int
    line: int  # where it was read (1-based), for messages
    loss: float | None = None
    lr: float | None = None
    grad_norm: float | None = None
    global_batch: int | None = None  # sequences
    step_time_s: float | None = None
    tokens_per_s_per_gpu: float | None = None
    tflops_per_gpu: float | None = None  # in the log's FLOPs convention (Log.flops_convention)
    mfu: float | None = None  # a fraction, in the log's convention and against its bf16 dense peak
    peak_allocated_gib: float | None = None
    peak_reserved_gib: float | None = None
    skipped: bool = False


@dataclass
class Log:
    """What one log file states: its steps and the run facts it names."""

    framework: str
    release: str
    flops_convention: str  # CAUSAL or NONCAUSAL: how the framework counts attention FLOPs
    steps: list[Step] = field(default_factory=list)
    device_name: str | None = None  # the GPU's name as the framework printed it
    device_kind: str | None = None  # the torch device type the framework printed ('cuda')
    device_gib: float | None = None  # its memory as printed
    world_size: int | None = None
    seq_len: int | None = None
    global_batch: int | None = None
    # Memory stated on lines of its own, by step: (peak allocated, peak reserved) GiB of the worst
    # rank in this file. Another file may hold the step's line (Megatron's iteration line is the last
    # rank's, report_memory's lines are each rank's), so the reader that merges files attaches them.
    memory: dict[int, tuple[float | None, float | None]] = field(default_factory=dict)


def number(text: str, where: str, what: str) -> float:
    """A printed number ('1,234', '3.2E-04', 'nan'); a one-line error naming `where` otherwise."""
    try:
        return float(text.replace(",", ""))
    except ValueError:
        raise TrainplanError(f"{where}: {what} {text!r} is not a number; is this log of the release "
                             "the --format reads?") from None


def _modules() -> dict[str, str]:
    """Exporter module -> its log module, for the exporters that have one."""
    from trainplan.export import exporters

    out = {}
    for module in exporters().values():
        log = f"{module}_log"
        if importlib.util.find_spec(log) is not None:
            out[module] = log
    return out


def formats() -> dict[str, str]:
    """--format name (the exporter's FRAMEWORK, as `export --to` spells it) -> log module."""
    return {importlib.import_module(m).FRAMEWORK: log for m, log in _modules().items()}


def parser(name: str):
    """The log module for --format `name`; an unknown one is a one-line error listing the known ones."""
    known = formats()
    if name not in known:
        raise TrainplanError(f"unknown log format {name!r}; known: {', '.join(sorted(known))}")
    return importlib.import_module(known[name])
