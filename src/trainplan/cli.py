"""`trainplan` command line: one module per subcommand in trainplan/commands/.

Each command module defines NAME, HELP, add_arguments(parser) and run(args) -> exit code. Commands
import heavy dependencies (torch, the SageMaker SDK, plotly) inside run(), and what else they need
inside the function that needs it, and a run builds the flags of its own command alone, so
`trainplan --help` and `trainplan models` start in a tenth of a second (bench/cli_speed.py).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from trainplan import __version__
from trainplan.errors import EXIT_USAGE, OneLineParser, TrainplanError


def _command_modules(named: str | None = None):
    """The command modules, by name; with `named`, only that command's (commands/NAME.py, '-' spelled
    '_') where there is one, so a run imports no other command."""
    import trainplan.commands as pkg

    stems = sorted(n[:-3] for n in os.listdir(pkg.__path__[0]) if n.endswith(".py") and not n.startswith("_"))
    if named is not None and named.replace("-", "_") in stems:
        stems = [named.replace("-", "_")]
    for stem in stems:
        yield importlib.import_module(f"trainplan.commands.{stem}")


def _chosen(argv: list[str]) -> str | None:
    """The command `argv` names: its first word (the top-level flags take no value), or None when
    --help comes first (`trainplan --help`)."""
    for a in argv:
        if a in ("-h", "--help"):
            return None
        if not a.startswith("-"):
            return a
    return None


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser of every command and its flags; given `argv`, only the command it names with its
    flags (every command's name and help alone for `trainplan --help`): a command's flags read
    registries and catalogs for their help and choices, which a run of another command need not pay for."""
    chosen = None if argv is None else _chosen(argv)
    parser = OneLineParser(
        prog="trainplan",
        description="Plan, launch and check large-model training runs.",
    )
    parser.add_argument("--version", action="version", version=f"trainplan {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for mod in _command_modules(chosen):
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=mod.HELP)
        if argv is None or mod.NAME == chosen:
            mod.add_arguments(p)
        p.set_defaults(_run=mod.run, _parser=p)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    args, extra = parser.parse_known_args(argv)
    if extra:  # said by the command's parser, so that the message names the command
        getattr(args, "_parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "_run", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(args._run(args) or 0)
    except TrainplanError as e:
        print(f"trainplan {args.command}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"trainplan {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as e:
        # The paths a command writes are checked before it works (commands/_common.output_file);
        # what is left is the machine's own refusal (disk full, permissions changed meanwhile).
        where = f"{e.filename}: " if e.filename else ""
        print(f"trainplan {args.command}: error: {where}{e.strerror or e}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
