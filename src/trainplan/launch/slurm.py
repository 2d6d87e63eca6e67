"""Target `slurm`: an sbatch script for a Slurm cluster or a SageMaker HyperPod (Slurm) cluster.

srun starts one torchrun per node; they meet at a c10d rendezvous on the first node of the
allocation (`scontrol show hostnames`, looked up by each step). User-supplied strings reach the
script only as shell-quoted `export` values; the srun step reads them as "$VARIABLES". The plan, the output and the checkpoint directory must be
on a file system every node sees (FSx for Lustre on HyperPod).
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

from trainplan.errors import TrainplanError
from trainplan.launch.base import DEFAULT_RDZV_PORT, LaunchOptions, Rendered, job_name
from trainplan.launch.env import network_env
from trainplan.launch.template import fill, load

NAME = "slurm"
SCRIPT = "trainplan.sbatch"


def render(plan, options: LaunchOptions) -> Rendered:
    node, nodes = plan.job.cluster.node, plan.job.cluster.nodes
    name = job_name(plan, options)
    env, why = network_env(node)
    q = shlex.quote
    extra = []
    if options.partition:
        extra.append(f"#SBATCH --partition={q(options.partition)}")
    if options.account:
        extra.append(f"#SBATCH --account={q(options.account)}")
    if options.time_limit:
        extra.append(f"#SBATCH --time={q(options.time_limit)}")
    out_dir = options.out_dir or "trainplan-out/$SLURM_JOB_ID"
    ckpt = options.checkpoint_dir or "trainplan-checkpoints/" + name
    script = fill(load("sbatch.sh.tmpl"), {
        "created_by": plan.created_by,
        "summary": _one_line(f"{plan.job.model.name} on {nodes} x {node.name}: {plan.layout.short()}"),
        "job_name": q(name),
        "nodes": str(nodes),
        "nproc": str(node.gpus_per_node),
        "log_pattern": q(f"{name}-%j.out"),
        "sbatch_extra": "".join(f"{line}\n" for line in extra),
        "exports": "\n".join(f"export {k}={q(v)}" for k, v in env.items()),
        "plan": q(options.plan_path),
        # The default output directory names the job id: quote everything but that variable.
        "out_dir": q(options.out_dir) if options.out_dir else '"trainplan-out/$SLURM_JOB_ID"',
        "checkpoint_dir": q(ckpt),
        "activate": f"source {q(str(Path(options.venv) / 'bin' / 'activate'))}\n" if options.venv else "",
        "rdzv_port": str(DEFAULT_RDZV_PORT),
        "steps": f" --steps {options.steps}" if options.steps is not None else "",
        # HyperPod's auto-resume: on a hardware fault it replaces the node and starts the step
        # again (https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-resiliency-slurm-auto-resume.html);
        # the trainer resumes from the newest checkpoint in --checkpoint-dir.
        "srun_extra": " --auto-resume=1" if options.auto_resume else "",
    })
    notes = [f"{options.plan_path}, {out_dir} and {ckpt} must be on a file system every node sees"]
    return Rendered(target=NAME, argv=("sbatch", SCRIPT), env=env, env_sources=why,
                    files={SCRIPT: script}, text=script, notes=tuple(notes))


def _one_line(text: str) -> str:
    return " ".join(text.split())


def submit(rendered: Rendered, directory: str | Path = ".") -> int:
    """Write the script next to the plan and hand it to sbatch."""
    from trainplan.fileio import write_atomic

    path = Path(directory) / SCRIPT
    write_atomic(path, rendered.files[SCRIPT])
    try:
        return subprocess.run(["sbatch", str(path)], check=False).returncode
    except FileNotFoundError:
        raise TrainplanError(
            f"sbatch is not on PATH: run this on a Slurm login node (the script is at {path})"
        ) from None
