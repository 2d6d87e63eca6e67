"""`trainplan train`: run a plan (or the demo) on this machine through torchrun."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from trainplan.commands._common import positive_int, print_json
from trainplan.errors import TrainplanError
from trainplan.parsing import check_output
from trainplan.runtime.args import PASSED, add_run_arguments

NAME = "train"
HELP = "Train a plan.json on this machine (torchrun, FSDP2); without --plan, a tiny demo on CPU/GPU."

def add_arguments(p) -> None:
    add_run_arguments(p, steps_type=positive_int)
    p.add_argument("--nproc", type=positive_int,
                   help="processes (GPUs) on this machine (default: the plan's GPUs, or 1 for the demo)")
    p.add_argument("--dry-run", action="store_true", help="print the torchrun command and exit")
    p.add_argument("--json", action="store_true", help="print the run summary as JSON")


def torchrun_argv(nproc: int, runtime_args: list[str]) -> list[str]:
    """The launch line: torchrun (as `python -m torch.distributed.run`, the same program, found
    without PATH) starting `nproc` ranks of `-m trainplan.runtime` on this machine."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "-m", "trainplan.runtime", *runtime_args]


def _runtime_args(args, out: Path) -> list[str]:
    argv = ["--plan", args.plan] if args.plan else ["--demo"]
    argv += ["--out", str(out)]
    for flag, takes_value, _ in PASSED:
        v = getattr(args, flag[2:].replace("-", "_"))
        if takes_value and v is not None:
            argv += [flag, str(v)]
        elif not takes_value and v:
            argv.append(flag)
    return argv


def _nproc(args) -> int:
    if not args.plan:
        return args.nproc or 1
    if args.model or args.ep:
        raise TrainplanError("--model and --ep choose the demo; a plan carries its own model and layout")
    from trainplan.plan import load_plan

    plan = load_plan(args.plan)  # a bad plan is refused here, in one line, before any process starts
    L = plan.layout
    if plan.job.cluster.nodes > 1 and not args.fit_world:
        raise TrainplanError(
            f"{args.plan} is for {plan.job.cluster.nodes} nodes; `trainplan train` runs one machine. "
            "Launch it with `trainplan launch`, or pass --fit-world --nproc N to try it here"
        )
    n = args.nproc or L.num_gpus
    if n != L.num_gpus and not args.fit_world:
        raise TrainplanError(
            f"{args.plan} needs {L.num_gpus} processes (dp_replicate*dp_shard*tp*pp*cp) but --nproc is {n}; "
            "drop --nproc, or pass --fit-world to rescale dp_shard"
        )
    return n


def _forward_sigterm(torchrun_pid: int) -> None:
    """SIGTERM to `trainplan train` (a spot interruption, a scheduler's stop) goes to the ranks
    themselves: each saves a checkpoint at the end of its step and exits 0, so torchrun sees a
    clean finish. (Signalled itself, torchrun would also stop the ranks, then exit with an error
    and a traceback.) Falls back to signalling torchrun where /proc is missing."""
    import os

    try:
        children = Path(f"/proc/{torchrun_pid}/task/{torchrun_pid}/children").read_text().split()
    except OSError:
        children = []
    for pid in children or [str(torchrun_pid)]:
        try:
            os.kill(int(pid), signal.SIGTERM)
        except ProcessLookupError:
            pass


def run(args) -> int:
    out = Path(args.out or f"runs/train-{time.strftime('%Y%m%d-%H%M%S')}")
    check_output(out, "--out", directory=True)  # before any process starts, not at its first write
    nproc = _nproc(args)
    argv = torchrun_argv(nproc, _runtime_args(args, out))
    if args.dry_run:
        print(" ".join(argv))
        return 0
    (out / "summary.json").unlink(missing_ok=True)
    proc = subprocess.Popen(argv)
    previous = signal.signal(signal.SIGTERM, lambda s, f: _forward_sigterm(proc.pid))
    try:
        code = proc.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)
    summary_file = out / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.is_file() else None
    # torchrun exits non-zero when it was signalled itself, even though the ranks checkpointed and
    # exited cleanly; their summary says so.
    if summary is None or (code != 0 and summary.get("stopped_by") != "SIGTERM"):
        raise TrainplanError(f"training exited with code {code}; the ranks' messages are above")
    if args.json:
        print_json(summary)
    elif summary.get("first_loss") is None:
        print(f"nothing to train: the checkpoint {summary.get('resumed_from')} is at step {summary['start_step']}, "
              "not before --steps")
    else:
        mfu = f", MFU {summary['mfu']:.1%}" if summary.get("mfu") is not None else ""
        mem = f", peak {summary['peak_mem_gib']:.1f} GiB" if summary.get("peak_mem_gib") is not None else ""
        print(f"{summary['model']} [{summary['layout']}] on {summary['world_size']} {summary['device']} process(es): "
              f"loss {summary['first_loss']:.4f} -> {summary['last_loss']:.4f} in {summary['steps']} steps, "
              f"{summary['tokens_per_s']:,.0f} tokens/s{mfu}{mem}")
        print(f"measurements: {summary['measurements']}")
        if summary.get("stopped_by"):
            print(f"stopped by {summary['stopped_by']} after step {summary['steps']}")
        if summary.get("checkpoint"):
            print(f"checkpoint: {summary['checkpoint']}")
    return 0
