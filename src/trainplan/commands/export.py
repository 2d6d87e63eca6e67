"""`trainplan export --plan plan.json --to FRAMEWORK [--out DIR]`: the plan as the framework's own
configuration (trainplan.export.exporters(): the stacks whose entry names an exporter), for exactly what was costed.

Without --out the files are printed, each under a `# FILE` line. With --out they are written to a
temporary directory beside DIR and moved into it only when every file is written, so an error
leaves nothing half-written.
"""

from __future__ import annotations

NAME = "export"
HELP = "write a plan as a framework's own configuration (torchtitan, megatron, ...)"


def add_arguments(p) -> None:
    from trainplan.export import exporters
    from trainplan.parsing import output_dir

    p.add_argument("--plan", required=True, help="plan.json from `trainplan plan --out`")
    p.add_argument("--to", required=True, choices=sorted(exporters()), help="the framework to export to")
    p.add_argument("--out", type=output_dir, default=None, metavar="DIR",
                   help="directory to write the files into (default: print them)")
    p.add_argument("--json", action="store_true",
                   help="print {framework, release, files: {name: text}, out} instead of the files")


def run(args) -> int:
    from trainplan.export import exporter
    from trainplan.plan import load_plan

    mod = exporter(args.to)
    files = mod.export(load_plan(args.plan))
    if args.out is not None:
        write_all(files, args.out)
    if args.json:
        from trainplan.commands._common import print_json

        print_json({"framework": mod.FRAMEWORK, "release": mod.RELEASE, "files": files, "out": args.out})
        return 0
    if args.out is None:
        for name, text in files.items():
            print(f"# {name}\n{text}", end="" if text.endswith("\n") else "\n")
        return 0
    print(f"wrote {', '.join(files)} to {args.out} ({mod.FRAMEWORK} {mod.RELEASE})")
    return 0


def write_all(files: dict[str, str], out: str) -> None:
    """Write `files` into directory `out`: all of them, or none (a temporary directory moved in)."""
    import os
    import shutil
    import tempfile
    from pathlib import Path

    from trainplan.errors import TrainplanError

    dest = Path(out)
    dest.mkdir(parents=True, exist_ok=True)
    for name in files:
        if Path(name).is_absolute() or ".." in Path(name).parts:
            raise TrainplanError(f"exporter wrote a file name outside --out: {name!r}")
    tmp = Path(tempfile.mkdtemp(prefix=".export-", dir=dest))
    try:
        for name, text in files.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_text(text)
        for name in files:
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp / name, dest / name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
