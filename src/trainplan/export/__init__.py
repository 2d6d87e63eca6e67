"""Export a costed plan to the configuration of the framework that will run it, and read a team's
own configuration back as a job, a layout and stack settings (issue #22).

One module per framework (`trainplan.export.<name>`), named by its stack's stacks.toml entry
(`exporter = "<name>"`: the stack is the framework, and no module outside stacks.py spells a stack
name, tests/core/test_stack_names_live_in_stacks.py), each defining:

  RELEASE: str            the release whose names it writes (with its source in the data file)
  export(plan) -> dict[str, str]
      relative file name -> file content, for exactly what `plan` costed; a setting the framework
      cannot express, or would run differently from how it was costed, raises TrainplanError in one
      line that names it (nothing is written then)
  read(text, where) -> Imported
      the job fields, layout and settings a configuration of that framework describes; an unknown or
      unsupported key raises TrainplanError naming it (never silently dropped)

A framework's argument names live in a data file beside its module, each with its source, so a
release that renames an argument is one data change.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

from trainplan.errors import TrainplanError

# `--from FILE`: which exporter reads a file, told by its suffix.
FROM_SUFFIXES = {".py": "trainplan.export.torchtitan", ".txt": "trainplan.export.megatron", ".sh": "trainplan.export.megatron"}


@dataclass(frozen=True)
class Imported:
    """What a framework configuration describes, in trainplan's terms."""

    model: str | None  # catalog name or config.json path, when the configuration names one
    layout: object  # trainplan.layout.Layout
    seq_len: int
    global_batch: int
    nodes: int | None = None
    instance: str | None = None
    notes: tuple[str, ...] = field(default=())  # what was read by convention rather than stated


def exporters() -> dict[str, str]:
    """`--to` name (the stack's) -> module: the stacks whose stacks.toml entry names an `exporter`.
    A new framework is one module, its data file and that one line of its stack entry."""
    from trainplan.stacks import stacks

    return {s.name: f"trainplan.export.{s.exporter}" for s in stacks().values() if s.exporter}


def exporter(name: str):
    """The exporter module for `name`; an unknown name is a one-line error listing the known ones."""
    known = exporters()
    if name not in known:
        raise TrainplanError(f"unknown export target {name!r}; known: {', '.join(known)}")
    return importlib.import_module(known[name])


def refusal(job, layout) -> str | None:
    """What the framework of `layout`'s stack cannot run as `job` costs it (its exporter's
    `refusal(job, layout)`: the one home of that rule, which `export` raises and the search skips
    on), or None: also for a stack with no exporter, whose layouts are taken as runnable there."""
    from trainplan.stacks import stack

    name = stack(layout.stack).exporter
    return importlib.import_module(f"trainplan.export.{name}").refusal(job, layout) if name else None


def read_file(path: str):
    """(exporter module, Imported) of the framework configuration at `path` (FROM_SUFFIXES)."""
    from pathlib import Path

    p = Path(path)
    module = FROM_SUFFIXES.get(p.suffix)
    if module is None:
        known = ", ".join(f"{s} ({m.rsplit('.', 1)[1]})" for s, m in FROM_SUFFIXES.items())
        raise TrainplanError(f"--from {path}: cannot tell which framework's configuration this is; known: {known}")
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise TrainplanError(f"--from {path}: cannot read it ({getattr(e, 'strerror', None) or e})") from None
    mod = importlib.import_module(module)
    return mod, mod.read(text, str(path))
