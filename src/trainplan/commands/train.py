"""`trainplan train`: run a plan (or the demo) on this machine through torchrun."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from trainplan.errors import TrainplanError

# The launcher, the runtime's flags and the metrics are imported where they are used: `trainplan
# --help` and the other commands read this module for NAME and HELP alone (cli.py).

NAME = "train"
HELP = "Train a plan.json on this machine (torchrun, FSDP2); without --plan, a tiny demo on CPU/GPU."

def add_arguments(p) -> None:
    from trainplan.commands._common import positive_int
    from trainplan.runtime.args import add_run_arguments

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
    from trainplan.runtime.args import PASSED

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
    from trainplan.runtime.args import DEMO_ONLY, demo_flags_given

    if not args.plan:
        return args.nproc or 1
    if demo_flags_given(args):
        raise TrainplanError(DEMO_ONLY)
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


def _run_plan(args, nproc: int):
    """The plan as the ranks will run it: the plan.json (fitted to the processes with --fit-world),
    or the demo on `nproc` processes."""
    if args.plan:
        from trainplan.plan import load_plan

        plan = load_plan(args.plan)
        if args.fit_world:
            from trainplan.runtime.world import fit_to_world

            plan = fit_to_world(plan, nproc)
        return plan
    from trainplan.runtime.demo import demo_model, demo_plan

    return demo_plan(nproc, steps=args.steps or 30, model=demo_model(args.model), ep=args.ep or 1,
                     tp=args.tp or 1, etp=args.etp)


def _check_inputs(args, plan, out: Path):
    """Every input the ranks would refuse, refused here in one line before any process starts
    (runtime/inputs.py), without torch."""
    from trainplan.runtime.inputs import check_run

    return check_run(plan, data=args.data, tokenizer=args.tokenizer, out=out, tensorboard=args.tensorboard,
                     hf=args.hf, steps=args.steps, device=args.device)


def _preflight(args, plan, nproc: int, checked) -> None:
    """The checks every rank makes again, made once here before any process starts: a plan needs
    a GPU unless --device cpu; the ranks on this machine must fit its memory (host_memory.py); the
    checkpoint directory must be writable with room for the checkpoints kept. With --device cpu
    the memory check comes before torch is imported."""
    from trainplan.runtime import preflight
    from trainplan.runtime.host_memory import check_host_memory

    if args.device == "cpu":
        kind = "cpu"
    else:
        import torch

        kind = preflight.choose_device(args.device, bool(args.plan), torch.cuda.is_available())
    check_host_memory(plan, nproc, kind, checked.steps, checked.data_tokens)
    if args.checkpoint_dir:
        from trainplan.runtime.checkpoint import expected_size

        preflight.check_checkpoint_dir(Path(args.checkpoint_dir), expected_size(plan, nproc, args.hf),
                                       args.keep_checkpoints or preflight.DEFAULT_KEEP)


def _ranks(torchrun_pid: int) -> list[int]:
    """torchrun's children, its ranks; [] where /proc is missing (then torchrun is signalled)."""
    try:
        return [int(p) for p in Path(f"/proc/{torchrun_pid}/task/{torchrun_pid}/children").read_text().split()]
    except OSError:
        return []


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)


def _note(signum) -> None:
    print(f"trainplan train: {signal.Signals(signum).name}: the ranks save a checkpoint after this step and stop",
          file=sys.stderr, flush=True)


def run(args) -> int:
    from trainplan.commands._common import print_json
    from trainplan.launch import supervise
    from trainplan.parsing import check_output
    from trainplan.runtime.args import SUPERVISED
    from trainplan.runtime.metrics import steps_ran

    out = args.out if args.out is not None else f"runs/train-{time.strftime('%Y%m%d-%H%M%S')}"
    check_output(out, "--out", directory=True)  # before any process starts, not at its first write ('' too)
    out = Path(out)
    if args.checkpoint_every is not None and not args.checkpoint_dir:
        raise TrainplanError("--checkpoint-every needs --checkpoint-dir: where the checkpoints go")
    nproc = _nproc(args)
    plan = _run_plan(args, nproc)
    checked = _check_inputs(args, plan, out)
    argv = torchrun_argv(nproc, _runtime_args(args, out))
    if args.dry_run:
        print(" ".join(argv))
        return 0
    _preflight(args, plan, nproc, checked)
    (out / "summary.json").unlink(missing_ok=True)
    # A stop signal (SIGTERM: a spot interruption, a scheduler's stop; SIGINT: Ctrl-C, which reaches
    # only us since torchrun runs in its own session; SIGUSR1: Slurm's warning) goes to the ranks
    # themselves: each saves a checkpoint at the end of its step and exits 0, so torchrun sees a
    # clean finish (signalled itself, it would pass SIGTERM/SIGINT on too, but exit with an error,
    # and SIGKILL ranks still saving after its shutdown timeout, 30 s by default).
    env = {**os.environ, SUPERVISED: "1"}  # a stop the ranks agree on is said once, below
    # Said at once: torchrun, torch's import and the model's build take tens of seconds before step 1.
    print(f"trainplan train: starting {nproc} process(es) for {args.plan or 'the demo'}; measurements in {out}",
          file=sys.stderr, flush=True)
    code = supervise.run(argv, env=env, on_signal=_note, signals=STOP_SIGNALS, targets=_ranks)
    summary_file = out / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.is_file() else None
    if summary is not None and summary.get("error"):
        raise TrainplanError(summary["error"])
    # torchrun exits non-zero when it was signalled itself, even though the ranks checkpointed and
    # exited cleanly; their summary says so.
    if summary is None or (code != 0 and summary.get("stopped_by") not in {s.name for s in STOP_SIGNALS}):
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
              f"loss {summary['first_loss']:.4f} -> {summary['last_loss']:.4f} in {steps_ran(summary)}, "
              f"{summary['tokens_per_s']:,.0f} tokens/s{mfu}{mem}")
        print(f"measurements: {summary['measurements']}")
        if summary.get("skipped_steps"):
            print(f"{summary['skipped_steps']} step(s) skipped: loss or gradient norm not finite (no update)")
        if summary.get("stopped_by"):
            print(f"stopped by {summary['stopped_by']} after step {summary['steps']}")
        if summary.get("checkpoint"):
            print(f"checkpoint: {summary['checkpoint']}")
    return 0
