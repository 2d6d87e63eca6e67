"""Target `sagemaker`: a SageMaker AI training job through the SageMaker Python SDK v3 (ModelTrainer).

`render` is pure and needs no SDK when --image is given: it returns the ModelTrainer configuration
as plain data (`Rendered.request`, field names as ModelTrainer and the configs of
`sagemaker.core.training.configs` spell them) and the files shipped as source code. `sagemaker_sdk`
turns that into SDK objects, captures the CreateTrainingJob request offline, and submits it.

What runs in the job: the SDK's torchrun driver starts `torchrun --nnodes=$SM_HOST_COUNT
--nproc_per_node=<process_count_per_node> <entry_script> --<hyperparameter> <value>...`
(HARDWARE_FACTS.md 3.3); the entry script shipped here runs `trainplan.runtime` with those
arguments, the plan and trainplan's own source sitting next to it in /opt/ml/input/data/code.
"""

from __future__ import annotations

import re

from trainplan.errors import TrainplanError
from trainplan.launch.base import LaunchOptions, Rendered, check_dns_name, job_name
from trainplan.launch.env import network_env

NAME = "sagemaker"
SDK_EXTRA = "launch sagemaker needs the SageMaker Python SDK v3: pip install 'trainplan[sagemaker]'"

# Container paths of a ModelTrainer job (HARDWARE_FACTS.md section 4: SM_SOURCE_DIR, SM_MODEL_DIR,
# CheckpointConfig.LocalPath default; https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_CheckpointConfig.html).
CODE_DIR = "/opt/ml/input/data/code"
MODEL_DIR = "/opt/ml/model"
CHECKPOINT_DIR = "/opt/ml/checkpoints"
ENTRY = "trainplan_entry.py"
REQUIREMENTS = "requirements.txt"

# API limits ([SM-API] service-2.json shapes; HARDWARE_FACTS.md 3.2).
MAX_RUNTIME_S = 28 * 24 * 3600  # StoppingCondition.MaxRuntimeInSeconds: at most 28 days
MAX_KEEP_ALIVE_S = 21600  # ResourceConfig.KeepAlivePeriodInSeconds: 0..21600
MAX_PLACEMENTS = 10  # InstancePlacementConfig.PlacementSpecifications: at most 10

# The newest PyTorch training DLC in sagemaker 3.27's image_uris config (image_uri_config/pytorch.json).
DLC_FRAMEWORK, DLC_VERSION, DLC_PY = "pytorch", "2.10.0", "py313"

_ENTRY_SCRIPT = '''\
"""Rendered by trainplan: run trainplan.runtime under the SageMaker torchrun driver.

The driver calls this file with the job's hyperparameters as --name value arguments.
"""
import runpy

runpy.run_module("trainplan.runtime", run_name="__main__", alter_sys=True)
'''

# Patterns of the CreateTrainingJob shapes RoleArn and TagKey/TagValue ([SM-API] service-2.json).
_ROLE = re.compile(r"arn:aws[a-z\-]*:iam::\d{12}:role/?[a-zA-Z_0-9+=,.@\-_/]+")
_TAG = re.compile(r"[\w\s.:/=+\-@]*")
_S3 = re.compile(r"s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](/.*)?")


def render(plan, options: LaunchOptions) -> Rendered:
    node, nodes = plan.job.cluster.node, plan.job.cluster.nodes
    if not node.sagemaker:
        raise TrainplanError(
            f"{node.name} is not a SageMaker training instance type; plan for one of the ml.* "
            "instances (see `trainplan hardware`)"
        )
    if not options.role:
        raise TrainplanError(
            "launch sagemaker needs an execution role: pass --role ARN or set SAGEMAKER_ROLE"
        )
    if not options.region:
        raise TrainplanError("launch sagemaker needs a region: pass --region or set AWS_REGION")
    if not options.bucket and not (options.output_s3 and options.checkpoint_s3):
        raise TrainplanError(
            "launch sagemaker needs an S3 bucket for code, checkpoints and output: pass --bucket "
            "NAME or set SAGEMAKER_BUCKET"
        )
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
    name = check_dns_name(job_name(plan, options), "SageMaker job name", 63)
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
    hyper: dict[str, str | int] = {"plan": f"{CODE_DIR}/plan.json", "out": options.out_dir or MODEL_DIR,
                                   "checkpoint-dir": CHECKPOINT_DIR}
    if options.steps is not None:
        hyper["steps"] = options.steps
    trainer = {
        "base_job_name": name,
        "role": options.role,
        "region": options.region,
        "training_image": options.image or default_image(options.region, node),
        "source_code": {"source_dir": "<staged: trainplan package + files>", "entry_script": ENTRY,
                        "requirements": REQUIREMENTS},
        "compute": compute,
        "distributed": {"torchrun": {"process_count_per_node": node.gpus_per_node}},
        "hyperparameters": hyper,
        "environment": env,
        "checkpoint_config": {"s3_uri": checkpoint_s3, "local_path": CHECKPOINT_DIR},
        "stopping_condition": stopping,
        "output_data_config": {"s3_output_path": output_s3},
        "tags": [{"key": k, "value": v} for k, v in
                 (("trainplan:model", plan.job.model.name), *options.tags)],
    }
    notes = [
        ("the SDK's torchrun driver forces NCCL_PROTO=simple after the job environment is set "
         "(sagemaker 3.27 torchrun_driver.setup_env); it cannot be overridden from here"),
    ]
    files = {"plan.json": plan.to_json(), REQUIREMENTS: requirements(), ENTRY: _ENTRY_SCRIPT}
    return Rendered(target=NAME, argv=(), env=env, env_sources=why, files=files, request=trainer,
                    notes=tuple(notes))


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
