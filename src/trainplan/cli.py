"""`trainplan` command line: one module per subcommand in trainplan/commands/.

Each command module defines NAME, HELP, add_arguments(parser) and run(args) -> exit code. Commands
import heavy dependencies (torch, the SageMaker SDK, plotly) inside run(), so `trainplan --help`
and the planner commands start in milliseconds.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from trainplan import __version__
from trainplan.errors import EXIT_USAGE, OneLineParser, TrainplanError


def _command_modules():
    import trainplan.commands as pkg

    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if not info.name.startswith("_"):
            yield importlib.import_module(f"trainplan.commands.{info.name}")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="trainplan",
        description="Plan, launch and check large-model training runs.",
    )
    parser.add_argument("--version", action="version", version=f"trainplan {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for mod in _command_modules():
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run, _parser=p)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
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
