"""A plan run on the framework its stack exports to (issue #22 item 4), as every target needs it.

`framework_run(plan)` is None for trainplan's own trainer (the targets keep their trainer path) and
otherwise holds what the exporter wrote (`export(plan) -> {file: text}`) and the framework's launch
facts from frameworks.toml: the default image, the source checkout the entry needs, what torchrun
runs, where the framework saves and loads checkpoints, how it stops. Targets choose where the files
go (SageMaker: the source dir; Slurm: beside the sbatch script; k8s / HyperPod EKS: a ConfigMap) and
where checkpoints live (/opt/ml/checkpoints, the shared file system, the PVC), then ask `entry()` for
the command line. A stack with no exporter that is not trainplan's is refused in one line.
"""

from __future__ import annotations

import functools
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from trainplan.errors import TrainplanError
from trainplan.parsing import read_toml
from trainplan.supports import TRAINER_STACK


@functools.cache
def data() -> dict:
    return read_toml(Path(__file__).with_name("frameworks.toml"))


@dataclass(frozen=True)
class FrameworkRun:
    framework: str  # the exporter's FRAMEWORK
    release: str  # the exporter's RELEASE
    files: dict[str, str] = field(repr=False)  # the exported configuration: name -> text
    spec: dict  # frameworks.toml [framework]
    layout: object  # the plan's Layout (what some settings depend on: env_unless)

    @property
    def label(self) -> str:
        return f"{self.framework} {self.release}"

    def image(self, given: str = "") -> str:
        return given or self.spec["image"]

    def entry(self, files_dir: str, checkpoint_dir: str, out_dir: str, data: tuple[str, ...] = (),
              steps: int | None = None) -> list[str]:
        """What torchrun runs after its own flags: the framework's entry, the exported arguments,
        then its launch arguments (checkpoint and output directories filled in; --data and --steps
        replace what the export says)."""
        fill = {"files": files_dir, "checkpoint_dir": checkpoint_dir, "out_dir": out_dir}
        head = (["-m", self.spec["entry_module"]] if "entry_module" in self.spec else [self.spec["entry_script"]])
        exported = self.exported_args()
        if len(data) > 1 and self.spec.get("data_one"):
            raise TrainplanError(f"--data: {self.label} reads one dataset path ({self.spec['data_arg']}), got {len(data)}")
        if data:
            exported = _without(exported, self.spec.get("replaces", ())) + [self.spec["data_arg"], *data]
        if steps is not None:
            exported = _without(exported, (self.spec["steps_arg"],)) + [self.spec["steps_arg"], str(steps)]
        return head + exported + [a.format(**fill) for a in self.spec["args"]]

    def exported_args(self) -> list[str]:
        """The exporter's argument file as argv (one `--flag value...` per line, `#` comments), or []
        when the framework reads its configuration from a file (torchtitan's config module)."""
        name = self.spec.get("args_file")
        if name is None:
            return []
        out = []
        for line in self.files[name].splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                out += line.split()
        return out

    def env(self, files_dir: str) -> tuple[dict[str, str], dict[str, str]]:
        """(environment, source per variable) the framework's processes need."""
        skip = any(getattr(self.layout, k) == v for k, v in self.spec.get("env_unless", {}).items())
        env = {} if skip else dict(self.spec.get("env", {}))
        why = {k: self.spec.get("env_source", self.label) for k in env}
        if "pythonpath" in self.spec:
            env["PYTHONPATH"] = self.spec["pythonpath"].format(files=files_dir)
            why["PYTHONPATH"] = f"the exported configuration module is imported by name ({self.label})"
        if "checkout_env" in self.spec:
            env[self.spec["checkout_env"]] = self.spec["checkout"]
            why[self.spec["checkout_env"]] = self.spec["checkout_source"]
        return env, why

    def setup(self, *, install: bool) -> list[str]:
        """Shell commands run on each node before torchrun (under `set -e`): the checkout the entry
        needs when the image lacks it, and (install) the framework's pip install."""
        steps = []
        if "checkout_env" in self.spec:
            var = self.spec["checkout_env"]
            steps.append(f'[ -d "${var}" ] || {self.spec["clone"]} "${var}"')
        if install and "setup" in self.spec:
            steps.append(self.spec["setup"])
        return steps

    def requirements(self) -> str:
        return "".join(f"{r}\n" for r in self.spec.get("requirements", ()))

    def notes(self, image_note: bool) -> list[str]:
        out = [f"{self.label}: {self.spec['stop']}"]
        if image_note:
            out.append(f"image {self.spec['image']}: {_one_line(self.spec['image_source'])}; --image to change it")
        if "checkout_env" in self.spec:
            out.append(f"${self.spec['checkout_env']} ({self.spec['checkout']}) is cloned at start when the image "
                       "lacks it: the nodes need git and access to github.com, or an image with the checkout there")
        return out


def framework_run(plan) -> FrameworkRun | None:
    """None for trainplan's own trainer; else the plan exported for its stack's framework (its first
    export target, export.stack_exporters), which launch/frameworks.toml must say how to start."""
    from trainplan.export import exporter, stack_exporters
    from trainplan.stacks import stacks

    stack = plan.layout.stack
    if stack == TRAINER_STACK:
        return None
    launchable = [s for s in stacks() if s != TRAINER_STACK and stack_exporters(s) and stack_exporters(s)[0] in data()]
    targets = stack_exporters(stack)
    if not targets or targets[0] not in data():
        exported = f" (it exports: trainplan export --to {' or --to '.join(targets)})" if targets else ""
        raise TrainplanError(f"launch: trainplan cannot start a plan for stack {stack} yet{exported}; launch runs "
                             f"the stacks {TRAINER_STACK} (its own trainer), {', '.join(launchable)}: re-plan with "
                             "--stack one of them")
    module = exporter(targets[0])
    spec = data()[targets[0]]
    return FrameworkRun(module.FRAMEWORK, module.RELEASE, module.export(plan), spec, plan.layout)


def _without(argv: list[str], flags) -> list[str]:
    """argv with each flag in `flags` and its values (the words up to the next --flag) removed."""
    out, skipping = [], False
    for a in argv:
        if a.startswith("--"):
            skipping = a in flags
        if not skipping:
            out.append(a)
    return out


def shell_line(argv: list[str], keep_vars: bool = True) -> str:
    """argv as one shell line; words holding $VAR stay double-quoted so the node expands them."""
    return " ".join(f'"{a}"' if keep_vars and "$" in a and '"' not in a else shlex.quote(a) for a in argv)


def _one_line(text: str) -> str:
    return " ".join(text.split())
