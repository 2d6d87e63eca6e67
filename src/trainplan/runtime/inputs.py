"""A run's inputs, checked before any process starts: what every rank would otherwise find out
seconds into the run, each rank printing it under torchrun's failure report.

Torch-free, so that `trainplan train` and `trainplan launch local` refuse a bad input in one line
before torch is imported: the plan against the trainer (supports.py: check_runnable, check_own_model,
the --hf rules), the steps, the run and TensorBoard directories (writable, not a file), the data
(runtime/data.py: the files it names and the first records of each, read with the ranks' own
reader) and the tokenizer against the model's vocabulary. The host-memory preflight
(host_memory.py) and the device and checkpoint checks (preflight.py) come after these, when a run
really starts.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

from trainplan.errors import TrainplanError


@dataclass(frozen=True, slots=True)
class CheckedRun:
    steps: int  # optimizer steps the ranks run
    data_tokens: int  # at most this many tokens in the data (data.token_bound)


def check_run(plan, *, data: str | None = None, tokenizer: str | None = None, out: str | Path | None = None,
              tensorboard: str | None = None, hf: bool = False, steps: int | None = None,
              device: str | None = None) -> CheckedRun:
    """Raise a one-line TrainplanError for the first input of a run of `plan` (as the ranks will
    run it: fitted to their world) that its ranks would refuse. `device` None: the plan's GPUs."""
    from trainplan.supports import check_hf, check_own_model, check_runnable

    check_runnable(plan.layout, "cpu" if device == "cpu" else "cuda", plan.job.model)
    if hf:
        check_hf(plan.layout, plan.hf_config)
        if find_spec("transformers") is None:
            raise TrainplanError("--hf builds the model with transformers, which is not installed: "
                                 "pip install 'trainplan[torch]'")
    else:
        check_own_model(plan.job.model)
    total = steps or plan.train.steps
    if total <= 0:
        raise TrainplanError(f"the plan's train.steps is {plan.train.steps}: give --steps N")
    if out is not None:
        writable_directory(out, "--out")
    if tensorboard is not None:
        writable_directory(tensorboard, "--tensorboard")
        if find_spec("tensorboard") is None:
            raise TrainplanError("--tensorboard needs the tensorboard package: pip install 'trainplan[torch]'")
    return CheckedRun(total, _check_data(plan, data, tokenizer, hf))


def _check_data(plan, data: str | None, tokenizer: str | None, hf: bool) -> int:
    from trainplan.parsing import comma_list
    from trainplan.runtime.data import check_sample, open_data, token_bound

    if data is not None:
        try:
            comma_list(data)
        except argparse.ArgumentTypeError as e:
            raise TrainplanError(f"--data: {e}; leave --data out for the plan's data (or the built-in corpus)") from None
    if tokenizer is not None and not tokenizer.strip():
        raise TrainplanError("--tokenizer is empty; give a tokenizer.json, or leave it out for bytes")
    if tokenizer is not None and find_spec("tokenizers") is None:
        raise TrainplanError("--tokenizer needs the tokenizers package: pip install 'trainplan[torch]'")
    vocab = plan.job.model.vocab_size
    if hf and plan.hf_config:
        vocab = int(plan.hf_config.get("vocab_size", vocab))  # as runtime/trainer.py reads it
    tok, files = open_data(data if data is not None else plan.train.data, tokenizer, vocab)
    check_sample(files, tok, vocab)
    return token_bound(files, vocab)


def writable_directory(path: str | Path, flag: str) -> None:
    """`path` is a directory this process can create (or has) and write into: the nearest
    existing ancestor is a directory, and a directory can really be made in it (a probe, removed at
    once: os.access says yes for root on a read-only mount or under /proc)."""
    from trainplan.parsing import check_output

    check_output(path, flag, directory=True)
    p = Path(path).expanduser()
    at = p
    while not at.exists():
        at = at.parent
    try:
        os.rmdir(tempfile.mkdtemp(dir=at, prefix=".trainplan-write-test-"))
    except OSError as e:
        raise TrainplanError(f"{flag} {str(path)!r}: cannot create a directory in {str(at)!r} "
                             f"({e.strerror or e}); choose a writable directory") from None
