"""`python -m trainplan.runtime --plan plan.json [--steps N] [--out DIR] [--checkpoint-dir DIR] [--json]`

One rank of a torchrun job. Without --plan (or with --demo) it trains the tiny demo model.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

from trainplan.errors import EXIT_USAGE, OneLineParser, TrainplanError
from trainplan.runtime.args import DEMO_ONLY, SUPERVISED, add_run_arguments, demo_flags_given
from trainplan.runtime.metrics import steps_ran


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m trainplan.runtime", description=__doc__.splitlines()[0])
    add_run_arguments(p)
    p.add_argument("--demo", action="store_true", help="run the tiny demo model (FSDP over all processes)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on rank 0")
    p.add_argument("--stop-at-step", type=int, help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from trainplan.runtime.trainer import RunOptions, sagemaker_defaults, train

    sm = sagemaker_defaults()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    out = Path(args.out or sm.get("out") or f"runs/train-{time.strftime('%Y%m%d-%H%M%S')}")
    try:
        if args.plan and not args.demo:
            from trainplan.plan import load_plan

            if demo_flags_given(args):
                raise TrainplanError(DEMO_ONLY)
            plan = load_plan(args.plan)
        else:
            from trainplan.runtime.demo import demo_model, demo_plan

            plan = demo_plan(world, steps=args.steps or 30, model=demo_model(args.model), ep=args.ep or 1,
                             tp=args.tp or 1, etp=args.etp)
        if args.checkpoint_every is not None:  # the flag overrides the plan's interval, its one home
            plan = replace(plan, train=replace(plan.train, checkpoint_every=args.checkpoint_every))
        ckpt = args.checkpoint_dir or sm.get("checkpoint_dir")
        opts = RunOptions(
            out=out, steps=args.steps, checkpoint_dir=Path(ckpt) if ckpt else None,
            tensorboard=args.tensorboard, data=args.data, tokenizer=args.tokenizer, hf=args.hf,
            fit_world=args.fit_world, progress=not args.no_progress, stop_at_step=args.stop_at_step,
            model_dir=sm.get("model_dir"), device=args.device, gpu_plan=bool(args.plan and not args.demo),
            **{k: v for k, v in (("max_nonfinite", args.max_nonfinite), ("keep_checkpoints", args.keep_checkpoints))
               if v is not None},
        )
        summary = train(plan, opts)
    except TrainplanError as e:
        from trainplan.runtime.distributed import RunStopped

        rank0 = os.environ.get("RANK", "0") == "0"
        if isinstance(e, RunStopped) and os.environ.get(SUPERVISED):
            # Under `trainplan train` a stop every rank agreed on is said once, by it, from
            # summary.json; the ranks exit 0 so that torchrun adds no failure report of its own.
            # Under a bare torchrun (a cluster's launcher) the exit status must say the run failed.
            if rank0:
                _record_stop(out, str(e))
            return 0
        # A stop every rank agreed on is said once, by rank 0; other errors by each rank that has one.
        if not isinstance(e, RunStopped) or rank0:
            print(f"trainplan.runtime: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    if summary and args.json:
        print(json.dumps(summary, indent=2))
    elif summary and summary.get("first_loss") is not None and not os.environ.get(SUPERVISED):
        # under `trainplan train` the run is summed up once, by it
        print(f"loss {summary['first_loss']:.4f} -> {summary['last_loss']:.4f} over {steps_ran(summary)}; "
              f"{summary['tokens_per_s']:,.0f} tokens/s; measurements: {summary['measurements']}", file=sys.stderr)
    return 0


def _record_stop(out: Path, error: str) -> None:
    """The stop's reason in summary.json for the supervisor, unless the run's summary already says it
    (a stop inside the loop writes the full summary first)."""
    from trainplan.fileio import write_atomic

    f = out / "summary.json"
    try:
        if f.is_file() and json.loads(f.read_text()).get("error"):
            return
    except (OSError, ValueError):
        pass
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(f, json.dumps({"error": error, "stopped_by": "error"}, indent=2) + "\n")


def _exit(code: int) -> None:
    """Leave without interpreter finalization. The run has closed everything it writes and destroyed
    its process groups by now, but gloo's C++ worker threads can still own work objects whose tensors
    hold Python references; finalizing the interpreter under them now and then aborts a rank with
    "terminate called without an active exception" (SIGABRT) after a clean run (seen once in ~5 CI
    runs of the fault suite; pytorch/pytorch#179291 describes the mechanism), which torchrun reports as
    a failed job."""
    import logging

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _exit(main())
