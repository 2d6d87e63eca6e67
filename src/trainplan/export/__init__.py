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

# `--from FILE`: which exporter reads a file, told by its suffix; where one suffix has several readers
# (.py: torchtitan's config function or a NeMo 2 recipe script), the first whose `is_recipe(text)`
# sniff says yes reads it, else the last (reader_for, the one home of that rule).
FROM_SUFFIXES = {".py": ("trainplan.export.nemo", "trainplan.export.torchtitan"), ".txt": "trainplan.export.megatron",
                 ".sh": "trainplan.export.megatron", ".yaml": "trainplan.export.hyperpod",
                 ".yml": "trainplan.export.hyperpod"}


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
    """`--to` name -> module: every module a stacks.toml entry names (`exporter = "<name>"`, or
    `exporters = [...]` where one stack has several targets: nemo writes a NeMo 2 recipe and a
    HyperPod recipe). The `--to` name is the module's name, which is its FRAMEWORK (a test holds
    them equal; the modules are not imported here, so `--help` stays fast). A new framework is one
    module, its data file and that one line of its stack entry."""
    from trainplan.stacks import stacks

    return {name: f"trainplan.export.{name}" for s in stacks().values() for name in (s.exporters or ())}


def stack_exporters(stack: str) -> tuple[str, ...]:
    """The `--to` names that export a plan costed for `stack` (its first is exporter(stack)'s)."""
    from trainplan.stacks import stacks

    s = stacks().get(stack)
    return s.exporters if s is not None else ()


def exporter(name: str):
    """The exporter module for `name` (a `--to` name; a stack's name gives its first target, so
    `exporter(plan.layout.stack)` keeps working); an unknown name is a one-line error listing the known ones."""
    known = exporters()
    if name not in known and stack_exporters(name):
        name = stack_exporters(name)[0]
    if name not in known:
        raise TrainplanError(f"unknown export target {name!r}; known: {', '.join(known)}")
    return importlib.import_module(known[name])


def refusal(job, layout) -> str | None:
    """What the framework of `layout`'s stack cannot run as `job` costs it (its first exporter's
    `refusal(job, layout)`: the one home of that rule, which `export` raises and the search skips
    on), or None: also for a stack with no exporter, whose layouts are taken as runnable there."""
    names = stack_exporters(layout.stack)  # the first target is the stack's own (nemo before hyperpod)
    return importlib.import_module(exporters()[names[0]]).refusal(job, layout) if names else None


def read_file(path: str):
    """(exporter module, Imported) of the framework configuration at `path` (FROM_SUFFIXES)."""
    from pathlib import Path

    p = Path(path)
    if p.suffix not in FROM_SUFFIXES:
        known = ", ".join(f"{s} ({'/'.join(m.rsplit('.', 1)[1] for m in _modules(s))})" for s in FROM_SUFFIXES)
        raise TrainplanError(f"--from {path}: cannot tell which framework's configuration this is; known: {known}")
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise TrainplanError(f"--from {path}: cannot read it ({getattr(e, 'strerror', None) or e})") from None
    mod = reader_for(p.suffix, text)
    return mod, mod.read(text, str(path))


def _modules(suffix: str) -> tuple[str, ...]:
    m = FROM_SUFFIXES[suffix]
    return (m,) if isinstance(m, str) else m


def reader_for(suffix: str, text: str):
    """The exporter module that reads `text` of a file ending in `suffix` (FROM_SUFFIXES): the first
    candidate whose is_recipe(text) holds, else the last (the suffix's plain reader)."""
    *sniffed, last = _modules(suffix)
    for name in sniffed:
        mod = importlib.import_module(name)
        if mod.is_recipe(text):
            return mod
    return importlib.import_module(last)
