"""Target `slurm`: an sbatch script for a Slurm cluster or a SageMaker HyperPod (Slurm) cluster.

srun starts one torchrun per node; they meet at a c10d rendezvous on the first node of the
allocation (`scontrol show hostnames`, looked up by each step). User-supplied strings reach the
script only as shell-quoted `export` values; the srun step reads them as "$VARIABLES". The plan,
the output and the checkpoint directory must be on a file system every node sees (FSx for Lustre
on HyperPod).

Stopping early without losing work: `#SBATCH --signal=USR1@<lead>` makes Slurm send SIGUSR1 to the
job steps <lead> seconds before the time limit (https://slurm.schedmd.com/sbatch.html#OPT_signal;
"may be sent up to 60 seconds earlier"). The step's task is torchrun, told to pass SIGUSR1 on to
its ranks (`--signals-to-handle`, torch >= 2.9) and to give them <lead> seconds before SIGKILL
(TORCH_ELASTIC_SHUTDOWN_TIMEOUT, torch >= 2.11); the trainer saves a checkpoint on SIGUSR1 and
exits. scancel and preemption send SIGTERM, which torchrun passes on the same way.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

from trainplan.errors import TrainplanError
from trainplan.launch.base import (
    DEFAULT_RDZV_PORT,
    PROBE_FILE,
    LaunchOptions,
    Rendered,
    Target,
    job_name,
    node_paths,
)
from trainplan.launch.env import network_env
from trainplan.launch.framework import FrameworkRun, framework_run, shell_line
from trainplan.launch.template import fill, load

NAME = "slurm"
SCRIPT = "trainplan.sbatch"
NODE_SCRIPT = "trainplan_node.sh"  # a plan on a framework's stack: what each node's container runs
WARN_SIGNAL = "USR1"  # the trainer saves a checkpoint and exits on it (runtime/trainer.py)
# torchrun's default signals (torch/distributed/run.py --signals-to-handle) plus the early warning.
TORCHRUN_SIGNALS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1"


@dataclass(frozen=True, slots=True)
class SlurmOptions(LaunchOptions):
    partition: str = ""
    account: str = ""
    time_limit: str = ""  # sbatch --time, e.g. "2-00:00:00"
    venv: str = ""  # a virtual environment to activate on every node
    auto_resume: bool = False  # SageMaker HyperPod: srun --auto-resume=1
    warn_s: int = 120  # SIGUSR1 this long before the time limit: the trainer saves and exits
    image: str = ""  # a plan on a framework's stack: its container image; "" = frameworks.toml's


# sbatch --time's formats (https://slurm.schedmd.com/sbatch.html#OPT_time): "minutes",
# "minutes:seconds", "hours:minutes:seconds", "days-hours", "days-hours:minutes",
# "days-hours:minutes:seconds"; 0 asks for no limit. The first field is unbounded, the ones after
# it are clock fields (hours < 24, minutes and seconds < 60).
_SLURM_TIME = (
    (re.compile(r"([0-9]+)"), (60,)),
    (re.compile(r"([0-9]+):([0-9]+)"), (60, 1)),
    (re.compile(r"([0-9]+):([0-9]+):([0-9]+)"), (3600, 60, 1)),
    (re.compile(r"([0-9]+)-([0-9]+)"), (86400, 3600)),
    (re.compile(r"([0-9]+)-([0-9]+):([0-9]+)"), (86400, 3600, 60)),
    (re.compile(r"([0-9]+)-([0-9]+):([0-9]+):([0-9]+)"), (86400, 3600, 60, 1)),
)
_CLOCK = {3600: 24, 60: 60, 1: 60}  # a field after the first, in seconds per unit -> its bound


def slurm_time(text: str) -> str:
    """argparse type: an sbatch --time limit in one of Slurm's formats, returned as given."""
    t = text.strip()
    for pattern, units in _SLURM_TIME:
        if m := pattern.fullmatch(t):
            values = [int(v) for v in m.groups()]
            for v, unit in zip(values[1:], units[1:]):
                if v >= _CLOCK[unit]:
                    raise argparse.ArgumentTypeError(
                        f"{text!r}: {v} is out of range for its field (hours < 24, minutes and seconds < 60)")
            return t
    raise argparse.ArgumentTypeError(
        f"expected an sbatch time limit: minutes, minutes:seconds, hours:minutes:seconds, days-hours, "
        f"days-hours:minutes or days-hours:minutes:seconds (e.g. 2-00:00:00), got {text!r}")


def time_limit_s(text: str) -> int:
    """Seconds of a limit slurm_time accepted (0: no limit)."""
    for pattern, units in _SLURM_TIME:
        if m := pattern.fullmatch(text):
            return sum(int(v) * u for v, u in zip(m.groups(), units))
    raise ValueError(text)


def add_arguments(a) -> None:
    a.add("--partition", default="")
    a.add("--account", default="")
    a.add("--time", type=slurm_time, default=None, help="sbatch --time limit, e.g. 2-00:00:00")
    a.add("--venv", default="", help="virtual environment to activate on every node")
    a.add("--auto-resume", action="store_true",
          help="SageMaker HyperPod: replace a faulty node and restart from the last checkpoint")
    a.add("--warn-before", type=a.duration, default=120,
          help="SIGUSR1 to the ranks this long before the time limit, to save and stop (default 120s)")
    a.add("--image", default="", help="a plan on a framework's stack: the container image every node runs "
                                      "(pyxis; default: the framework's, launch/frameworks.toml)")


def from_args(args, common: dict) -> SlurmOptions:
    if args.time and 0 < time_limit_s(args.time) <= args.warn_before:
        raise TrainplanError(f"--time {args.time} ({time_limit_s(args.time)} s) leaves no time to train before "
                             f"the SIGUSR1 --warn-before {args.warn_before} s: give a longer --time or a shorter "
                             "--warn-before")
    return SlurmOptions(**common, partition=args.partition, account=args.account, time_limit=args.time or "",
                        venv=args.venv, auto_resume=args.auto_resume, warn_s=args.warn_before, image=args.image)


def render(plan, options: SlurmOptions) -> Rendered:
    fw = None if options.probe else framework_run(plan)
    if fw is not None:
        return _render_framework(plan, options, fw)
    node, nodes = plan.job.cluster.node, plan.job.cluster.nodes
    name = job_name(plan, options)
    env, why = network_env(node)
    env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] = str(options.warn_s)
    why["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] = (
        "seconds torchrun gives the ranks to save after SIGUSR1/SIGTERM before SIGKILL (default 30; "
        "torch >= 2.11, torch/distributed/launcher/api.py): the --warn-before lead")
    q = shlex.quote
    extra = [f"#SBATCH --gpus-per-node={node.gpus_per_node}",
             f"#SBATCH --signal={WARN_SIGNAL}@{options.warn_s}"]
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
        "entry": _entry(options, node.name),
        "data_export": f"export DATA={q(','.join(node_paths(options.data, NAME)))}\n" if options.data else "",
        "signals": TORCHRUN_SIGNALS,
        "warn_s": str(options.warn_s),
        # HyperPod's auto-resume: on a hardware fault it replaces the node and starts the step
        # again (https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-resiliency-slurm-auto-resume.html);
        # the trainer resumes from the newest checkpoint in --checkpoint-dir.
        "srun_extra": " --auto-resume=1" if options.auto_resume else "",
    })
    notes = [f"{options.plan_path}, {out_dir} and {ckpt} must be on a file system every node sees"]
    if options.image:
        notes.append("--image is not used: trainplan's own trainer runs in --venv (or the nodes' Python)")
    if options.probe:
        notes.append(f"probe: rank 0 writes the machine profile to {out_dir}/{PROBE_FILE}; use it with --machine")
    return Rendered(target=NAME, argv=("sbatch", SCRIPT), env=env, env_sources=why,
                    files={SCRIPT: script}, text=script, notes=tuple(notes))


def _render_framework(plan, options: SlurmOptions, fw: FrameworkRun) -> Rendered:
    """The plan on its framework (launch/framework.py): an sbatch script that starts the framework's
    image on every node (pyxis), NODE_SCRIPT there (setup, then torchrun with the framework's entry
    and arguments), and the exported files, all written beside the plan."""
    node, nodes = plan.job.cluster.node, plan.job.cluster.nodes
    name = job_name(plan, options)
    q = shlex.quote
    job_dir = str(Path(options.plan_path).parent)
    out_dir = options.out_dir or f"{job_dir}/trainplan-out/$SLURM_JOB_ID"
    ckpt = options.checkpoint_dir or f"{job_dir}/checkpoints/{name}"
    env, why = network_env(node)
    fw_env, fw_why = fw.env(job_dir)
    env, why = env | fw_env, why | fw_why
    env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] = str(options.warn_s)
    why["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] = ("seconds torchrun gives the ranks to save after SIGTERM before SIGKILL "
                                             "(default 30; torch >= 2.11): the --warn-before lead")
    extra = [f"#SBATCH --gpus-per-node={node.gpus_per_node}"]
    warn = fw.spec.get("warn_signal")
    if warn:  # the framework saves on this signal: Slurm sends it this long before the time limit
        extra.append(f"#SBATCH --signal={warn}@{options.warn_s}")
    for flag, value in (("partition", options.partition), ("account", options.account), ("time", options.time_limit)):
        if value:
            extra.append(f"#SBATCH --{flag}={q(value)}")
    data = node_paths(options.data, NAME)
    entry = fw.entry(job_dir, "$CHECKPOINT_DIR", "$OUT_DIR", data=tuple(data), steps=options.steps)
    setup = fw.setup(install=True)
    node_script = fill(load("framework_node.sh.tmpl"), {
        "created_by": plan.created_by, "framework": fw.label, "nodes": str(nodes), "nproc": str(node.gpus_per_node),
        "setup": "".join(f"{step}\n" for step in setup), "entry": wrapped(entry)})
    script = fill(load("sbatch_framework.sh.tmpl"), {
        "created_by": plan.created_by,
        "summary": _one_line(f"{plan.job.model.name} on {nodes} x {node.name}: {plan.layout.short()}"),
        "framework": fw.label,
        "job_name": q(name),
        "nodes": str(nodes),
        "log_pattern": q(f"{name}-%j.out"),
        "sbatch_extra": "".join(f"{line}\n" for line in extra),
        "exports": "\n".join(f"export {k}={q(v)}" for k, v in env.items()),
        "node_script": NODE_SCRIPT,
        "job_dir": q(job_dir),
        "out_dir": q(options.out_dir) if options.out_dir else f'{q(job_dir)}"/trainplan-out/$SLURM_JOB_ID"',
        "checkpoint_dir": q(ckpt),
        "rdzv_port": str(DEFAULT_RDZV_PORT),
        "data_export": "",
        "signal_note": f", and SIG{warn} {options.warn_s} s before the time limit" if warn else "",
        "image": q(pyxis_image(fw.image(options.image))),
        "srun_extra": " --auto-resume=1" if options.auto_resume else "",
    })
    files = {SCRIPT: script, NODE_SCRIPT: node_script, **fw.files}
    notes = [f"{job_dir}, {out_dir} and {ckpt} must be on a file system every node sees",
             *fw.notes(image_note=not options.image)]
    if options.venv:
        notes.append("--venv is not used: the framework runs in its image (--image)")
    text = script + "".join(f"\n# ---- {n} (written beside the script) ----\n{t}" for n, t in files.items() if n != SCRIPT)
    return Rendered(target=NAME, argv=("sbatch", SCRIPT), env=env, env_sources=why, files=files, text=text,
                    notes=tuple(notes))


def pyxis_image(ref: str) -> str:
    """An image reference as pyxis takes it, `[REGISTRY#]IMAGE[:TAG]` (https://github.com/NVIDIA/pyxis
    README, srun --container-image): a registry host (it has a '.' or ':') is set off by '#'."""
    first, sep, rest = ref.partition("/")
    return f"{first}#{rest}" if sep and ("." in first or ":" in first) and "#" not in ref else ref


def wrapped(argv: list[str]) -> str:
    """argv as shell words, a new line before each --flag (kept readable in the script)."""
    words = shell_line(argv).split(" ")
    return "".join((" \\\n    " if w.startswith("--") and i else " " if i else "") + w for i, w in enumerate(words))


def _entry(options: SlurmOptions, instance: str) -> str:
    """What torchrun runs in the script: the trainer, or with --probe the microbenchmarks."""
    if options.probe:
        # double quotes: the script's variables expand inside bash -c '...'
        return f'-m trainplan probe --quick --out "$OUT_DIR/{PROBE_FILE}" --instance {instance}'
    steps = f" --steps {options.steps}" if options.steps is not None else ""
    data = ' --data "$DATA"' if options.data else ""
    return f'-m trainplan.runtime --plan "$PLAN" --out "$OUT_DIR" --checkpoint-dir "$CHECKPOINT_DIR"{steps}{data}'


def _one_line(text: str) -> str:
    return " ".join(text.split())


def submit(rendered: Rendered, workdir: str | Path = ".") -> tuple[int, str]:
    """Write the script (and a framework's files) next to the plan and hand it to sbatch."""
    from trainplan.fileio import write_atomic

    path = Path(workdir) / SCRIPT
    for name, text in rendered.files.items():  # a framework's node script and exported files go beside it
        write_atomic(Path(workdir) / name, text)
    try:
        code = subprocess.run(["sbatch", str(path)], check=False).returncode
    except FileNotFoundError:
        raise TrainplanError(
            f"sbatch is not on PATH: run this on a Slurm login node (the script is at {path})"
        ) from None
    return code, f"sbatch exited with {code}"


TARGET = Target(NAME, "sbatch script for Slurm / SageMaker HyperPod", SlurmOptions, add_arguments, from_args,
                render, submit)
