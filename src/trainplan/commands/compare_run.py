"""`trainplan compare-run RUN_DIR`: the plan's prediction next to what the run measured.

A run is compared with a prediction for the device it ran on (calibration/device.py). The planner
predicts catalog GPUs only, so a run on a CPU, or on a GPU other than its plan's, has no prediction
to be compared with: it is refused in one line that says what to do, not printed as a ratio
(issue 27: a CPU run read measured/predicted 3,559 against its plan's H200)."""

from __future__ import annotations

from pathlib import Path

from trainplan.errors import TrainplanError

NAME = "compare-run"
HELP = "Predicted vs measured (peak memory, step time, tokens/s per GPU, MFU) for a `trainplan train` run."

# (field, label, format): the Measurement fields that the estimate predicts, in the same units.
FIELDS = (
    ("peak_mem_gib", "peak memory (GiB)", "{:.2f}"),
    ("step_time_s", "step time (s)", "{:.4f}"),
    ("tokens_per_s_per_gpu", "tokens/s per GPU", "{:,.0f}"),
    ("mfu", "MFU (bf16 peak)", "{:.1%}"),  # both sides against precision.mfu_peak
)


def add_arguments(p) -> None:
    p.add_argument("run", help="run directory written by `trainplan train` or `trainplan ingest --plan` (summary.json, plan.json)")
    p.add_argument("--profile", default=None,
                   help="a calibration profile (e.g. from `trainplan calibrate`): show its prediction next to the packaged one")
    p.add_argument("--machine", default=None, metavar="PROFILE", help="machine profile for the --profile prediction")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")


def predict(plan, profile=None) -> dict | None:
    """The estimate of the plan as the run executed it (with `profile`: a calibration profile, None
    for the packaged one); None when the planner cannot estimate it."""
    try:
        from trainplan.estimate import estimate
    except ImportError:
        return None if plan.estimate is None else plan.estimate.to_dict()
    try:
        return estimate(plan.job, plan.layout, profile).to_dict()
    except Exception as e:  # noqa: BLE001 - a planner failure must not hide the measurements
        return {"error": f"{type(e).__name__}: {e}"}


def compare(run_dir: str | Path, profile=None) -> dict:
    from trainplan.calibration.device import CPU, mismatch, run_device
    from trainplan.commands._common import read_run

    run = Path(run_dir)
    summary, plan = read_run(run)
    gpu = plan.job.cluster.gpu.name
    device = run_device(summary, gpu)
    todo = (f"its measurements are in {run / 'summary.json'}; compare a run of its plan made on {gpu}"
            if device == CPU else
            f"plan for {device} (`trainplan plan --instance` with that GPU), train that plan and compare it")
    if (why := mismatch(f"run {run}", device, gpu, "the planner", todo)):
        raise TrainplanError(why)
    predicted = predict(plan, profile) or {}
    rows = []
    for key, label, _ in FIELDS:
        p, m = predicted.get(key), summary.get(key)
        ratio = (m / p) if isinstance(p, (int, float)) and isinstance(m, (int, float)) and p else None
        rows.append({"field": key, "label": label, "predicted": p, "measured": m, "measured_over_predicted": ratio})
    return {"run": str(run), "model": summary.get("model"), "layout": summary.get("layout"),
            "device": summary.get("device"), "gpu": plan.job.cluster.gpu.name,
            "steps": summary.get("steps"), "rows": rows,
            "prediction_error": predicted.get("error")}


def fold_for(prof, run: Path):
    """(profile, run id): a profile fitted on this run predicts it by its fold fitted without it, so
    that the comparison is with a prediction the run did not teach; (profile, None) otherwise."""
    f = prof.fitted_on
    if f is not None and f.kind == "runs" and str(run.resolve()) in f.sources and run.resolve().name in prof.folds:
        return prof.fold(run.resolve().name), run.resolve().name
    return prof, None


def run(args) -> int:
    from trainplan.commands._common import print_json

    if not Path(args.run).is_dir():
        raise TrainplanError(f"run directory {args.run!r} does not exist; give the --out of `trainplan train`")
    result = compare(args.run)
    if args.profile or args.machine:  # before (packaged) and after (the given profiles)
        from trainplan.commands._profile_args import load_profiles

        prof, fold = fold_for(load_profiles(args.profile, args.machine), Path(args.run))
        after = compare(args.run, prof)
        result["calibrated"] = {"profile": args.profile, "machine": args.machine, "rows": after["rows"],
                                "fold": fold, "fitted_on": prof.describe()}
    if args.json:
        print_json(result)
        return 0
    print(f"{result['model']} [{result['layout']}] on {result['gpu']}, {result['steps']} steps")
    print(f"{'':22} {'predicted':>14} {'measured':>14} {'measured/pred':>14}")
    for (key, label, fmt), row in zip(FIELDS, result["rows"]):
        cell = [fmt.format(v) if isinstance(v, (int, float)) else "-" for v in (row["predicted"], row["measured"])]
        r = row["measured_over_predicted"]
        print(f"{label:22} {cell[0]:>14} {cell[1]:>14} {(f'{r:.2f}' if r is not None else '-'):>14}")
    if "calibrated" in result:
        cal = result["calibrated"]
        print(f"with {cal['profile'] or 'packaged profile'} (machine {cal['machine'] or 'packaged'})"
              + (f", its fold fitted without {cal['fold']}" if cal["fold"] else "") + f": {cal['fitted_on']}")
        for (key, label, fmt), row in zip(FIELDS, result["calibrated"]["rows"]):
            p = row["predicted"]
            cell = fmt.format(p) if isinstance(p, (int, float)) else "-"
            r = row["measured_over_predicted"]
            print(f"{label:22} {cell:>14} {'':>14} {(f'{r:.2f}' if r is not None else '-'):>14}")
    if result["prediction_error"]:
        print(f"(no prediction: {result['prediction_error']})")
    return 0

