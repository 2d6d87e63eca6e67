"""Job and layout flags are declared once (commands/_fields.py from spelling.py): no subcommand writes a
flag of a Job, Layout or Workload field by hand, every declared flag is used, and each flag sets its field
to the value its text means. The expected flags come from the dataclass fields, not from a list here."""

from __future__ import annotations

import argparse

import pytest

from trainplan.cli import _command_modules, build_parser
from trainplan.commands._fields import field_values
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.runtime.args import DEMO_FLAGS
from trainplan.spelling import spellings

DECLARED = {s.option: f"{cls.__name__}.{name}" for cls in (Job, Layout, Workload)
            for name, s in spellings(cls).items() if s.option}


def _subcommands():
    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def test_no_subcommand_declares_a_field_flag_by_hand():
    by_hand = []
    for command, p in _subcommands():
        for a in p._actions:
            for option in set(a.option_strings) & set(DECLARED):
                # train's --tp/--ep/--etp choose the demo (runtime/args.py DEMO_FLAGS), refused with a plan
                if command == "train" and a.dest in DEMO_FLAGS:
                    continue
                if getattr(a, "field", None) != DECLARED[option]:
                    by_hand.append(f"trainplan {command} {option}")
    assert not by_hand, f"written by hand, not from the field declarations: {', '.join(by_hand)}"


def test_every_declared_flag_is_used_by_some_subcommand():
    used = {getattr(a, "field", None) for _, p in _subcommands() for a in p._actions}
    assert set(DECLARED.values()) - used == set()


def test_the_explicit_layout_commands_take_every_layout_flag():
    """estimate and fit spell a whole layout by hand: each Layout field with a flag is there."""
    expected = {f"Layout.{name}" for name, s in spellings(Layout).items() if s.option}
    for command, p in _subcommands():
        if command in ("estimate", "fit"):
            assert {getattr(a, "field", "") for a in p._actions} >= expected, command


def _sample(s):
    """(flag argv, the field value it means) for a field's flag."""
    if s.kind == "switch":
        return [s.option], s.const
    if s.choices:
        value = next(c for c in s.choices if c != s.default)
        return [s.option, value], value
    if s.kind == "tokens":
        return [s.option, "300B"], 300 * 10**9
    if s.kind in ("positive", "int"):
        return [s.option, "3"], 3
    return [s.option, "some-name"], "some-name"


@pytest.mark.parametrize("cls, name", [(cls, name) for cls in (Job, Layout, Workload)
                                       for name, s in spellings(cls).items() if s.option])
def test_each_flag_sets_its_field(cls, name):
    s = spellings(cls)[name]
    argv, value = _sample(s)
    parser = build_parser(["estimate"])  # estimate takes every flag of a job and a layout
    args = parser.parse_args(["estimate", *argv])
    assert field_values(args, cls, [name]) == {name: value}
    unset = field_values(parser.parse_args(["estimate"]), cls, [name])[name]
    assert unset == s.default  # left out: the one default the field declares


def test_a_command_module_is_named_after_its_command():
    """cli.build_parser(argv) imports the named command's module alone: commands/NAME.py."""
    for mod in _command_modules():
        assert mod.__name__ == f"trainplan.commands.{mod.NAME.replace('-', '_')}"
