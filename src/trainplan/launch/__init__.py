"""Launch a plan: render (pure: plan -> argv, environment, files, request), then submit.

    target = find_target("slurm")
    rendered = render("slurm", plan, SlurmOptions(plan_path="/fsx/plan.json"))
    print(rendered.text)            # exactly what submit() hands to sbatch
    code, message = target.submit(target.check(rendered), workdir)

Targets live in TARGETS, a plain dict of base.Target; each target module owns its options, its
command-line arguments, render and submit. An unknown name is an error listing the known ones.
A plan whose stack exports to a framework is run by that framework on sagemaker, slurm, k8s and
hyperpod-eks (framework.py: the exported files, the framework's image, entry and checkpoints).
"""

from __future__ import annotations

from dataclasses import fields

from trainplan.errors import TrainplanError, unknown
from trainplan.launch import hyperpod_eks, k8s, local, sagemaker, slurm
from trainplan.launch.base import LaunchOptions, Rendered, Target
from trainplan.supports import TRAINER_STACK, check_own_model, check_runnable

TARGETS: dict[str, Target] = {t.name: t for t in (local.TARGET, sagemaker.TARGET, slurm.TARGET, k8s.TARGET,
                                                  hyperpod_eks.TARGET)}


def find_target(name: str) -> Target:
    if name not in TARGETS:
        raise unknown("launch target", name, TARGETS)
    return TARGETS[name]


def render(target: str, plan, options: LaunchOptions | None = None) -> Rendered:
    """Pure: the plan as the target will run it. Refuses control characters in any text option,
    which would break out of a script line or a #SBATCH directive."""
    t = find_target(target)
    options = _widen(options or LaunchOptions(), t)
    if plan.layout.stack == TRAINER_STACK:  # a plan its runtime cannot run is refused here
        check_runnable(plan.layout, getattr(options, "device", "cuda"), plan.job.model)  # remote targets: GPUs
        check_own_model(plan.job.model)  # launched ranks build trainplan's own model (no --hf)
    for f in fields(options):
        for v in _texts(getattr(options, f.name)):
            if any(ord(c) < 0x20 or ord(c) == 0x7F for c in v):
                raise TrainplanError(f"{f.name.replace('_', '-')} contains a control character: {v!r}")
    return t.render(plan, options)


def _widen(options: LaunchOptions, t: Target) -> LaunchOptions:
    """The shared options given to a target become its own kind, with its defaults for the rest."""
    if isinstance(options, t.options):
        return options
    if type(options) is not LaunchOptions:
        raise TypeError(f"{type(options).__name__} given to launch target {t.name!r}; it takes {t.options.__name__}")
    return t.options(**{f.name: getattr(options, f.name) for f in fields(LaunchOptions)})


def _texts(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, tuple):
        for v in value:
            yield from _texts(v)


__all__ = ["TARGETS", "LaunchOptions", "Rendered", "Target", "find_target", "render"]
