"""Target sagemaker, the SDK half: the CreateTrainingJob request the SageMaker SDK v3 builds for a
plan, captured offline with botocore's Stubber and checked against the API's own schema
(botocore's sagemaker service-2.json) and against the plan."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

pytest.importorskip("sagemaker.train")
pytestmark = pytest.mark.slow  # the SDK takes seconds to build one request (config schema checks)

from launch_fixtures import FAKE_KEY, FAKE_SECRET, FAKE_TOKEN, assert_no_credentials, make_plan

from trainplan.launch import render
from trainplan.launch.sagemaker import SageMakerOptions
from trainplan.launch.sagemaker_sdk import capture, capture_request, check_against_service_model

ROLE = "arn:aws:iam::123456789012:role/SageMakerTrainingRole"
OPTS = SageMakerOptions(role=ROLE, region="us-east-1", bucket="my-bucket", steps=200)


@pytest.fixture(autouse=True)
def fake_credentials(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", FAKE_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", FAKE_SECRET)
    monkeypatch.setenv("AWS_SESSION_TOKEN", FAKE_TOKEN)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


@pytest.fixture(scope="module")
def captured():
    """One capture for the 4-node p6-b200 plan, spot and warm pool on (the SDK is slow to run)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("AWS_ACCESS_KEY_ID", FAKE_KEY)
    mp.setenv("AWS_SECRET_ACCESS_KEY", FAKE_SECRET)
    mp.setenv("AWS_SESSION_TOKEN", FAKE_TOKEN)
    rendered = render("sagemaker", make_plan(), replace(OPTS, spot=True, keep_alive_s=1800,
                                                        tags=(("team", "pretrain"),),
                                                        data=("s3://my-bucket/tokens/train",)))
    request, uploads = capture(rendered)
    mp.undo()
    return rendered, request, uploads


def test_request_matches_the_api_schema(captured):
    _, request, _ = captured
    assert check_against_service_model(request) == []


def test_schema_check_catches_what_the_api_would_refuse(captured):
    _, request, _ = captured
    bad = json.loads(json.dumps(request))
    del bad["RoleArn"]
    bad["ResourceConfig"]["InstanceType"] = "ml.p7.96xlarge"
    bad["ResourceConfig"]["KeepAlivePeriodInSeconds"] = 99999
    bad["Environment"]["X"] = 3
    problems = check_against_service_model(bad)
    assert any("RoleArn" in p for p in problems)
    assert any("ml.p7.96xlarge" in p for p in problems)
    assert any("KeepAlivePeriodInSeconds: 99999 is above the maximum 21600" in p for p in problems)
    assert any("Environment" in p and "type" in p for p in problems)


def test_request_matches_the_plan(captured):
    _, r, _ = captured
    assert r["ResourceConfig"]["InstanceType"] == "ml.p6-b200.48xlarge"
    assert r["ResourceConfig"]["InstanceCount"] == 4
    assert r["ResourceConfig"]["KeepAlivePeriodInSeconds"] == 1800
    assert r["EnableManagedSpotTraining"] is True
    assert r["StoppingCondition"] == {"MaxRuntimeInSeconds": 86400, "MaxWaitTimeInSeconds": 172800}
    assert r["CheckpointConfig"] == {"S3Uri": "s3://my-bucket/trainplan/trainplan-llama-3-1-8b/checkpoints",
                                     "LocalPath": "/opt/ml/checkpoints"}
    assert r["OutputDataConfig"]["S3OutputPath"] == "s3://my-bucket/trainplan/trainplan-llama-3-1-8b/output"
    assert r["Environment"]["FI_PROVIDER"] == "efa" and r["Environment"]["FI_EFA_USE_DEVICE_RDMA"] == "1"
    assert r["HyperParameters"] == {"plan": "/opt/ml/input/data/code/plan.json", "out": "/opt/ml/model",
                                    "checkpoint-dir": "/opt/ml/checkpoints", "nproc-per-node": "8",
                                    "steps": "200", "data": "channel:train"}
    assert r["OutputDataConfig"]["CompressionType"] == "NONE"  # no hours of gzip over the weights
    assert r["RoleArn"] == ROLE
    assert re.fullmatch(r"trainplan-llama-3-1-8b-\d{14}", r["TrainingJobName"])
    assert {"Key": "team", "Value": "pretrain"} in r["Tags"]
    assert r["AlgorithmSpecification"]["TrainingImage"].endswith("/pytorch-training:2.10.0-gpu-py313")
    channels = {c["ChannelName"]: c for c in r["InputDataConfig"]}
    assert set(channels) == {"code", "sm_drivers", "train"}
    assert channels["train"]["DataSource"]["S3DataSource"]["S3Uri"] == "s3://my-bucket/tokens/train"


def test_the_job_ships_trainplan_the_plan_and_execs_our_entry(captured):
    rendered, request, uploads = captured
    code = next(files for uri, files in uploads.items() if uri.endswith("/input/code"))
    drivers = next(files for uri, files in uploads.items() if uri.endswith("/input/sm_drivers"))
    assert code["plan.json"] == rendered.files["plan.json"]
    assert "trainplan/runtime/__main__.py" in code and "trainplan/hardware/instances.toml" in code
    assert "from trainplan.launch.sagemaker_entry import main" in code["trainplan_entry.py"]
    source = json.loads(drivers["sourcecode.json"])
    assert source["command"] == "exec python3 trainplan_entry.py" and source["requirements"] == "requirements.txt"
    # The SDK's script ends by eval-ing the command: the exec puts our entry in the shell's place,
    # and the SDK's torchrun driver (which passes no signal on) is not run.
    script = drivers["sm_train.sh"]
    assert "exec python3 trainplan_entry.py" in script and "torchrun_driver.py" not in script
    assert request["AlgorithmSpecification"]["ContainerEntrypoint"] == ["/bin/bash"]


def test_no_credentials_in_anything_rendered(captured):
    """Credentials were in the environment while the fixture rendered and captured (the CLI's
    output is scanned in test_cli)."""
    rendered, request, uploads = captured
    ours = [json.dumps(rendered.to_dict()), json.dumps(request, default=str)]
    shipped = [t for files in uploads.values() for t in files.values()]  # incl. the SDK's drivers
    assert_no_credentials(ours, shipped)


def test_ultraserver_placement_reaches_the_request():
    plan = make_plan("ml.p6e-gb200.36xlarge", nodes=2)
    rendered = render("sagemaker", plan, replace(OPTS, ultraserver=(("us-abc", 2),),
                                                 image="123456789012.dkr.ecr.us-east-1.amazonaws.com/arm:1"))
    r = capture_request(rendered)
    placement = r["ResourceConfig"]["InstancePlacementConfig"]
    assert placement["PlacementSpecifications"] == [{"UltraServerId": "us-abc", "InstanceCount": 2}]
    assert placement.get("EnableMultipleJobs", False) is False  # the API default: the job has it alone


def test_submit_creates_the_job_through_the_sdk(monkeypatch):
    """submit() goes through ModelTrainer.train(): here against a stubbed session, so the request
    that would reach SageMaker is the one the dry run shows."""
    from sagemaker.core.helper import session_helper

    from trainplan.launch import sagemaker_sdk

    uploads = []

    def upload_data(self, path, bucket=None, key_prefix="data", **_):
        uploads.append(key_prefix)
        return f"s3://{bucket}/{key_prefix}"

    monkeypatch.setattr(session_helper.Session, "upload_data", upload_data)
    monkeypatch.setattr(session_helper.Session, "default_bucket", lambda self: "my-bucket")
    monkeypatch.setenv("SAGEMAKER_VALIDATE_ROLE", "false")  # no IAM to ask offline
    fake = sagemaker_sdk._StubbedBotoSession("us-east-1")
    rendered = render("sagemaker", make_plan(), OPTS)
    name = sagemaker_sdk.submit(rendered, boto_session=fake.session)
    assert name == "captured"  # the job the stubbed DescribeTrainingJob returned
    (request,) = fake.captured
    assert request["ResourceConfig"] == {"InstanceType": "ml.p6-b200.48xlarge", "InstanceCount": 4,
                                         "VolumeSizeInGB": 500}
    assert check_against_service_model(request) == []
    assert sorted(u.rsplit("/", 1)[-1] for u in uploads) == ["code", "sm_drivers"]


@pytest.mark.parametrize("length", [47, 48])
def test_the_sdk_suffix_survives_the_longest_names(length):
    """A 48-character base gets the SDK's whole '-YYYYmmddHHMMSS' (63 characters in all)."""
    name = "j" * length
    r = capture_request(render("sagemaker", make_plan(), replace(OPTS, job_name=name)))
    assert re.fullmatch(name + r"-\d{14}", r["TrainingJobName"])
