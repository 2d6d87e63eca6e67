"""Target `sagemaker`: a SageMaker AI training job through the SageMaker Python SDK v3 (ModelTrainer).

`render` is pure and needs no SDK when --image is given: it returns the ModelTrainer configuration
as plain data (`Rendered.request`, field names as ModelTrainer and the configs of
`sagemaker.core.training.configs` spell them) and the files shipped as source code. `sagemaker_sdk`
turns that into SDK objects, captures the CreateTrainingJob request offline, and submits it.

What runs in the job, and why not the SDK's torchrun driver: the SDK starts the container as
`/bin/bash -c "chmod +x sm_train.sh && sm_train.sh"` (sagemaker 3.27 DEFAULT_CONTAINER_ENTRYPOINT /
_ARGUMENTS), so a bash is the container's first process; its driver then runs torchrun under a
Python parent that passes no signal on. SageMaker stops a job (StopTrainingJob, spot interruption)
with SIGTERM to the first process and SIGKILL 120 s later: through that chain the trainer never hears
it, and the job ends without a checkpoint. So the job runs a `command` instead: sm_train.sh (the
SDK's, unchanged: environment, requirements) ends with `eval "$CMD"`, and the command is
`exec python3 trainplan_entry.py`. bash execs the last command of a `bash -c` list itself
(bash >= 5.1; the DLCs have 5.1 or 5.2), so sm_train.sh runs as the first process, and `exec` puts
launch/sagemaker_entry.py in its place: it starts torchrun in its own session and passes SIGTERM
to it; torchrun passes it to the ranks, which save to /opt/ml/checkpoints (synced to S3) and exit.

Data: `--data s3://...` (channel "train") or `NAME=s3://...` become input channels; SageMaker
mounts each at /opt/ml/input/data/NAME and sets SM_CHANNEL_NAME, and the trainer reads
`--data channel:NAME` from there (runtime/data.py). The model is written uncompressed
(CompressionType NONE): gzip of hundreds of GB of weights is hours of billed time.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace

from trainplan.errors import TrainplanError
from trainplan.launch.base import (
    PROBE_FILE,
    LaunchOptions,
    Rendered,
    Target,
    check_dns_name,
    job_name,
)
from trainplan.launch.env import network_env
from trainplan.launch.framework import framework_run

NAME = "sagemaker"
SDK_EXTRA = "launch sagemaker needs the SageMaker Python SDK v3: pip install 'trainplan[sagemaker]'"

# Container paths of a ModelTrainer job (HARDWARE_FACTS.md section 4: SM_SOURCE_DIR, SM_MODEL_DIR,
# CheckpointConfig.LocalPath default; https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_CheckpointConfig.html).
CODE_DIR = "/opt/ml/input/data/code"
MODEL_DIR = "/opt/ml/model"
CHECKPOINT_DIR = "/opt/ml/checkpoints"
ENTRY = "trainplan_entry.py"
REQUIREMENTS = "requirements.txt"
# The SDK names a job <base_job_name>-<YYYYmmddHHMMSS> and cuts the whole to 63 characters
# (sagemaker 3.27 train/utils.py _get_unique_name): a base longer than 63 - 15 = 48 loses the
# suffix, or part of it, or ends the name in '-'.
JOB_NAME_MAX = 48
# SageMaker sends SIGTERM, then SIGKILL 120 s later (API_StopTrainingJob). torchrun gives the ranks
# 10 s less, so a rank stuck in a save is ended by torchrun, whose log says so, not by the platform.
SHUTDOWN_TIMEOUT_S = 110
# Channel names the SDK uses itself (sagemaker 3.27 constants SM_CODE, SM_DRIVERS).
RESERVED_CHANNELS = ("code", "sm_drivers")
# [SM-API] Channel.ChannelName allows [A-Za-z0-9.-_]{1,64}; the SDK exports SM_CHANNEL_<NAME> from a
# sourced shell file (container_drivers/scripts/environment.py), where '.' or '-' is no variable name.
_CHANNEL = re.compile(r"[A-Za-z0-9_]{1,64}")

# API limits ([SM-API] service-2.json shapes; HARDWARE_FACTS.md 3.2).
MAX_RUNTIME_S = 28 * 24 * 3600  # StoppingCondition.MaxRuntimeInSeconds: at most 28 days
MAX_KEEP_ALIVE_S = 21600  # ResourceConfig.KeepAlivePeriodInSeconds: 0..21600
MAX_PLACEMENTS = 10  # InstancePlacementConfig.PlacementSpecifications: at most 10

# The newest PyTorch training DLC in sagemaker 3.27's image_uris config (image_uri_config/pytorch.json).
DLC_FRAMEWORK, DLC_VERSION, DLC_PY = "pytorch", "2.10.0", "py313"

# sm_train.sh's last line is `eval "$CMD"`: exec makes the entry take the shell's place.
COMMAND = f"exec python3 {ENTRY}"
# A plan on a framework's stack (launch/framework.py): the entry's torchrun runs what this file says.
FRAMEWORK_ENTRY = "framework_entry.json"
CHANNEL_ROOT = "/opt/ml/input/data"  # SageMaker mounts input channel NAME at CHANNEL_ROOT/NAME
_ENTRY_SCRIPT = '''\
"""Rendered by trainplan: the job's first process after sm_train.sh (see trainplan/launch/sagemaker.py).

Reads the hyperparameters (SM_HPS) and the hosts (SM_HOST_COUNT, ...), runs torchrun with
trainplan.runtime on every GPU, and passes SIGTERM on so the trainer saves before it stops.
"""
import sys

from trainplan.launch.sagemaker_entry import main

sys.exit(main())
'''


@dataclass(frozen=True, slots=True)
class SageMakerOptions(LaunchOptions):
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
    placeholders: tuple[str, ...] = ()  # of role, region, bucket: filled with PLACEHOLDERS (dry run only)


# What a job cannot go without, and where a person gives it (the flags below, or the environment).
NEEDED = {"role": "an execution role (--role ARN or $SAGEMAKER_ROLE)",
          "region": "a region (--region or $AWS_REGION)",
          "bucket": "an S3 bucket for code, checkpoints and output (--bucket NAME or $SAGEMAKER_BUCKET)"}
# A dry run given none of them shows the whole job with these in their place and says so, in its
# output (the `placeholders` key, first) and in a note; a submit with any of them is refused.
# Account 000000000000 is no account; us-east-1 is a real region only so that the default image
# resolves; the bucket name says what it is.
PLACEHOLDERS = {"role": "arn:aws:iam::000000000000:role/PLACEHOLDER-pass-role",
                "region": "us-east-1",
                "bucket": "placeholder-pass-bucket"}


def add_arguments(a) -> None:
    import os

    a.add("--role", default=os.environ.get("SAGEMAKER_ROLE", ""),
          help="execution role ARN (default: $SAGEMAKER_ROLE)")
    a.add("--region", default=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION", ""),
          help="AWS region (default: $AWS_REGION, $AWS_DEFAULT_REGION)")
    a.add("--bucket", default=os.environ.get("SAGEMAKER_BUCKET", ""),
          help="S3 bucket for code, checkpoints and output (default: $SAGEMAKER_BUCKET)")
    a.add("--checkpoint-s3", default="", help="checkpoint S3 URI (synced with /opt/ml/checkpoints)")
    a.add("--output-s3", default="", help="output S3 URI")
    a.add("--image", default="", help="training image (default: the PyTorch DLC of the region)")
    a.add("--max-runtime", type=a.duration, default=24 * 3600, help="maximum run time (default 24h)")
    a.add("--spot", action="store_true", help="managed spot training (checkpoints are synced to S3)")
    a.add("--max-wait", type=a.duration, help="spot: maximum wait + run time (default 2 x --max-runtime)")
    a.add("--keep-alive", type=a.duration, default=0, help="warm pool keep-alive after the job")
    a.add("--volume-gib", type=a.positive_int, default=500, help="EBS volume per instance (no-NVMe instances)")
    a.add("--tag", action="append", type=a.pair("=", "KEY=VALUE"), default=[], help="KEY=VALUE, repeatable")
    a.add("--ultraserver", action="append", type=a.pair(":", "ULTRASERVER_ID:COUNT", number=True),
          default=[], help="UltraServer placement ID:COUNT (p6e-gb200), repeatable")
    a.add("--training-plan", default="", help="SageMaker training plan ARN (reserved capacity)")


def from_args(args, common: dict) -> SageMakerOptions:
    options = SageMakerOptions(
        **common, role=args.role, region=args.region, bucket=args.bucket, checkpoint_s3=args.checkpoint_s3,
        output_s3=args.output_s3, image=args.image, max_runtime_s=args.max_runtime, spot=args.spot,
        max_wait_s=args.max_wait, keep_alive_s=args.keep_alive, volume_gib=args.volume_gib,
        tags=tuple(args.tag), ultraserver=tuple(args.ultraserver), training_plan_arn=args.training_plan)
    return with_placeholders(options) if args.dry_run else options


def missing(options: SageMakerOptions) -> list[str]:
    """Which of role, region and bucket the job lacks (no bucket is needed when both S3 URIs are given)."""
    out = [k for k in ("role", "region") if not getattr(options, k)]
    return out + (["bucket"] if not options.bucket and not (options.output_s3 and options.checkpoint_s3) else [])


def with_placeholders(options: SageMakerOptions) -> SageMakerOptions:
    """For a dry run: PLACEHOLDERS for what is missing, each named in `placeholders`."""
    lacking = missing(options)
    return replace(options, **{k: PLACEHOLDERS[k] for k in lacking}, placeholders=tuple(lacking))


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _in_words(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]

# Patterns of the CreateTrainingJob shapes RoleArn and TagKey/TagValue ([SM-API] service-2.json).
_ROLE = re.compile(r"arn:aws[a-z\-]*:iam::\d{12}:role/?[a-zA-Z_0-9+=,.@\-_/]+")
_TAG = re.compile(r"[\w\s.:/=+\-@]*")
_S3 = re.compile(r"s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](/.*)?")


def render(plan, options: SageMakerOptions) -> Rendered:
    node, nodes = plan.job.cluster.node, plan.job.cluster.nodes
    if not node.sagemaker:
        raise TrainplanError(
            f"{node.name} is not a SageMaker training instance type; plan for one of the ml.* "
            "instances (see `trainplan hardware`)"
        )
    if lacking := missing(options):  # all of them at once, not one per try
        raise TrainplanError(f"launch sagemaker needs {_in_words([NEEDED[k] for k in lacking])}; "
                             "--dry-run shows the job with placeholders for them")
    if not _ROLE.fullmatch(options.role):
        raise TrainplanError(
            f"--role must be an IAM role ARN like arn:aws:iam::123456789012:role/Name, got {options.role!r}"
        )
    for key, value in options.tags:
        if not (_TAG.fullmatch(key) and _TAG.fullmatch(value)) or not 0 < len(key) <= 128 or len(value) > 256:
            raise TrainplanError(
                f"tag {key}={value} is not a valid SageMaker tag: letters, digits, spaces and _.:/=+-@ only "
                "(key 1-128, value 0-256 characters)"
            )
    name = check_dns_name(job_name(plan, options, max_len=JOB_NAME_MAX), "SageMaker job name", JOB_NAME_MAX)
    if options.bucket and not _S3.fullmatch(f"s3://{options.bucket}"):
        raise TrainplanError(
            f"--bucket must be an S3 bucket name (3-63 lowercase letters, digits, '.' and '-'), got {options.bucket!r}"
        )
    prefix = f"s3://{options.bucket}/trainplan/{name}"
    checkpoint_s3 = _s3(options.checkpoint_s3 or f"{prefix}/checkpoints", "--checkpoint-s3")
    output_s3 = _s3(options.output_s3 or f"{prefix}/output", "--output-s3")

    compute = {
        "instance_type": node.name,
        "instance_count": nodes,
        # Ignored on instances with local NVMe (all p4/p5/p6): SageMaker uses the instance store.
        "volume_size_in_gb": options.volume_gib,
        "enable_managed_spot_training": options.spot,
    }
    if options.keep_alive_s:
        if not 0 < options.keep_alive_s <= MAX_KEEP_ALIVE_S:
            raise TrainplanError(f"--keep-alive must be 1..{MAX_KEEP_ALIVE_S} seconds (API limit), got {options.keep_alive_s}")
        compute["keep_alive_period_in_seconds"] = options.keep_alive_s
    compute.update(_placement(node, nodes, options))

    if not 0 < options.max_runtime_s <= MAX_RUNTIME_S:
        raise TrainplanError(f"--max-runtime must be 1..{MAX_RUNTIME_S} seconds (28 days), got {options.max_runtime_s}")
    stopping = {"max_runtime_in_seconds": options.max_runtime_s}
    if options.spot:
        if not node.spot:
            raise TrainplanError(f"{node.name} has no Spot capacity; drop --spot")
        wait = options.max_wait_s if options.max_wait_s is not None else 2 * options.max_runtime_s
        if wait < options.max_runtime_s:
            raise TrainplanError(
                f"--max-wait ({wait} s) must be at least --max-runtime ({options.max_runtime_s} s): "
                "with managed spot it bounds waiting plus running"
            )
        stopping["max_wait_time_in_seconds"] = wait
    elif options.max_wait_s is not None:
        raise TrainplanError("--max-wait applies to managed spot only; add --spot or drop it")

    env, why = network_env(node, sagemaker=True)
    env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] = str(SHUTDOWN_TIMEOUT_S)
    why["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] = (
        "seconds torchrun gives the ranks to save after SIGTERM before SIGKILL (default 30; torch >= 2.11): "
        "SageMaker kills the job 120 s after SIGTERM (https://docs.aws.amazon.com/sagemaker/latest/APIReference/"
        "API_StopTrainingJob.html)")
    fw = None if options.probe else framework_run(plan)
    plan_data = () if fw else ((plan.train.data,) if plan.train.data else ())  # a framework's is in its export
    channels = data_channels(options.data or plan_data)
    if fw is None:
        hyper: dict[str, str | int] = {"plan": f"{CODE_DIR}/plan.json", "out": options.out_dir or MODEL_DIR,
                                       "checkpoint-dir": CHECKPOINT_DIR, "nproc-per-node": node.gpus_per_node}
        if options.steps is not None:
            hyper["steps"] = options.steps
        if options.probe:
            hyper |= {"probe": "true", "instance": node.name}
        if channels:
            hyper["data"] = ",".join(f"channel:{c}" for c in channels)
        command = COMMAND
    else:
        hyper = {"framework-entry": f"{CODE_DIR}/{FRAMEWORK_ENTRY}", "nproc-per-node": node.gpus_per_node}
        fw_env, fw_why = fw.env(CODE_DIR)
        env |= fw_env
        why |= fw_why
        # requirements.txt installs the framework; sm_train.sh evals the command under no `set -e`
        command = " && ".join((*fw.setup(install=False), COMMAND))
    trainer = {
        "base_job_name": name,
        "role": options.role,
        "region": options.region,
        "training_image": options.image or default_image(options.region, node),
        "source_code": {"source_dir": "<staged: trainplan package + files>", "command": command,
                        "requirements": REQUIREMENTS},
        "compute": compute,
        "hyperparameters": hyper,
        "environment": env,
        "input_data": [{"channel_name": c, "data_source": uri} for c, uri in channels.items()],
        "checkpoint_config": {"s3_uri": checkpoint_s3, "local_path": CHECKPOINT_DIR},
        "stopping_condition": stopping,
        "output_data_config": {"s3_output_path": output_s3, "compression_type": "NONE"},
        "tags": [{"key": k, "value": v} for k, v in
                 (("trainplan:model", plan.job.model.name),
                  *((("trainplan:framework", fw.label),) if fw else ()), *options.tags)],
    }
    notes, extra = [], {}
    if options.placeholders:
        shown = {k: PLACEHOLDERS[k] for k in options.placeholders}
        extra["placeholders"] = shown
        notes.append("PLACEHOLDERS, not real, for what was not given: " + ", ".join(f"{k} {v}" for k, v in shown.items())
                     + f"; a real submit needs {_in_words([NEEDED[k] for k in shown])}")
    if options.probe:  # output uncompressed (compression_type NONE): the model directory's files land as they are
        notes.append(f"probe: the machine profile lands in {output_s3}/<training job name>/output/model/"
                     f"{PROBE_FILE}; fetch it with: aws s3 cp {output_s3}/<training job name>/output/model/"
                     f"{PROBE_FILE} machine.json")
    files = {"plan.json": plan.to_json(), REQUIREMENTS: requirements(), ENTRY: _ENTRY_SCRIPT}
    if fw is not None:
        entry = fw.entry(CODE_DIR, CHECKPOINT_DIR, options.out_dir or MODEL_DIR,
                         data=tuple(f"{CHANNEL_ROOT}/{c}" for c in channels), steps=options.steps)
        files = {"plan.json": plan.to_json(), **fw.files, REQUIREMENTS: fw.requirements(), ENTRY: _ENTRY_SCRIPT,
                 FRAMEWORK_ENTRY: json.dumps({"framework": fw.label, "entry": entry}, indent=2) + "\n"}
        notes += fw.notes(image_note=False)  # the DLC's note follows
        if not options.image:
            notes.append(f"the SageMaker PyTorch DLC gets {', '.join(fw.spec['requirements'])} from requirements.txt "
                         f"({_one_line(fw.spec['requirements_source'])}); SageMaker pulls images from ECR only: push "
                         f"{fw.spec['image']} to ECR and pass --image to run the framework's own image")
    return Rendered(target=NAME, argv=(), env=env, env_sources=why, files=files, request=trainer,
                    notes=tuple(notes), extra=extra)


def data_channels(data: tuple[str, ...]) -> dict[str, str]:
    """{channel name: S3 URI} from `s3://...` (channel "train") and `NAME=s3://...` entries."""
    out: dict[str, str] = {}
    for d in data:
        name, sep, uri = d.partition("=")
        if not sep:
            name, uri = "train", d
        if not uri.startswith("s3://"):
            raise TrainplanError(
                f"--data {d}: launch sagemaker reads training data from S3: give s3://bucket/prefix "
                "or NAME=s3://bucket/prefix (mounted at /opt/ml/input/data/NAME)"
            )
        if not _CHANNEL.fullmatch(name) or name in RESERVED_CHANNELS:
            raise TrainplanError(
                f"--data {d}: channel name {name!r} must be 1-64 letters, digits or '_', and "
                f"not {' or '.join(RESERVED_CHANNELS)} (the SDK's own channels)"
            )
        if name in out:
            raise TrainplanError(f"--data: channel {name!r} is given twice")
        out[name] = _s3(uri, "--data")
    return out


def _s3(uri: str, flag: str) -> str:
    if not _S3.fullmatch(uri):
        raise TrainplanError(f"{flag} must be an S3 URI like s3://bucket/prefix, got {uri!r}")
    return uri


def _placement(node, nodes: int, options: LaunchOptions) -> dict:
    """UltraServer instances (p6e-gb200) run only inside an UltraServer: ask where."""
    if node.placement != "ultraserver":
        if options.ultraserver:
            raise TrainplanError(f"--ultraserver applies to UltraServer instances, not {node.name}")
        return {"training_plan_arn": options.training_plan_arn} if options.training_plan_arn else {}
    if not options.ultraserver:
        raise TrainplanError(
            f"{node.name} is sold only inside UltraServers (NVLink domain of {node.nvlink_domain_gpus} "
            "GPUs), so the job needs an instance placement: pass --ultraserver ID:COUNT for each "
            "UltraServer of your training plan (and --training-plan ARN)"
        )
    if len(options.ultraserver) > MAX_PLACEMENTS:
        raise TrainplanError(f"at most {MAX_PLACEMENTS} --ultraserver placements (API limit), got {len(options.ultraserver)}")
    placed = sum(count for _, count in options.ultraserver)
    if placed != nodes:
        raise TrainplanError(f"--ultraserver counts add up to {placed} instances but the plan has {nodes}")
    out = {"instance_placement_config": {
        "enable_multiple_jobs": False,
        "placement_specifications": [{"ultra_server_id": sid, "instance_count": count}
                                     for sid, count in options.ultraserver]}}
    if options.training_plan_arn:
        out["training_plan_arn"] = options.training_plan_arn
    return out


def default_image(region: str, node) -> str:
    """The PyTorch training DLC for the region, looked up in the SDK's own image table (offline)."""
    if node.cpu_arch != "x86_64":
        raise TrainplanError(
            f"{node.name} has {node.cpu_arch} CPUs and the default PyTorch image is x86_64: "
            "pass --image with an arm64 training image"
        )
    try:
        from sagemaker.core import image_uris
    except ImportError:
        raise TrainplanError(SDK_EXTRA + " (or pass --image)") from None
    try:
        return image_uris.retrieve(framework=DLC_FRAMEWORK, region=region, version=DLC_VERSION,
                                   py_version=DLC_PY, instance_type=node.name, image_scope="training")
    except ValueError as e:
        raise TrainplanError(f"no PyTorch training image for {region}: {e}; pass --image") from None


def requirements() -> str:
    """What the job installs on top of the DLC: the runtime's extra, without torch (the image has
    a CUDA build of it; reinstalling from PyPI would replace it)."""
    from importlib import metadata

    try:
        reqs = metadata.requires("trainplan") or []
    except metadata.PackageNotFoundError:
        reqs = []
    lines = []
    for r in reqs:
        spec, _, marker = r.partition(";")
        if "extra" in marker and '"torch"' in marker.replace("'", '"'):
            name = re.split(r"[<>=!~ \[]", spec.strip(), maxsplit=1)[0]
            if name.lower() != "torch":
                lines.append(spec.strip())
    return "".join(f"{line}\n" for line in sorted(lines))


def _preflight() -> None:
    from trainplan.launch.sagemaker_sdk import require_sdk

    require_sdk()


def _check(rendered: Rendered) -> Rendered:
    """The CreateTrainingJob request, built by the SDK itself offline and checked against the API
    schema: for a dry run and before a real submit, so a request the API would refuse is never sent."""
    from trainplan.launch.sagemaker_sdk import capture_request

    api = capture_request(rendered)
    shown = {k: rendered.extra[k] for k in ("placeholders",) if k in rendered.extra}  # first: read it first
    body = {**shown, "model_trainer": rendered.request, "create_training_job": api}
    if FRAMEWORK_ENTRY in rendered.files:  # a framework's job: what it runs is in the shipped files
        body["source_files"] = {k: v for k, v in rendered.files.items() if k not in ("plan.json", ENTRY)}
    text = json.dumps(body, indent=2, default=str)
    return replace(rendered, extra={**rendered.extra, "create_training_job": api}, text=text + "\n")


def submit(rendered: Rendered, workdir=".") -> tuple[int, str]:
    from trainplan.launch import sagemaker_sdk

    if placeholders := rendered.extra.get("placeholders"):
        raise TrainplanError(f"refusing to submit a job with placeholder {_in_words(list(placeholders))}; "
                             f"give {_in_words([NEEDED[k] for k in placeholders])}")

    name = sagemaker_sdk.submit(rendered)
    return 0, f"started SageMaker training job {name} in {rendered.request['region']}"


TARGET = Target(NAME, "SageMaker AI training job (SDK v3 ModelTrainer)", SageMakerOptions, add_arguments,
                from_args, render, submit, check=_check, preflight=_preflight)
