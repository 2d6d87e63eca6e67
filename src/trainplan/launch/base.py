"""What every launch target shares: the options a person gives and what a render produces.

A target renders a plan into a `Rendered` (pure: argv, environment, files, a request) and submits
it (side effects: a process, a cluster, the network). `--dry-run` prints the `Rendered` and stops.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from trainplan.errors import TrainplanError

# The trainer every target starts: torchrun runs this module on every node.
RUNTIME_MODULE = "trainplan.runtime"
DEFAULT_RDZV_PORT = 29500  # torchrun's documented default master port


@dataclass(frozen=True, slots=True)
class LaunchOptions:
    """Everything a launch needs beyond the plan. Fields unused by a target are ignored by it."""

    plan_path: str = "plan.json"  # where the plan is, as the nodes will see it
    job_name: str = ""  # "" = derived from the model name
    steps: int | None = None  # override the plan's train.steps
    out_dir: str = ""  # where the runtime writes measurements; "" = target default
    checkpoint_dir: str = ""  # "" = target default
    # local
    nnodes: int | None = None  # None = the plan's node count
    node_rank: int = 0
    nproc_per_node: int | None = None  # None = the plan's GPUs per node
    rdzv_endpoint: str = ""  # host:port of the c10d rendezvous; "" = single node (standalone)
    rdzv_id: str = ""
    device: str = "cuda"  # "cuda" | "cpu" (gloo): the command detects it for this machine
    fit_world: bool = False  # the runtime rescales dp_shard to the processes started (demos)
    # sagemaker
    role: str = ""
    region: str = ""
    bucket: str = ""
    checkpoint_s3: str = ""  # "" = s3://<bucket>/trainplan/<job>/checkpoints
    output_s3: str = ""  # "" = s3://<bucket>/trainplan/<job>/output
    image: str = ""  # training image URI; "" = the PyTorch DLC for the region
    max_runtime_s: int = 24 * 3600
    spot: bool = False
    max_wait_s: int | None = None  # spot only; None = 2 x max_runtime_s
    keep_alive_s: int = 0  # warm pool keep-alive
    volume_gib: int = 500
    tags: tuple[tuple[str, str], ...] = ()
    ultraserver: tuple[tuple[str, int], ...] = ()  # (UltraServer id, instances on it)
    training_plan_arn: str = ""
    # slurm / k8s
    partition: str = ""
    account: str = ""
    time_limit: str = ""  # sbatch --time, e.g. "2-00:00:00"
    container_image: str = ""  # k8s image (required there); slurm: pyxis --container-image
    namespace: str = "default"
    efa_devices: int | None = None  # k8s: EFA devices per pod; None = the instance's count
    venv: str = ""  # slurm: a virtual environment to activate on every node
    auto_resume: bool = False  # slurm on SageMaker HyperPod: srun --auto-resume=1


@dataclass(frozen=True, slots=True)
class Rendered:
    """The pure result of rendering a plan for a target: exactly what `submit` will use."""

    target: str
    argv: tuple[str, ...] = ()  # the command a node runs (local: the whole launch)
    env: dict[str, str] = field(default_factory=dict)  # environment set for the trainer
    env_sources: dict[str, str] = field(default_factory=dict)  # variable -> why / citation
    files: dict[str, str] = field(default_factory=dict)  # name -> text, written or shipped
    request: dict | None = None  # sagemaker: ModelTrainer config; k8s: the manifest
    text: str = ""  # what --dry-run prints without --json (script, manifest, command line)
    notes: tuple[str, ...] = ()  # caveats a person should read before submitting

    def to_dict(self) -> dict:
        return {
            "target": self.target,
            "argv": list(self.argv),
            "env": dict(self.env),
            "env_sources": dict(self.env_sources),
            "files": dict(self.files),
            "request": self.request,
            "notes": list(self.notes),
        }


_JOB_NAME_OK = re.compile(r"[^a-zA-Z0-9-]+")


def job_name(plan, options: LaunchOptions, max_len: int = 63) -> str:
    """The job name given, or one derived from the model ('trainplan-llama-3-1-8b')."""
    if options.job_name:
        return options.job_name
    base = _JOB_NAME_OK.sub("-", f"trainplan-{plan.job.model.name}").strip("-").lower()
    return base[:max_len].rstrip("-")


def check_dns_name(name: str, what: str, max_len: int, flag: str = "--job-name") -> str:
    """Names that become cloud resource names must be DNS-like: say so instead of failing remotely."""
    if not re.fullmatch(r"[a-zA-Z0-9](-*[a-zA-Z0-9])*", name) or len(name) > max_len:
        raise TrainplanError(
            f"{what} {name!r} is not valid here: use letters, digits and '-' "
            f"(no leading or trailing '-'), at most {max_len} characters ({flag})"
        )
    return name
