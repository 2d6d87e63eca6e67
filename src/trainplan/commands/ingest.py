"""`trainplan ingest LOG... --format FRAMEWORK [--plan plan.json] --out RUN_DIR`: a framework's
training log as the run directory `trainplan train` writes (trainplan/ingest.py), so that
`compare-run RUN_DIR` and `calibrate --runs RUN_DIR` read it unchanged.

The formats are the exporters' framework names that have a log reader beside them
(export/logs.py formats()); each reads the log of its exporter's pinned release.
"""

from __future__ import annotations

NAME = "ingest"
HELP = "Turn a framework's training log (torchtitan, megatron) into a run directory compare-run and calibrate read."


def add_arguments(p) -> None:
    from trainplan.parsing import output_dir

    p.add_argument("logs", nargs="+", metavar="LOG", help="the run's log file(s): stdout of the training job, any ranks")
    p.add_argument("--format", required=True, metavar="FRAMEWORK",
                   help="the framework that wrote the log, as `export --to` names it (torchtitan, megatron)")
    p.add_argument("--plan", default=None, help="the plan.json the run executed: its GPU, world size, sequence "
                                                 "length and model fill what the log does not state, and compare-run "
                                                 "and calibrate need it")
    p.add_argument("--gpu", default=None, help="the GPU the run used, when the log names none and no --plan is "
                                                "given (`trainplan hardware`)")
    p.add_argument("--out", type=output_dir, required=True, metavar="RUN_DIR",
                   help="the run directory to write (new, or empty)")
    p.add_argument("--json", action="store_true", help="print the run summary as JSON")


def run(args) -> int:
    from trainplan.ingest import ingest

    summary = ingest(args.logs, args.format, args.out, plan_path=args.plan, gpu=args.gpu)
    if args.json:
        from trainplan.commands._common import print_json

        print_json(summary)
        return 0
    ing = summary["ingested"]

    def cell(key, fmt):
        v = summary.get(key)
        return fmt.format(v) if isinstance(v, (int, float)) else "-"

    print(f"{ing['format']} {ing['release']}: {ing['step_lines']} steps (to step {summary['steps']}) on "
          f"{summary['gpu']} ({ing['gpu_from']}); wrote {args.out}")
    print(f"  step time {cell('step_time_s', '{:.4f}')} s, tokens/s per GPU {cell('tokens_per_s_per_gpu', '{:,.0f}')}, "
          f"MFU {cell('mfu', '{:.1%}')}, peak reserved {cell('peak_reserved_gib', '{:.2f}')} GiB "
          f"(medians after the first step; memory: the peak)")
    if ing["not_stated"]:
        print(f"  not stated by the log: {', '.join(ing['not_stated'])}")
    if ing["derived"]:
        print(f"  derived: {', '.join(ing['derived'])} (summary.json ingested.derived says how)")
    if ing["plan_gpu"] not in (None, summary["gpu"]):
        print(f"  the plan is for {ing['plan_gpu']}: compare-run and calibrate refuse this run (it measured "
              f"{summary['gpu']}); plan for {summary['gpu']} and ingest with that plan")
    if summary.get("model") is None:
        print("  no --plan: compare-run and calibrate need the run's plan.json; ingest again with --plan")
    return 0
