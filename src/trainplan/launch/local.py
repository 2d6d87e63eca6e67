"""Target `local`: torchrun on this machine, one node or one of several (c10d rendezvous).

submit runs torchrun under launch/supervise.py: SIGTERM, SIGINT and SIGHUP sent to `trainplan
launch local` reach torchrun's process group, torchrun passes them to the ranks, and the ranks save
and exit; nothing is left running.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass

from trainplan.errors import TrainplanError
from trainplan.launch import supervise, torchrun
from trainplan.launch.base import LaunchOptions, Rendered, Target, job_name, node_paths
from trainplan.launch.env import network_env
from trainplan.supports import TRAINER_STACK

NAME = "local"


@dataclass(frozen=True, slots=True)
class LocalOptions(LaunchOptions):
    nnodes: int | None = None  # None = the plan's node count
    node_rank: int = 0
    nproc_per_node: int | None = None  # None = the plan's GPUs per node
    rdzv_endpoint: str = ""  # host:port of the c10d rendezvous; "" = single node (standalone)
    rdzv_id: str = ""
    device: str = "cuda"  # "cuda" | "cpu" (gloo): from_args detects it for this machine
    fit_world: bool = False  # the runtime rescales dp_shard to the processes started (demos)


def add_arguments(a) -> None:
    a.add("--nnodes", type=a.positive_int, help="nodes (default: the plan's)")
    a.add("--node-rank", type=int, default=0, help="this node's rank (multi-node)")
    a.add("--nproc-per-node", type=a.positive_int, help="processes per node (default: GPUs per node)")
    a.add("--rdzv-endpoint", default="", help="HOST:PORT of the first node (multi-node c10d rendezvous)")
    a.add("--rdzv-id", default="", help="rendezvous id shared by all nodes (default: the job name)")
    a.add("--device", choices=("auto", "cpu", "cuda"), default="auto",
          help="auto: GPUs when nvidia-smi sees some, else CPU with gloo")
    a.add("--fit-world", action="store_true",
          help="the trainer rescales the plan's data-parallel degree to the processes started")


def from_args(args, common: dict) -> LocalOptions:
    # The plan path as given: torchrun runs here, in this directory.
    return LocalOptions(**{**common, "plan_path": args.plan}, nnodes=args.nnodes, node_rank=args.node_rank,
                        nproc_per_node=args.nproc_per_node, rdzv_endpoint=args.rdzv_endpoint,
                        rdzv_id=args.rdzv_id, device=_device(args.device), fit_world=args.fit_world)


def _device(choice: str) -> str:
    if choice != "auto":
        return choice
    if not shutil.which("nvidia-smi"):
        return "cpu"
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20,
                             check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return "cpu"
    return "cuda" if out.strip() else "cpu"


def render(plan, options: LocalOptions) -> Rendered:
    if plan.layout.stack != TRAINER_STACK:
        # the local target is trainplan's own trainer (torchrun of trainplan.runtime); a plan costed
        # for another stack would be refused by the trainer after the processes start
        raise TrainplanError(f"launch local runs trainplan's own trainer and the plan was costed for stack "
                             f"{plan.layout.stack!r}: launch it with sagemaker, slurm, k8s or hyperpod-eks (its "
                             "framework's own job), or run `trainplan export` and the framework's script yourself")
    node = plan.job.cluster.node
    nnodes = options.nnodes or plan.job.cluster.nodes
    nproc = options.nproc_per_node or node.gpus_per_node
    if not 0 <= options.node_rank < nnodes:
        raise TrainplanError(f"--node-rank {options.node_rank} is outside 0..{nnodes - 1} for {nnodes} nodes")
    if options.device not in ("cuda", "cpu"):
        raise TrainplanError(f"unknown device {options.device!r}; known: cpu, cuda")
    if nnodes > 1 and not options.rdzv_endpoint:
        raise TrainplanError(
            f"{nnodes} nodes need a rendezvous: pass --rdzv-endpoint HOST:PORT (the first node's "
            "address, the same on every node) and --node-rank on each node"
        )
    if options.rdzv_endpoint:
        host, _, port = options.rdzv_endpoint.rpartition(":")
        if not host or not port.isdigit():
            raise TrainplanError(f"--rdzv-endpoint must be HOST:PORT, got {options.rdzv_endpoint!r}")
        head = torchrun.c10d(nnodes, nproc, options.rdzv_endpoint,
                             options.rdzv_id or job_name(plan, options), options.node_rank)
    else:
        head = torchrun.standalone(nproc)
    out = options.out_dir or ("trainplan-probe" if options.probe else "")
    argv = head + torchrun.entry(options, options.plan_path, node.name, out_dir=out,
                                 checkpoint_dir=options.checkpoint_dir, fit_world=options.fit_world,
                                 data=node_paths(options.data, NAME), device=options.device)

    env: dict[str, str] = {}
    why: dict[str, str] = {}
    notes = [torchrun.probe_note(out)] if options.probe else []
    if options.device == "cpu":
        # No GPU visible: the runtime falls back to CPU and the gloo backend.
        env["CUDA_VISIBLE_DEVICES"] = ""
        why["CUDA_VISIBLE_DEVICES"] = "empty: no GPU visible, so the runtime trains on CPU with gloo"
        env["OMP_NUM_THREADS"] = "1"
        why["OMP_NUM_THREADS"] = "one thread per process: several CPU workers share this machine"
    elif nnodes > 1:
        env, why = network_env(node)
    world = nnodes * nproc
    if world != plan.layout.num_gpus and not options.fit_world:
        notes.append(
            f"{nnodes} node(s) x {nproc} process(es) = {world}, but the plan's layout is for "
            f"{plan.layout.num_gpus} GPUs ({plan.job.cluster.nodes} x {node.name}); "
            "--fit-world rescales its data-parallel degree to the processes started"
        )
    text = " ".join([*(f"{k}={shlex.quote(v)}" for k, v in env.items()), shlex.join(argv)]) + "\n"
    return Rendered(target=NAME, argv=tuple(argv), env=env, env_sources=why, text=text,
                    notes=tuple(notes))


def submit(rendered: Rendered, workdir=".") -> tuple[int, str]:
    """Run torchrun in the foreground, passing stop signals on; its exit code is ours."""
    if not shutil.which(rendered.argv[0], path=os.environ.get("PATH")):
        raise TrainplanError(
            "torchrun is not on PATH: install the torch extra (pip install 'trainplan[torch]')"
        )
    passed = []

    def note(signum):
        passed.append(signal.Signals(signum).name)
        print(f"trainplan launch: passing {passed[-1]} to torchrun; the ranks save and stop", file=sys.stderr)

    code = supervise.run(list(rendered.argv), env={**os.environ, **rendered.env}, on_signal=note)
    after = f" after {passed[0]}" if passed else ""
    return code, f"torchrun exited with {code}{after}"


TARGET = Target(NAME, "torchrun on this machine (one node, or one of several)", LocalOptions,
                add_arguments, from_args, render, submit, runs_here=True)
