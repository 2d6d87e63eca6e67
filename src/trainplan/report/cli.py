"""`--html FILE` for any command, in two calls (how plan, compare and validate offer it):

    from trainplan.report.cli import add_html_argument, write_html

    def add_arguments(p):
        ...
        add_html_argument(p)

    def run(args):
        result = ...                      # the dict the command prints with --json
        write_html(args, "plan", result)  # no-op without --html; "plan" | "compare" | "validate"

The report is written atomically after the command's own output; "wrote FILE" goes to stderr so
that `--json --html r.html` still prints clean JSON on stdout. plotly is imported only when
--html is given, and its absence is a one-line error naming the extra to install.
"""

from __future__ import annotations

import sys

KINDS = ("plan", "compare", "validate")


def add_html_argument(parser) -> None:
    from trainplan.parsing import output_file_in_dir

    parser.add_argument("--html", metavar="FILE", type=output_file_in_dir,
                        help="also write a self-contained HTML report with plots (needs the report extra)")


def write_html(args, kind: str, result: dict, dataset: dict | None = None) -> None:
    from importlib.util import find_spec

    from trainplan.errors import TrainplanError

    path = getattr(args, "html", None)
    if not path:
        return
    assert kind in KINDS, f"unknown report kind {kind!r}"
    if find_spec("plotly") is None:
        raise TrainplanError("HTML reports need plotly: pip install 'trainplan[report]'")
    from trainplan.report import pages

    if kind == "plan":
        pages.write_plan_report(path, result)
    elif kind == "compare":
        pages.write_compare_report(path, result)
    else:
        pages.write_validate_report(path, result, dataset)
    print(f"wrote {path}", file=sys.stderr)
