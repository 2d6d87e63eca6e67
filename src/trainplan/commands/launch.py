"""`trainplan launch TARGET --plan plan.json`: run a plan with torchrun, on SageMaker, Slurm or Kubernetes."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

NAME = "launch"
HELP = "Launch a plan: local torchrun, SageMaker AI, Slurm/HyperPod or Kubernetes (--dry-run shows it)."

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


def _pair(sep: str, what: str, number: bool = False):
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


def add_arguments(p: argparse.ArgumentParser) -> None:
    from trainplan.commands._common import positive_int

    p.add_argument("target", metavar="TARGET", help="local, sagemaker, slurm or k8s")
    p.add_argument("--plan", required=True, help="plan.json written by `trainplan plan --out`")
    p.add_argument("--dry-run", action="store_true", help="print exactly what would be submitted, submit nothing")
    p.add_argument("--json", action="store_true", help="with --dry-run: everything as JSON")
    p.add_argument("--job-name", default="", help="job name (default: trainplan-<model>)")
    p.add_argument("--steps", type=positive_int, help="optimizer steps (default: the plan's train.steps)")
    p.add_argument("--out", default="", help="where the trainer writes its measurements")
    p.add_argument("--checkpoint-dir", default="", help="checkpoint directory on the nodes")
    g = p.add_argument_group("local")
    g.add_argument("--nnodes", type=positive_int, help="nodes (default: the plan's)")
    g.add_argument("--node-rank", type=int, default=0, help="this node's rank (multi-node)")
    g.add_argument("--nproc-per-node", type=positive_int, help="processes per node (default: GPUs per node)")
    g.add_argument("--rdzv-endpoint", default="", help="HOST:PORT of the first node (multi-node c10d rendezvous)")
    g.add_argument("--rdzv-id", default="", help="rendezvous id shared by all nodes (default: the job name)")
    g.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="auto: GPUs when nvidia-smi sees some, else CPU with gloo")
    g.add_argument("--fit-world", action="store_true",
                   help="the trainer rescales the plan's data-parallel degree to the processes started")
    g = p.add_argument_group("sagemaker")
    g.add_argument("--role", default=os.environ.get("SAGEMAKER_ROLE", ""),
                   help="execution role ARN (default: $SAGEMAKER_ROLE)")
    g.add_argument("--region", default=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION", ""),
                   help="AWS region (default: $AWS_REGION, $AWS_DEFAULT_REGION)")
    g.add_argument("--bucket", default=os.environ.get("SAGEMAKER_BUCKET", ""),
                   help="S3 bucket for code, checkpoints and output (default: $SAGEMAKER_BUCKET)")
    g.add_argument("--checkpoint-s3", default="", help="checkpoint S3 URI (synced with /opt/ml/checkpoints)")
    g.add_argument("--output-s3", default="", help="output S3 URI")
    g.add_argument("--image", default="", help="training image (sagemaker: default PyTorch DLC; k8s: required)")
    g.add_argument("--max-runtime", type=duration, default=24 * 3600, help="maximum run time (default 24h)")
    g.add_argument("--spot", action="store_true", help="managed spot training (checkpoints are synced to S3)")
    g.add_argument("--max-wait", type=duration, help="spot: maximum wait + run time (default 2 x --max-runtime)")
    g.add_argument("--keep-alive", type=duration, default=0, help="warm pool keep-alive after the job")
    g.add_argument("--volume-gib", type=positive_int, default=500, help="EBS volume per instance (no-NVMe instances)")
    g.add_argument("--tag", action="append", type=_pair("=", "KEY=VALUE"), default=[], help="KEY=VALUE, repeatable")
    g.add_argument("--ultraserver", action="append", type=_pair(":", "ULTRASERVER_ID:COUNT", number=True),
                   default=[], help="UltraServer placement ID:COUNT (p6e-gb200), repeatable")
    g.add_argument("--training-plan", default="", help="SageMaker training plan ARN (reserved capacity)")
    g = p.add_argument_group("slurm")
    g.add_argument("--partition", default="")
    g.add_argument("--account", default="")
    g.add_argument("--time", default="", help="sbatch --time limit, e.g. 2-00:00:00")
    g.add_argument("--venv", default="", help="virtual environment to activate on every node")
    g.add_argument("--auto-resume", action="store_true",
                   help="SageMaker HyperPod: replace a faulty node and restart from the last checkpoint")
    g = p.add_argument_group("k8s")
    g.add_argument("--namespace", default="default")
    g.add_argument("--efa-devices", type=positive_int, help="EFA devices per pod (default: the instance's)")


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


def options_from_args(args):
    from trainplan.launch import LaunchOptions

    plan_path = args.plan if args.target == "local" else str(Path(args.plan).resolve())
    return LaunchOptions(
        plan_path=plan_path, job_name=args.job_name, steps=args.steps, out_dir=args.out,
        checkpoint_dir=args.checkpoint_dir, nnodes=args.nnodes, node_rank=args.node_rank,
        nproc_per_node=args.nproc_per_node, rdzv_endpoint=args.rdzv_endpoint, rdzv_id=args.rdzv_id,
        device=_device(args.device) if args.target == "local" else "cuda", fit_world=args.fit_world,
        role=args.role, region=args.region, bucket=args.bucket, checkpoint_s3=args.checkpoint_s3,
        output_s3=args.output_s3, image=args.image, max_runtime_s=args.max_runtime, spot=args.spot,
        max_wait_s=args.max_wait, keep_alive_s=args.keep_alive, volume_gib=args.volume_gib,
        tags=tuple(args.tag), ultraserver=tuple(args.ultraserver), training_plan_arn=args.training_plan,
        partition=args.partition, account=args.account, time_limit=args.time, venv=args.venv,
        auto_resume=args.auto_resume,
        namespace=args.namespace, efa_devices=args.efa_devices,
    )


def run(args) -> int:
    from trainplan.commands._common import print_json
    from trainplan.launch import find_target, render, submit
    from trainplan.plan import load_plan

    find_target(args.target)  # an unknown target is refused before the plan is read
    if args.target == "sagemaker":
        from trainplan.launch.sagemaker_sdk import require_sdk

        require_sdk()
    plan = load_plan(args.plan)
    rendered = render(args.target, plan, options_from_args(args))
    api_request = None
    if args.target == "sagemaker":
        # Built by the SDK itself, offline, and checked against the API schema: before a real
        # submit too, so a request the API would refuse is never sent.
        from trainplan.launch.sagemaker_sdk import capture_request

        api_request = capture_request(rendered)
    if args.dry_run:
        if args.json:
            out = rendered.to_dict()
            if api_request is not None:
                out["create_training_job"] = api_request
            print_json(out)
        else:
            if args.target == "sagemaker":
                print_json({"model_trainer": rendered.request, "create_training_job": api_request})
            else:
                sys.stdout.write(rendered.text)
            for note in rendered.notes:
                print(f"note: {note}", file=sys.stderr)
        return 0
    for note in rendered.notes:
        print(f"note: {note}", file=sys.stderr)
    code, message = submit(rendered, Path(args.plan).resolve().parent)
    print(message, file=sys.stderr if code else sys.stdout)
    return code
