"""Launch a plan: render (pure: plan -> argv, environment, files, request), then submit.

    rendered = render("slurm", plan, LaunchOptions(plan_path="/fsx/plan.json"))
    print(rendered.text)            # exactly what submit() hands to sbatch
    code, message = submit(rendered)

Targets live in TARGETS, a plain dict; an unknown name is an error listing the known ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

from trainplan.errors import TrainplanError, unknown
from trainplan.launch import k8s, local, sagemaker, slurm
from trainplan.launch.base import LaunchOptions, Rendered


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    help: str
    render: Callable[..., Rendered]


TARGETS: dict[str, Target] = {
    "local": Target("local", "torchrun on this machine (one node, or one of several)", local.render),
    "sagemaker": Target("sagemaker", "SageMaker AI training job (SDK v3 ModelTrainer)", sagemaker.render),
    "slurm": Target("slurm", "sbatch script for Slurm / SageMaker HyperPod", slurm.render),
    "k8s": Target("k8s", "Kubeflow PyTorchJob manifest for Kubernetes (EKS)", k8s.render),
}


def find_target(name: str) -> Target:
    if name not in TARGETS:
        raise unknown("launch target", name, TARGETS)
    return TARGETS[name]


def render(target: str, plan, options: LaunchOptions | None = None) -> Rendered:
    """Pure: the plan as the target will run it. Refuses control characters in any text option,
    which would break out of a script line or a #SBATCH directive."""
    t = find_target(target)
    options = options or LaunchOptions()
    for f in fields(options):
        values = getattr(options, f.name)
        for v in _texts(values):
            if any(ord(c) < 0x20 or ord(c) == 0x7F for c in v):
                raise TrainplanError(f"{f.name.replace('_', '-')} contains a control character: {v!r}")
    return t.render(plan, options)


def _texts(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, tuple):
        for v in value:
            yield from _texts(v)


def submit(rendered: Rendered, workdir: str | Path = ".") -> tuple[int, str]:
    """Side effects: start what `rendered` describes. Returns (exit code, one line for the user)."""
    if rendered.target == "local":
        code = local.submit(rendered)
        return code, f"torchrun exited with {code}"
    if rendered.target == "slurm":
        code = slurm.submit(rendered, workdir)
        return code, f"sbatch exited with {code}"
    if rendered.target == "k8s":
        code = k8s.submit(rendered)
        return code, f"kubectl exited with {code}"
    if rendered.target == "sagemaker":
        from trainplan.launch import sagemaker_sdk

        name = sagemaker_sdk.submit(rendered)
        return 0, f"started SageMaker training job {name} in {rendered.request['region']}"
    raise unknown("launch target", rendered.target, TARGETS)


__all__ = ["TARGETS", "LaunchOptions", "Rendered", "Target", "find_target", "render", "submit"]
