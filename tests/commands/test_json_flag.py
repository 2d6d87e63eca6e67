"""Every `trainplan` subcommand takes --json (README: "Every command takes `--json`"). The commands
are read from the CLI's own parser, so a command added without the flag fails here by itself."""

from __future__ import annotations

import argparse

from trainplan.cli import build_parser


def _subcommands(parser: argparse.ArgumentParser, path: str = "trainplan"):
    """(name, parser) of every subcommand under `parser`, nested ones included."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{path} {name}", sub
                yield from _subcommands(sub, f"{path} {name}")


def test_every_subcommand_takes_json():
    commands = dict(_subcommands(build_parser()))
    assert len(commands) > 10  # the registry was read, not an empty walk
    missing = [name for name, p in commands.items()
               if not any("--json" in a.option_strings for a in p._actions)]
    assert not missing, f"no --json: {', '.join(missing)}"


def test_json_is_a_switch_everywhere():
    for name, p in _subcommands(build_parser()):
        action = next(a for a in p._actions if "--json" in a.option_strings)
        assert isinstance(action, argparse._StoreTrueAction), name
