"""Target `local`: torchrun on this machine, one node or one of several (c10d rendezvous)."""

from __future__ import annotations

import os
import shlex
import subprocess

from trainplan.errors import TrainplanError
from trainplan.launch import torchrun
from trainplan.launch.base import LaunchOptions, Rendered, job_name
from trainplan.launch.env import network_env

NAME = "local"


def render(plan, options: LaunchOptions) -> Rendered:
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
    argv = head + torchrun.module() + torchrun.runtime_args(
        options.plan_path, steps=options.steps, out_dir=options.out_dir,
        checkpoint_dir=options.checkpoint_dir, fit_world=options.fit_world)

    env: dict[str, str] = {}
    why: dict[str, str] = {}
    notes = []
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


def submit(rendered: Rendered) -> int:
    """Run torchrun in the foreground; its exit code is ours."""
    try:
        return subprocess.run(list(rendered.argv), env={**os.environ, **rendered.env}, check=False).returncode
    except FileNotFoundError:
        raise TrainplanError(
            "torchrun is not on PATH: install the torch extra (pip install 'trainplan[torch]')"
        ) from None
