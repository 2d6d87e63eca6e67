"""What every launch target shares: the options a person gives and what a render produces.

A target renders a plan into a `Rendered` (pure: argv, environment, files, a request) and submits
it (side effects: a process, a cluster, the network). `--dry-run` prints the `Rendered` and stops.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from trainplan.errors import TrainplanError

# The trainer every target starts: torchrun runs this module on every node.
RUNTIME_MODULE = "trainplan.runtime"
DEFAULT_RDZV_PORT = 29500  # torchrun's documented default master port
PROBE_FILE = "machine.json"  # what `launch --probe` jobs write in their output directory (rank 0)


@dataclass(frozen=True, slots=True)
class LaunchOptions:
    """What every target takes beyond the plan. Each target extends it with its own options
    (local.LocalOptions, sagemaker.SageMakerOptions, ...); a plain LaunchOptions given to a target
    is widened to the target's kind with its defaults."""

    plan_path: str = "plan.json"  # where the plan is, as the nodes will see it
    job_name: str = ""  # "" = derived from the model name
    steps: int | None = None  # override the plan's train.steps
    out_dir: str = ""  # where the runtime writes measurements; "" = target default
    checkpoint_dir: str = ""  # "" = target default
    data: tuple[str, ...] = ()  # training data as the nodes see it; () = the plan's
    probe: bool = False  # run `trainplan probe --quick` (a machine profile) instead of the trainer


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
    extra: dict = field(default_factory=dict)  # what a target's check adds (sagemaker: create_training_job)

    def to_dict(self) -> dict:
        return {
            "target": self.target,
            "argv": list(self.argv),
            "env": dict(self.env),
            "env_sources": dict(self.env_sources),
            "files": dict(self.files),
            "request": self.request,
            "notes": list(self.notes),
            **self.extra,
        }


@dataclass(frozen=True, slots=True)
class Target:
    """A launch target: its options, its command-line arguments, render (pure) and submit.

    add_arguments(group) adds the target's own flags to `trainplan launch`; from_args(args, common)
    builds its options from them (`common`: the LaunchOptions fields every target shares);
    check(rendered) runs before a dry run prints and before a submit (sagemaker: the SDK builds
    the request offline); submit(rendered, workdir) -> (exit code, one line for the user).
    """

    name: str
    help: str
    options: type  # a LaunchOptions subclass
    add_arguments: Callable
    from_args: Callable
    render: Callable[..., Rendered]
    submit: Callable[..., tuple[int, str]]
    check: Callable[[Rendered], Rendered] = lambda rendered: rendered
    preflight: Callable[[], None] = lambda: None  # before the plan is read (sagemaker: the SDK is there)
    # the ranks run on this machine (local): `launch` checks their inputs and this machine's memory
    # here before they start (commands/launch.py check_local_run)
    runs_here: bool = False


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


def node_paths(data: tuple[str, ...], target: str) -> tuple[str, ...]:
    """Training data for targets whose nodes read files: paths, not S3 URIs (only SageMaker
    mounts S3 prefixes, as input channels)."""
    for d in data:
        if d.startswith("s3://") or "=s3://" in d:
            raise TrainplanError(
                f"--data {d}: S3 data is mounted by SageMaker only (launch sagemaker); for launch {target} "
                "give a path every node sees"
            )
    return data
