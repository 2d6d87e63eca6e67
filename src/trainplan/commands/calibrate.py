"""`trainplan calibrate --runs DIR [DIR...] --out profile.json`: fit the residual coefficients on your
own runs (what `trainplan train` writes: plan.json, summary.json), report the leave-one-run-out error,
and write a calibration profile that `plan`, `estimate` and `compare-run` take with --profile."""

from __future__ import annotations

from pathlib import Path

NAME = "calibrate"
HELP = "Fit the step-time residuals on your own runs (trainplan train output); report the cross-validated error."


def add_arguments(p) -> None:
    from trainplan.commands._profile_args import add_profile_arguments
    from trainplan.parsing import output_file

    p.add_argument("--runs", nargs="+", required=True, metavar="DIR",
                   help="run directories (plan.json + summary.json, as `trainplan train --out` writes them)")
    add_profile_arguments(p)
    p.add_argument("--out", type=output_file, required=True, help="the calibration profile to write")
    p.add_argument("--json", action="store_true")


def load_run(d: str):
    """A RunCase from a run directory; one-line errors for what is missing."""
    from trainplan.calibration.runs import RunCase
    from trainplan.commands._common import read_run
    from trainplan.errors import TrainplanError

    run = Path(d)
    s, plan = read_run(run)
    tps, step = s.get("tokens_per_s_per_gpu"), s.get("step_time_s")
    if not _positive(tps):
        raise TrainplanError(f"{d}/summary.json: no tokens_per_s_per_gpu (got {tps!r}); did the run take steps?")
    if step is not None and not _positive(step):
        raise TrainplanError(f"{d}/summary.json: step_time_s must be a positive number, got {step!r}")
    return RunCase(run.resolve().name, plan.job, plan.layout,
                   {"tokens_per_s_per_gpu": s["tokens_per_s_per_gpu"], "step_time_s": s.get("step_time_s")})


def _positive(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < float("inf")


def run(args) -> int:
    import json
    import sys

    from trainplan.calibration.runs import calibrate
    from trainplan.commands._common import print_json
    from trainplan.commands._profile_args import load_profiles
    from trainplan.errors import TrainplanError
    from trainplan.fileio import write_atomic
    from trainplan.profile import default_profile

    cases = [load_run(d) for d in args.runs]
    if len({c.id for c in cases}) != len(cases):
        raise TrainplanError("two run directories share a name; each run is its own cross-validation group")
    start = load_profiles(args.profile, args.machine) or default_profile()
    prof = calibrate(cases, start)
    write_atomic(args.out, json.dumps(prof.to_dict(), indent=1) + "\n")
    cv = prof.cv_error["tokens_per_s_per_gpu"]
    if args.json:
        print_json({"out": args.out, "coefficients": prof.meta["values"], "cv_error": prof.cv_error})
        return 0
    print(f"calibrated on {len(cases)} run(s); wrote {args.out}")
    for k, v in prof.meta["values"].items():
        print(f"  {k:<18}{v:.4g}")
    pct = lambda x: "-" if x is None else f"{x:.1%}"
    print(f"tokens/s per GPU error, median |pred/meas - 1|: before {pct(cv['before']['median_abs'])}, "
          f"after {pct(cv['all']['median_abs'])} ({prof.cv_error['method']})")
    if args.machine:
        print(f"(fitted with --machine {args.machine}: give it again with --profile {args.out})", file=sys.stderr)
    return 0
