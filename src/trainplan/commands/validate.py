"""`trainplan validate`: predict published runs (trainplan-validation/1) and report the errors."""

from __future__ import annotations

from trainplan.commands._profile_args import add_profile_arguments
from trainplan.report.cli import add_html_argument, write_html

NAME = "validate"
HELP = "Compare predictions with published measurements (trainplan-validation/1) and summarise the errors."


def add_arguments(p) -> None:
    from trainplan.parsing import output_file

    p.add_argument("--dataset", default=None,
                   help="a trainplan-validation/1 JSON file (default: the packaged dev dataset)")
    add_profile_arguments(p)
    p.add_argument("--in-sample", action="store_true",
                   help="use the profile fitted on all sources instead of the leave-one-source-out folds")
    p.add_argument("--fit", metavar="OUT", type=output_file, default=None,
                   help="fit a calibration profile on the dataset with leave-one-source-out CV, write it to OUT")
    p.add_argument("--json", action="store_true")
    add_html_argument(p)


def run(args) -> int:
    from trainplan.commands._common import print_json
    from trainplan.commands._profile_args import load_profiles
    from trainplan.profile import default_profile
    from trainplan.validation.dataset import load_dataset
    from trainplan.validation.run import run as run_validation

    # the packaged dataset is named as such in a fitted profile, not by this checkout's path
    dataset_name = args.dataset or "the packaged dev dataset (trainplan/validation/data/published_dev.json)"
    packaged = args.dataset is None
    if args.dataset is None:
        from trainplan.validation.dataset import DEV_DATASET

        args.dataset = str(DEV_DATASET)
    _, cases = load_dataset(args.dataset)
    if args.fit:
        import json
        import sys

        from trainplan.calibration.build import build_profile
        from trainplan.fileio import write_atomic

        machines = None
        if args.machine:
            machines = load_profiles(None, args.machine).machines
        prof = build_profile(cases, dataset_name, progress=lambda s: print(s, file=sys.stderr), machines=machines,
                             holdout=packaged)
        write_atomic(args.fit, json.dumps(prof.to_dict(), indent=1) + "\n")
        print(f"wrote {args.fit}", file=sys.stderr)
    else:
        prof = load_profiles(args.profile, args.machine) or default_profile()
    result = run_validation(cases, prof, cross_validated=not args.in_sample)
    if not args.in_sample:
        from trainplan.validation.holdout import holdout_cases
        from trainplan.validation.oos import out_of_sample

        # the published runs kept out of every fit belong to the packaged dataset's sources
        result["out_of_sample"] = out_of_sample(cases, prof, holdout=holdout_cases() if packaged else ())
    if args.json:
        print_json(result)
    else:
        from trainplan.report.summary import validate_text
        from trainplan.report.terminal import use_color

        print(validate_text(result, color=use_color()))
    if args.html:
        write_html(args, "validate", result, dataset=_raw(args.dataset))
    return 0


def _raw(path: str) -> dict | None:
    """The dataset as a dict, for the report's per-record GPU colours; read only with --html."""
    from trainplan.parsing import read_json

    return read_json(path, "dataset")
