"""`trainplan launch TARGET --plan plan.json`: run a plan with torchrun, on SageMaker, Slurm, Kubernetes or HyperPod EKS.

The flags every target takes are here; each target adds its own (launch/<target>.py
add_arguments), and a flag of another target is refused rather than silently ignored.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

NAME = "launch"
HELP = ("Launch a plan: local torchrun, SageMaker AI, Slurm/HyperPod, Kubernetes or HyperPod EKS; a plan on a "
        "framework's stack (megatron, torchtitan) runs that framework (--dry-run shows it).")

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str) -> int:
    """argparse type: seconds, or a number with s/m/h/d ('36h', '2d')."""
    t = text.strip().lower()
    scale = _UNITS.get(t[-1:], None)
    try:
        v = float(t[:-1] if scale else t) * (scale or 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a duration like 3600, 90m, 36h or 2d, got {text!r}") from None
    if v <= 0 or v != int(v):
        raise argparse.ArgumentTypeError(f"expected a positive whole number of seconds, got {text!r}")
    return int(v)


def pair(sep: str, what: str, number: bool = False):
    """argparse type: KEY<sep>VALUE (VALUE a positive count when `number`)."""
    def parse(text: str):
        key, found, value = text.partition(sep)
        if not found or not key:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        if number:
            if not value.isdigit() or int(value) <= 0:
                raise argparse.ArgumentTypeError(f"expected {what} with a positive count, got {text!r}")
            return key, int(value)
        return key, value
    return parse


class _TargetArguments:
    """What a target's add_arguments gets: add() and the argument types. Records which targets own
    which flag, so that a flag of another target is refused; a flag two targets share (--image) is
    added once, with both helps."""

    def __init__(self, group, target: str, owners: dict[str, tuple[set[str], str]], added: dict):
        from trainplan.commands._common import positive_int

        self._group, self._target, self._owners, self._added = group, target, owners, added
        self.positive_int, self.duration, self.pair = positive_int, duration, pair

    def add(self, *flags, **kw):
        if flags[0] not in self._added:
            action = self._group.add_argument(*flags, **kw)
            self._added[flags[0]] = (action, f"{self._target}: {kw.get('help') or ''}")
        else:  # shared: say what it means to each target
            action, first = self._added[flags[0]]
            action.help = f"{first}; {self._target}: {kw.get('help') or ''}"
        self._owners.setdefault(action.dest, (set(), flags[0]))[0].add(self._target)
        return action


def add_arguments(p: argparse.ArgumentParser) -> None:
    from trainplan.launch import TARGETS

    p.add_argument("target", metavar="TARGET", help=", ".join(TARGETS))
    p.add_argument("--plan", required=True, help="plan.json written by `trainplan plan --out`")
    p.add_argument("--dry-run", action="store_true", help="print exactly what would be submitted, submit nothing")
    p.add_argument("--json", action="store_true", help="with --dry-run: everything as JSON")
    p.add_argument("--job-name", default="", help="job name (default: trainplan-<model>)")
    p.add_argument("--steps", type=_positive_int, help="optimizer steps (default: the plan's train.steps)")
    p.add_argument("--out", default="", help="where the trainer writes its measurements")
    p.add_argument("--checkpoint-dir", default="", help="checkpoint directory on the nodes")
    p.add_argument("--probe", action="store_true",
                   help="run `trainplan probe --quick` on the plan's instance type instead of training: a short job "
                        "that writes a machine profile (docs/machine-profile.md); --probe-nodes 2 measures EFA too")
    p.add_argument("--probe-nodes", type=int, choices=(1, 2), default=1,
                   help="with --probe: nodes to probe on (2: the network across nodes as well)")
    p.add_argument("--data", action="append", default=[],
                   help="training data as the nodes see it (repeatable); sagemaker: s3://bucket/prefix "
                        "(channel 'train') or NAME=s3://... (channel NAME)")
    owners: dict[str, tuple[set[str], str]] = {}
    added: dict = {}
    for t in TARGETS.values():
        t.add_arguments(_TargetArguments(p.add_argument_group(t.name, t.help), t.name, owners, added))
    p.set_defaults(_target_flags=owners)


def _positive_int(text: str) -> int:
    from trainplan.commands._common import positive_int

    return positive_int(text)


def options_from_args(args, parser_defaults: dict | None = None):
    """The chosen target's options; a flag given for another target is an error."""
    from trainplan.errors import TrainplanError
    from trainplan.launch import LaunchOptions, find_target

    target = find_target(args.target)
    defaults = parser_defaults or {}
    for dest, (owners, flag) in sorted(args._target_flags.items()):
        if target.name not in owners and dest in defaults and getattr(args, dest) != defaults[dest]:
            raise TrainplanError(f"{flag} is an option of launch {' and '.join(sorted(owners))}, "
                                 f"not of launch {target.name}")
    for d in args.data:
        if not d.strip():
            raise TrainplanError(f"--data {d!r} is empty; give a path (or an s3:// prefix), or leave --data out "
                                 "for the plan's data")
    common = LaunchOptions(plan_path=str(Path(args.plan).resolve()), job_name=args.job_name, steps=args.steps,
                           out_dir=args.out, checkpoint_dir=args.checkpoint_dir, data=tuple(args.data),
                           probe=args.probe)
    return target.from_args(args, {f: getattr(common, f) for f in common.__dataclass_fields__})


def run(args) -> int:
    from trainplan.commands._common import print_json
    from trainplan.launch import find_target, render
    from trainplan.plan import load_plan

    target = find_target(args.target)  # an unknown target is refused before the plan is read
    target.preflight()
    options = options_from_args(args, _defaults(args))
    plan = load_plan(args.plan)
    if args.probe:
        plan = probe_plan(plan, args.probe_nodes)
    elif args.probe_nodes != 1:
        from trainplan.errors import TrainplanError

        raise TrainplanError("--probe-nodes applies to --probe only; add --probe or drop it")
    rendered = target.check(render(target.name, plan, options))
    if target.runs_here and not args.probe:
        check_local_run(plan, options, starting=not args.dry_run)
    if args.dry_run:
        if args.json:
            print_json(rendered.to_dict())
        else:
            sys.stdout.write(rendered.text)
        for note in rendered.notes:
            print(f"note: {note}", file=sys.stderr)
        return 0
    for note in rendered.notes:
        print(f"note: {note}", file=sys.stderr)
    code, message = target.submit(rendered, Path(args.plan).resolve().parent)
    print(message, file=sys.stderr if code else sys.stdout)
    return code


def check_local_run(plan, options, starting: bool) -> None:
    """The ranks run here (launch local): their inputs are checked here before torchrun starts
    (runtime/inputs.py), and, when starting (not for a dry run), that the processes fit the plan
    (they would fail at their first collective otherwise) and the ranks of this node its memory
    (runtime/host_memory.py)."""
    from trainplan.errors import TrainplanError
    from trainplan.runtime.host_memory import check_host_memory
    from trainplan.runtime.inputs import check_run
    from trainplan.runtime.world import fit_to_world

    nnodes = options.nnodes or plan.job.cluster.nodes
    nproc = options.nproc_per_node or plan.job.cluster.node.gpus_per_node
    world = nnodes * nproc
    if options.fit_world:
        plan = fit_to_world(plan, world)
    elif starting and world != plan.layout.num_gpus:
        raise TrainplanError(f"{nnodes} node(s) x {nproc} process(es) = {world}, but the plan's layout is for "
                             f"{plan.layout.num_gpus} GPUs; pass --fit-world to rescale its data-parallel degree, "
                             "or start as many processes as it has GPUs")
    checked = check_run(plan, data=",".join(options.data) if options.data else None, out=options.out_dir or None,
                        steps=options.steps, device=options.device)
    if starting:
        check_host_memory(plan, nproc, options.device, checked.steps, checked.data_tokens)


def probe_plan(plan, nodes: int):
    """The plan's instance type on `nodes` nodes (the probe job's size); the trainer's layout is not run."""
    from dataclasses import replace

    from trainplan.hardware import Cluster

    job = replace(plan.job, cluster=Cluster(plan.job.cluster.node, nodes))
    return replace(plan, job=job, estimate=None, reasons=(f"trainplan probe on {nodes} x {job.cluster.node.name}",))


def _defaults(args) -> dict:
    """Each target flag's default, read from a fresh parser (what the user did not give)."""
    p = argparse.ArgumentParser(add_help=False)
    add_arguments(p)
    return {dest: p.get_default(dest) for dest in args._target_flags}
