"""Target sagemaker, the pure half: the ModelTrainer configuration and its refusals (no SDK needed)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest
from launch_fixtures import check_golden, make_plan

from trainplan.errors import TrainplanError
from trainplan.launch import render
from trainplan.launch.sagemaker import PLACEHOLDERS, SageMakerOptions, submit, with_placeholders

ROLE = "arn:aws:iam::123456789012:role/SageMakerTrainingRole"
IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.10.0-gpu-py313"
OK = SageMakerOptions(role=ROLE, region="us-east-1", bucket="my-bucket", image=IMAGE)


def test_model_trainer_config_golden(plan4):
    # ModelTrainer / Compute / CheckpointConfig / StoppingCondition field names as in
    # shared/data/HARDWARE_FACTS.md 3.2 (sagemaker 3.27); EFA variables as in launch/env.py.
    opts = replace(OK, spot=True, keep_alive_s=1800, steps=200, tags=(("team", "pretrain"),),
                   data=("s3://my-bucket/tokens/train", "val=s3://my-bucket/tokens/val"))
    r = render("sagemaker", plan4, opts)
    check_golden("sagemaker_p6-b200_x4.json", json.dumps(r.to_dict(), indent=2) + "\n")


def _with(**changes) -> SageMakerOptions:
    return replace(OK, **changes)


def test_instance_count_processes_env_and_checkpoint_come_from_the_plan(plan4):
    t = render("sagemaker", plan4, OK).request
    assert t["compute"]["instance_type"] == "ml.p6-b200.48xlarge" and t["compute"]["instance_count"] == 4
    assert t["hyperparameters"]["nproc-per-node"] == 8  # torchrun's processes per node (sagemaker_entry.py)
    assert t["source_code"]["command"] == "exec python3 trainplan_entry.py"
    assert t["environment"]["FI_PROVIDER"] == "efa" and t["environment"]["FI_EFA_USE_DEVICE_RDMA"] == "1"
    assert t["checkpoint_config"] == {"s3_uri": "s3://my-bucket/trainplan/trainplan-llama-3-1-8b/checkpoints",
                                      "local_path": "/opt/ml/checkpoints"}
    assert t["hyperparameters"]["checkpoint-dir"] == "/opt/ml/checkpoints"
    assert "NCCL_SOCKET_IFNAME" not in t["environment"]  # the SDK driver sets it in the container


def test_spot_waits_twice_the_runtime_by_default(plan4):
    t = render("sagemaker", plan4, _with(spot=True, max_runtime_s=3600)).request
    assert t["compute"]["enable_managed_spot_training"] is True
    assert t["stopping_condition"] == {"max_runtime_in_seconds": 3600, "max_wait_time_in_seconds": 7200}


def test_ultraserver_placement(plan4):
    plan = make_plan("ml.p6e-gb200.36xlarge", nodes=9)
    t = render("sagemaker", plan, _with(ultraserver=(("us-1", 5), ("us-2", 4)),
                                        training_plan_arn="arn:aws:sagemaker:us-east-1:123456789012:training-plan/tp")).request
    assert t["compute"]["instance_placement_config"] == {
        "enable_multiple_jobs": False,
        "placement_specifications": [{"ultra_server_id": "us-1", "instance_count": 5},
                                     {"ultra_server_id": "us-2", "instance_count": 4}]}
    assert t["hyperparameters"]["nproc-per-node"] == 4


GB200 = "ml.p6e-gb200.36xlarge"


@pytest.mark.parametrize("instance, opts, msg", [
    (None, _with(role=""), ("launch sagemaker needs an execution role (--role ARN or $SAGEMAKER_ROLE); --dry-run "
                            "shows the job with placeholders for them")),
    (None, _with(region=""), ("launch sagemaker needs a region (--region or $AWS_REGION); --dry-run shows the job "
                              "with placeholders for them")),
    (None, _with(role="", region="", bucket=""), (  # all at once, not one per try
        "launch sagemaker needs an execution role (--role ARN or $SAGEMAKER_ROLE), a region (--region or "
        "$AWS_REGION) and an S3 bucket for code, checkpoints and output (--bucket NAME or $SAGEMAKER_BUCKET); "
        "--dry-run shows the job with placeholders for them")),
    (None, _with(bucket=""), ("launch sagemaker needs an S3 bucket for code, checkpoints and output (--bucket "
                              "NAME or $SAGEMAKER_BUCKET); --dry-run shows the job with placeholders for them")),
    (None, _with(role="SageMakerRole"), ("--role must be an IAM role ARN like arn:aws:iam::123456789012:role/Name, "
                                        "got 'SageMakerRole'")),
    (None, _with(bucket="My Bucket"), ("--bucket must be an S3 bucket name (3-63 lowercase letters, digits, '.' "
                                      "and '-'), got 'My Bucket'")),
    (None, _with(job_name="my job $(x)"), ("SageMaker job name 'my job $(x)' is not valid here: use letters, "
                                          "digits and '-' (no leading or trailing '-'), at most 48 characters (--job-name)")),
    (None, _with(max_wait_s=10), "--max-wait applies to managed spot only; add --spot or drop it"),
    (None, _with(spot=True, max_runtime_s=7200, max_wait_s=3600),
     "--max-wait (3600 s) must be at least --max-runtime (7200 s): with managed spot it bounds waiting plus running"),
    (None, _with(keep_alive_s=30000), "--keep-alive must be 1..21600 seconds (API limit), got 30000"),
    (None, _with(max_runtime_s=29 * 86400), "--max-runtime must be 1..2419200 seconds (28 days), got 2505600"),
    (None, _with(tags=(("team", "a$(b)"),)), ("tag team=a$(b) is not a valid SageMaker tag: letters, digits, spaces "
                                             "and _.:/=+-@ only (key 1-128, value 0-256 characters)")),
    ("dgx-b200", OK, ("dgx-b200 is not a SageMaker training instance type; plan for one of the ml.* instances "
                     "(see `trainplan hardware`)")),
    (GB200, OK, ("ml.p6e-gb200.36xlarge is sold only inside UltraServers (NVLink domain of 72 GPUs), so the job "
                "needs an instance placement: pass --ultraserver ID:COUNT for each UltraServer of your training "
                "plan (and --training-plan ARN)")),
    (GB200, _with(ultraserver=(("us-1", 1),)), "--ultraserver counts add up to 1 instances but the plan has 2"),
    (GB200, _with(ultraserver=(("us-1", 2),), spot=True), "ml.p6e-gb200.36xlarge has no Spot capacity; drop --spot"),
    (GB200, _with(ultraserver=(("us-1", 2),), image=""),
     ("ml.p6e-gb200.36xlarge has arm64 CPUs and the default PyTorch image is x86_64: pass --image with an arm64 "
     "training image")),
    (None, _with(ultraserver=(("us-1", 4),)), "--ultraserver applies to UltraServer instances, not ml.p6-b200.48xlarge"),
])
def test_refusals(plan4, instance, opts, msg):
    plan = make_plan(instance, nodes=2) if instance else plan4
    with pytest.raises(TrainplanError) as e:
        render("sagemaker", plan, opts)
    assert str(e.value) == msg


def test_rendering_needs_neither_torch_nor_the_sdk(plan_file):
    """slurm, k8s, local and sagemaker (with --image) render with torch, the SDK and boto blocked."""
    code = f"""
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('torch', 'sagemaker', 'boto3', 'botocore'):
            raise ImportError('blocked ' + name)
sys.meta_path.insert(0, Block())
from trainplan.launch import render
from trainplan.launch.k8s import K8sOptions
from trainplan.launch.local import LocalOptions
from trainplan.launch.sagemaker import PLACEHOLDERS, SageMakerOptions, submit, with_placeholders
from trainplan.launch.slurm import SlurmOptions
from trainplan.plan import load_plan
plan = load_plan({str(plan_file)!r})
render('slurm', plan, SlurmOptions())
render('k8s', plan, K8sOptions(image='img:1'))
render('local', plan, LocalOptions(rdzv_endpoint='h:1'))
render('sagemaker', plan, SageMakerOptions(image='img:1', role={ROLE!r}, region='us-east-1', bucket='my-bucket'))
print('ok')
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert (p.returncode, p.stdout) == (0, "ok\n"), p.stderr


def test_trainplan_launch_imports_without_the_sdk(plan_file):
    """The SDK is an optional extra: importing trainplan.launch must not need it, and the command
    says which extra to install."""
    code = f"""
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('sagemaker', 'boto3', 'botocore'):
            raise ImportError('blocked ' + name)
sys.meta_path.insert(0, Block())
import trainplan.launch
from trainplan.cli import main
sys.exit(main(['launch', 'sagemaker', '--plan', {str(plan_file)!r}, '--dry-run']))
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode == 2, p.stderr
    assert p.stderr == ("trainplan launch: error: launch sagemaker needs the SageMaker Python SDK v3: "
                        "pip install 'trainplan[sagemaker]'\n")
    assert p.stdout == ""


def _named(model_name: str):
    return replace(make_plan(), job=replace(make_plan().job, model=replace(make_plan().job.model, name=model_name)))


@pytest.mark.parametrize("base_len", range(45, 64))
def test_derived_job_names_leave_room_for_the_sdk_suffix(base_len):
    """The SDK appends '-YYYYmmddHHMMSS' and cuts at 63 (sagemaker 3.27 _get_unique_name): a base of
    49-63 characters lost the suffix. A '-' at the cut is dropped, never left at the end."""
    model = ("m" * 37 + "-" + "x" * 40)[: base_len - len("trainplan-")]
    name = render("sagemaker", _named(model), OK).request["base_job_name"]
    assert len(name) <= 48 and not name.endswith("-")
    assert name == f"trainplan-{model}"[:48].rstrip("-")


@pytest.mark.parametrize("length, ok", [(47, True), (48, True), (49, False), (63, False)])
def test_given_job_names_are_capped_at_48(plan4, length, ok):
    name = "j" * length
    if ok:
        assert render("sagemaker", plan4, _with(job_name=name)).request["base_job_name"] == name
    else:
        with pytest.raises(TrainplanError, match=r"at most 48 characters \(--job-name\)$"):
            render("sagemaker", plan4, _with(job_name=name))


def test_s3_data_becomes_channels_the_trainer_reads(plan4):
    t = render("sagemaker", plan4, _with(data=("s3://bkt/tok/", "eval=s3://bkt/ev"))).request
    assert t["input_data"] == [{"channel_name": "train", "data_source": "s3://bkt/tok/"},
                               {"channel_name": "eval", "data_source": "s3://bkt/ev"}]
    assert t["hyperparameters"]["data"] == "channel:train,channel:eval"


def test_plan_data_on_s3_is_a_channel_too(plan4):
    plan = replace(plan4, train=replace(plan4.train, data="s3://bkt/corpus"))
    t = render("sagemaker", plan, OK).request
    assert t["input_data"] == [{"channel_name": "train", "data_source": "s3://bkt/corpus"}]


@pytest.mark.parametrize("data, msg", [
    (("/fsx/tokens",), ("--data /fsx/tokens: launch sagemaker reads training data from S3: give s3://bucket/prefix "
                       "or NAME=s3://bucket/prefix (mounted at /opt/ml/input/data/NAME)")),
    (("code=s3://bkt/x",), ("--data code=s3://bkt/x: channel name 'code' must be 1-64 letters, digits or '_', "
                         "and not code or sm_drivers (the SDK's own channels)")),
    (("s3://bkt/x", "train=s3://bkt/y"), "--data: channel 'train' is given twice"),
])
def test_bad_data(plan4, data, msg):
    with pytest.raises(TrainplanError) as e:
        render("sagemaker", plan4, _with(data=data))
    assert str(e.value) == msg


def test_model_is_not_gzipped(plan4):
    assert render("sagemaker", plan4, OK).request["output_data_config"]["compression_type"] == "NONE"


def test_a_dry_run_without_role_region_or_bucket_shows_placeholders_that_cannot_be_submitted(plan4):
    opts = with_placeholders(_with(role="", bucket=""))  # the region was given: it stays
    assert opts.placeholders == ("role", "bucket") and opts.region == "us-east-1"
    r = render("sagemaker", plan4, opts)
    assert r.request["role"] == PLACEHOLDERS["role"] and ":000000000000:" in r.request["role"]
    assert r.request["checkpoint_config"]["s3_uri"].startswith(f"s3://{PLACEHOLDERS['bucket']}/")
    assert r.to_dict()["placeholders"] == {"role": PLACEHOLDERS["role"], "bucket": PLACEHOLDERS["bucket"]}
    assert r.notes[0].startswith("PLACEHOLDERS, not real") and "--role ARN" in r.notes[0] and "--region" not in r.notes[0]
    with pytest.raises(TrainplanError, match="refusing to submit a job with placeholder role and bucket"):
        submit(r)  # refused before the SDK is touched
    assert with_placeholders(OK).placeholders == ()  # all given: nothing replaced, nothing said
    assert "placeholders" not in render("sagemaker", plan4, with_placeholders(OK)).to_dict()
