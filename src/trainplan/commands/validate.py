"""`trainplan validate`: predict published runs (trainplan-validation/1) and report the errors."""

from __future__ import annotations

from trainplan.report.cli import add_html_argument, write_html

NAME = "validate"
HELP = "Compare predictions with published measurements (trainplan-validation/1) and summarise the errors."


def add_arguments(p) -> None:
    from trainplan.parsing import output_file

    p.add_argument("--dataset", default=None,
                   help="a trainplan-validation/1 JSON file (default: the packaged dev dataset)")
    p.add_argument("--profile", default=None, help="calibration profile JSON (default: packaged)")
    p.add_argument("--in-sample", action="store_true",
                   help="use the profile fitted on all sources instead of the leave-one-source-out folds")
    p.add_argument("--fit", metavar="OUT", type=output_file, default=None,
                   help="fit a calibration profile on the dataset with leave-one-source-out CV, write it to OUT")
    p.add_argument("--json", action="store_true")
    add_html_argument(p)


def run(args) -> int:
    from trainplan.commands._common import print_json
    from trainplan.profile import default_profile, load_profile
    from trainplan.validation.dataset import load_dataset
    from trainplan.validation.run import run as run_validation

    if args.dataset is None:
        from trainplan.validation.dataset import DEV_DATASET

        args.dataset = str(DEV_DATASET)
    _, cases = load_dataset(args.dataset)
    if args.fit:
        import json
        import sys

        from trainplan.calibration.build import build_profile
        from trainplan.fileio import write_atomic

        prof = build_profile(cases, args.dataset, progress=lambda s: print(s, file=sys.stderr))
        write_atomic(args.fit, json.dumps(prof.to_dict(), indent=1) + "\n")
        print(f"wrote {args.fit}", file=sys.stderr)
    else:
        prof = load_profile(args.profile) if args.profile else default_profile()
    result = run_validation(cases, prof, cross_validated=not args.in_sample)
    if args.json:
        print_json(result)
    else:
        print(render(result))
    if args.html:
        write_html(args, "validate", result, dataset=_raw(args.dataset))
    return 0


def _raw(path: str) -> dict | None:
    """The dataset as a dict, for the report's per-record GPU colours; read only with --html."""
    from trainplan.parsing import read_json

    return read_json(path, "dataset")


def _pct(v):
    return "     -" if v is None else f"{v * 100:+6.1f}"


def render(result: dict) -> str:
    s = result["summary"]
    out = [(f"{'id':<6}{'quality':<8}{'gpu':<15}{'prec':<16}{'tok/s/GPU pred':>15}{'meas':>9}{'err%':>7}"
            f"{'step err%':>10}{'mem err%':>9}{'mfu err%':>9}  layout / skipped reason")]
    for r in result["records"]:
        head = f"{r['id']:<6}{r['quality']:<8}{r['gpu']!s:<15}{r['precision']!s:<16}"
        if r["skipped_reason"]:
            out.append(head + f"{'':>50}  skipped: {r['skipped_reason']}")
            continue
        p, m, e = r["predicted"], r["measured"], r["error"]
        meas = "-" if m["tokens_per_s_per_gpu"] is None else f"{m['tokens_per_s_per_gpu']:,.0f}"
        out.append(head + f"{p['tokens_per_s_per_gpu']:>15,.0f}{meas:>9}{_pct(e['tokens_per_s_per_gpu']):>7}"
                   f"{_pct(e['step_time_s']):>10}{_pct(e['peak_mem_gib']):>9}{_pct(e['mfu']):>9}  {r['layout']}"
                   + "".join(f"  [flag: {f}]" for f in r.get("flags") or ()))
    cv = "cross-validated (leave one source out)" if s["cross_validated"] else "in-sample"
    out += ["", (f"{s['predicted']} of {s['records']} records predicted ({s['skipped']} skipped, "
                 f"{s['with_assumptions']} with assumed values), profile {s['profile']}, errors {cv}:"),
            f"  {'metric':<22}{'group':<28}{'n':>4}{'median':>9}{'p90':>9}{'max':>9}{'mean±':>9}"]
    for metric in ("tokens_per_s_per_gpu", "step_time_s", "peak_mem_gib", "mfu"):
        entry = s[metric]
        lines = [("all", entry["all"])]
        for g in ("by_quality", "by_gpu", "by_precision", "by_framework"):
            lines += [(f"{g[3:]}={k}", v) for k, v in entry[g].items()]
        for name, st in lines:
            if st["count"]:
                out.append(f"  {metric:<22}{name:<28}{st['count']:>4}{st['median_abs']:>9.1%}{st['p90_abs']:>9.1%}"
                           f"{st['max_abs']:>9.1%}{st['mean_signed']:>+9.1%}")
    return "\n".join(out)
