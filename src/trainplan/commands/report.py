"""`trainplan report plan.json [--html FILE] [--json]`: a saved plan as a terminal summary, an
HTML page, or the numbers the report shows as JSON.

Also reads the `--json` output of `plan`, `compare` and `validate` (told apart by their keys), so
that `trainplan plan --json > p.json; trainplan report p.json --html p.html` works after the fact.
A plan is read as plan.json is (plan.load_plan's checks); the report draws the estimates it holds
and never estimates anything itself.
"""

from __future__ import annotations

NAME = "report"
HELP = "show a plan.json (or plan/compare/validate --json output) as a table or an HTML report"


def add_arguments(p) -> None:
    from trainplan.parsing import output_file_in_dir

    p.add_argument("file", help="plan.json, or JSON saved from `trainplan plan|compare|validate --json`")
    p.add_argument("--html", metavar="FILE", type=output_file_in_dir, help="write a self-contained HTML report with plots")
    p.add_argument("--json", action="store_true", help="print the numbers the report shows as JSON")
    p.add_argument("--dataset", metavar="FILE",
                   help="for validate output: the trainplan-validation/1 file it was run on "
                        "(fills in GPU and measured values when the output lacks them)")


def kind_of(data) -> str:
    """'plan', 'compare' or 'validate' from the keys of a JSON document; one-line error otherwise."""
    from trainplan.errors import TrainplanError

    if isinstance(data, dict):
        if "records" in data:
            return "validate"
        if any(isinstance(data.get(k), list) for k in ("instances", "rows", "results")):
            return "compare"
        if ("layout" in data and "model" in data) or isinstance(data.get("plan"), dict):
            return "plan"
    raise TrainplanError(
        "cannot tell what this JSON is: expected a plan.json (schema trainplan-plan/1) or the "
        "--json output of `trainplan plan`, `compare` or `validate`")


def run(args) -> int:
    from trainplan.parsing import read_json

    data = read_json(args.file, "report input")
    kind = kind_of(data)
    if kind == "plan":
        from trainplan.errors import TrainplanError
        from trainplan.report.views import as_plan

        try:  # refuse an impossible plan before drawing it, naming the file as load_plan does
            data = as_plan(data, where=str(args.file))
        except TrainplanError as e:
            msg = str(e)
            raise TrainplanError(msg if msg.startswith(str(args.file)) else f"{args.file}: {msg}") from None
    dataset = read_json(args.dataset, "dataset") if args.dataset else None
    if kind == "plan":  # typed above: drawn as it is
        _render(args, kind, data, dataset)
        return 0
    # compare and validate output is drawn from the dict as saved: a field of the wrong shape in an
    # edited file is said in one line, and nothing is printed or written before the whole renders.
    import contextlib
    import io
    import sys

    from trainplan.errors import TrainplanError

    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            _render(args, kind, data, dataset)
    except (KeyError, TypeError, AttributeError, ValueError, IndexError) as e:
        raise TrainplanError(f"{args.file}: not the --json output of `trainplan {kind}` as it wrote it "
                             f"({type(e).__name__}: {e}); give the unedited file") from None
    sys.stdout.write(out.getvalue())
    return 0


def _render(args, kind: str, data, dataset) -> None:
    if args.json:
        from trainplan.commands._common import print_json
        from trainplan.report.summary import as_json

        print_json(as_json(kind, data, dataset))
    elif not args.html:
        from trainplan.report.summary import print_summary

        print_summary(kind, data, dataset)
    if args.html:
        from trainplan.report.cli import write_html

        write_html(args, kind, data, dataset)
