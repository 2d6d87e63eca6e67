"""`trainplan calibrate --runs DIR [DIR...] --out profile.json`: fit the residual coefficients on your
own runs (what `trainplan train` writes: plan.json, summary.json), report the leave-one-run-out error,
and write a calibration profile that `plan`, `estimate` and `compare-run` take with --profile.

What it refuses (a run of another device, a coefficient at its bound, a fit worse than the start
profile) and which coefficients it moves: calibration/runs.py."""

from __future__ import annotations

from pathlib import Path

NAME = "calibrate"
HELP = "Fit the step-time residuals on your own runs (trainplan train output); report the cross-validated error."


def add_arguments(p) -> None:
    from trainplan.commands._profile_args import add_profile_arguments
    from trainplan.parsing import output_file

    p.add_argument("--runs", nargs="+", required=True, metavar="DIR",
                   help="run directories (plan.json + summary.json, as `trainplan train --out` or `trainplan ingest --plan` "
                        "writes them): three "
                        "or more, of different layouts, made on the GPU their plan is for")
    add_profile_arguments(p)
    p.add_argument("--out", type=output_file, required=True, help="the calibration profile to write")
    p.add_argument("--json", action="store_true")


def load_run(d: str):
    """A RunCase from a run directory; one-line errors for what is missing."""
    import datetime

    from trainplan.calibration.device import run_device
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
    written = (run / "summary.json").stat().st_mtime
    return RunCase(run.resolve().name, plan.job, plan.layout,
                   {"tokens_per_s_per_gpu": s["tokens_per_s_per_gpu"], "step_time_s": s.get("step_time_s")},
                   device=run_device(s, plan.job.cluster.gpu.name), path=str(run.resolve()),
                   date=datetime.date.fromtimestamp(written).isoformat())


def _positive(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < float("inf")


def run(args) -> int:
    import json
    import sys

    from trainplan.calibration.runs import calibrate, check_devices
    from trainplan.commands._common import print_json
    from trainplan.commands._profile_args import check_machine_gpu, load_profiles
    from trainplan.errors import TrainplanError
    from trainplan.fileio import write_atomic
    from trainplan.profile import default_profile

    cases = [load_run(d) for d in args.runs]
    if len({c.id for c in cases}) != len(cases):
        raise TrainplanError("two run directories share a name; each run is its own cross-validation group")
    start = load_profiles(args.profile, args.machine) or default_profile()
    check_machine_gpu(args.machine, check_devices(cases, start))
    # named after its file; never the packaged profile's name, whose band is the published runs' error
    name = Path(args.out).stem if Path(args.out).stem != default_profile().name else f"{Path(args.out).stem}-calibrated"
    prof = calibrate(cases, start, name=name)
    write_atomic(args.out, json.dumps(prof.to_dict(), indent=1) + "\n")
    cv = prof.cv_error["tokens_per_s_per_gpu"]
    if args.json:
        print_json({"out": args.out, "coefficients": prof.meta["values"], "kept": prof.meta["kept"],
                    "fitted_on": prof.fitted_on.to_dict(), "cv_error": prof.cv_error})
        return 0
    f = prof.fitted_on
    print(f"calibrated on {f.count} runs of {', '.join(f.models)} on {', '.join(f.gpus)}; wrote {args.out}")
    print("moved (each seen by enough runs, told apart from the others):")
    for k, v in prof.meta["values"].items():
        print(f"  {k:<16}{getattr(start, k):.4g} -> {v:.4g}")
    if prof.meta["kept"]:
        print(f"kept at profile {start.name}'s value:")
        for k, why in prof.meta["kept"].items():
            print(f"  {k:<16}{getattr(start, k):.4g}  ({why})")
    print(f"tokens/s per GPU error on runs the fit did not see ({prof.cv_error['method']}): median "
          f"{cv['all']['median_abs']:.1%}, p90 {cv['p90_abs']:.1%}; profile {start.name} on the same runs: "
          f"median {cv['before']['median_abs']:.1%}")
    if args.machine:
        print(f"(fitted with --machine {args.machine}: give it again with --profile {args.out})", file=sys.stderr)
    return 0
