"""`trainplan launch`: dry runs print what would be submitted; bad input is one line, exit 2,
and nothing is submitted."""

from __future__ import annotations

import json
import subprocess

import pytest

from trainplan.launch import sagemaker_sdk

ROLE = "arn:aws:iam::123456789012:role/SageMakerTrainingRole"


@pytest.fixture
def no_submit(monkeypatch):
    """Fail the test if anything would start a process or reach SageMaker."""
    def refuse(*a, **k):
        raise AssertionError(f"submitted: {a}")
    monkeypatch.setattr(subprocess, "run", refuse)
    monkeypatch.setattr(sagemaker_sdk, "submit", refuse)


def test_slurm_dry_run_prints_the_script(cli, plan_file, no_submit):
    code, out, err = cli("launch", "slurm", "--plan", str(plan_file), "--dry-run")
    assert code == 0, err
    assert out.startswith("#!/bin/bash\n") and "#SBATCH --nodes=4" in out
    assert f"PLAN={plan_file}" in out
    assert err.startswith("note: ")


def test_k8s_dry_run_prints_the_manifest(cli, plan_file, no_submit):
    code, out, err = cli("launch", "k8s", "--plan", str(plan_file), "--dry-run", "--image", "trainplan:1")
    assert code == 0, err
    kinds = [i["kind"] for i in json.loads(out)["items"]]
    assert kinds == ["ConfigMap", "PersistentVolumeClaim", "PyTorchJob"]


def test_local_dry_run_json(cli, plan_file, no_submit):
    code, out, err = cli("launch", "local", "--plan", str(plan_file), "--dry-run", "--json", "--device", "cpu",
                         "--nnodes", "1", "--nproc-per-node", "2", "--fit-world", "--steps", "3")
    assert code == 0, err
    d = json.loads(out)
    assert d["argv"][:2] == ["torchrun", "--standalone"] and d["argv"][-5:] == ["--steps", "3", "--device", "cpu", "--fit-world"]
    assert d["env"]["CUDA_VISIBLE_DEVICES"] == ""


@pytest.mark.slow
def test_sagemaker_dry_run_json_shows_trainer_and_request(cli, plan_file, no_submit, monkeypatch):
    """issue 7, done when: the ModelTrainer configuration and the request for a 4-node
    ml.p6-b200.48xlarge plan (instance type, count 4, torchrun with 8 processes per node, EFA
    environment, checkpoint URI). Role, region and bucket come from the environment here."""
    pytest.importorskip("sagemaker.train")
    monkeypatch.setenv("SAGEMAKER_ROLE", ROLE)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("SAGEMAKER_BUCKET", "my-bucket")
    from launch_fixtures import FAKE_KEY, FAKE_SECRET, FAKE_TOKEN, assert_no_credentials

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", FAKE_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", FAKE_SECRET)
    monkeypatch.setenv("AWS_SESSION_TOKEN", FAKE_TOKEN)
    code, out, err = cli("launch", "sagemaker", "--plan", str(plan_file), "--dry-run", "--json")
    assert code == 0, err
    assert_no_credentials([out, err])
    d = json.loads(out)
    trainer, request = d["request"], d["create_training_job"]
    assert trainer["compute"]["instance_type"] == request["ResourceConfig"]["InstanceType"] == "ml.p6-b200.48xlarge"
    assert trainer["compute"]["instance_count"] == request["ResourceConfig"]["InstanceCount"] == 4
    assert trainer["hyperparameters"]["nproc-per-node"] == 8
    assert request["Environment"]["FI_PROVIDER"] == "efa"
    assert request["CheckpointConfig"]["S3Uri"] == "s3://my-bucket/trainplan/trainplan-llama-3-1-8b/checkpoints"
    assert trainer["role"] == request["RoleArn"] == ROLE


def test_unknown_target(cli, plan_file, no_submit):
    code, out, err = cli("launch", "ray", "--plan", str(plan_file), "--dry-run")
    assert (code, out) == (2, "")
    assert err == "trainplan launch: error: unknown launch target 'ray': known: hyperpod-eks, k8s, local, sagemaker, slurm.\n"


def test_unknown_schema_version(cli, tmp_path, plan4, no_submit):
    d = plan4.to_dict()
    d["schema"] = "trainplan-plan/9"
    p = tmp_path / "plan.json"
    p.write_text(json.dumps(d))
    code, out, err = cli("launch", "slurm", "--plan", str(p), "--dry-run")
    assert (code, out) == (2, "")
    assert err == (f"trainplan launch: error: {p}: unknown schema 'trainplan-plan/9'; this trainplan reads "
                   "'trainplan-plan/1' (re-create the plan with `trainplan plan --out`)\n")


def test_plan_edited_into_an_impossible_layout(cli, tmp_path, plan4, no_submit):
    d = plan4.to_dict()
    d["layout"]["dp_shard"] = 24  # 24 GPUs on a 32-GPU cluster
    p = tmp_path / "plan.json"
    p.write_text(json.dumps(d))
    code, out, err = cli("launch", "k8s", "--plan", str(p), "--image", "x", "--dry-run")
    assert (code, out) == (2, "")
    assert err == (f"trainplan launch: error: {p}: layout uses dp_replicate*dp_shard*tp*pp*cp = 1*24*1*1*1 = 24 "
                   "GPUs but the cluster has 32; change the degrees or --nodes\n")


def test_sagemaker_without_role_submits_nothing(cli, plan_file, no_submit, monkeypatch):
    pytest.importorskip("sagemaker.train")
    monkeypatch.delenv("SAGEMAKER_ROLE", raising=False)
    code, out, err = cli("launch", "sagemaker", "--plan", str(plan_file), "--role", "", "--region", "us-east-1",
                         "--bucket", "b-1")
    assert (code, out) == (2, "")
    assert err == ("trainplan launch: error: launch sagemaker needs an execution role (--role ARN or "
                   "$SAGEMAKER_ROLE); --dry-run shows the job with placeholders for them\n")


@pytest.mark.slow
def test_the_readme_sagemaker_dry_run_works_with_nothing_set_and_says_it_uses_placeholders(
        cli, plan_file, no_submit, monkeypatch):
    """README: `launch sagemaker --plan plan.json --data s3://bucket/tokens --spot --dry-run` in a
    shell with no AWS settings: the whole job, its placeholders named first in the output and in a
    note; without --dry-run the same command names everything missing at once."""
    pytest.importorskip("sagemaker.train")
    for k in ("SAGEMAKER_ROLE", "AWS_REGION", "AWS_DEFAULT_REGION", "SAGEMAKER_BUCKET"):
        monkeypatch.delenv(k, raising=False)
    argv = ("launch", "sagemaker", "--plan", str(plan_file), "--data", "s3://bucket/tokens", "--spot")
    code, out, err = cli(*argv, "--dry-run")
    assert code == 0, err
    d = json.loads(out)
    assert next(iter(d)) == "placeholders" and set(d["placeholders"]) == {"role", "region", "bucket"}
    assert d["create_training_job"]["RoleArn"] == d["placeholders"]["role"]
    assert err.startswith("note: PLACEHOLDERS, not real")
    code, out, err = cli(*argv)
    assert (code, out) == (2, "")
    assert "needs an execution role" in err and "a region" in err and "an S3 bucket" in err


def test_sagemaker_instance_the_target_does_not_offer(cli, tmp_path, no_submit):
    pytest.importorskip("sagemaker.train")
    from launch_fixtures import make_plan

    p = tmp_path / "plan.json"
    p.write_text(make_plan("dgx-b200", nodes=2).to_json())
    code, out, err = cli("launch", "sagemaker", "--plan", str(p), "--role", ROLE, "--region", "us-east-1",
                         "--bucket", "my-bucket")
    assert (code, out) == (2, "")
    assert err == ("trainplan launch: error: dgx-b200 is not a SageMaker training instance type; plan for one "
                   "of the ml.* instances (see `trainplan hardware`)\n")


def test_a_plan_from_the_planner_launches(cli, tmp_path, no_submit):
    """The contract end to end: `trainplan plan --out` writes what `launch` reads."""
    p = tmp_path / "plan.json"
    code, _, err = cli("plan", "--model", "llama-3.1-8b", "--instance", "ml.p6-b200.48xlarge", "--nodes", "4",
                       "--seq-len", "8192", "--out", str(p))
    assert code == 0, err
    code, out, err = cli("launch", "k8s", "--plan", str(p), "--dry-run", "--image", "trainplan:1")
    assert code == 0, err
    job = json.loads(out)["items"][-1]
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3
    code, out, err = cli("launch", "slurm", "--plan", str(p), "--dry-run")
    assert code == 0, err
    assert "#SBATCH --nodes=4" in out


def test_a_flag_of_another_target_is_refused(cli, plan_file, no_submit):
    """Each target owns its flags: --spot means nothing to Slurm, and is not silently dropped."""
    code, out, err = cli("launch", "slurm", "--plan", str(plan_file), "--dry-run", "--spot")
    assert (code, out) == (2, "")
    assert err == "trainplan launch: error: --spot is an option of launch sagemaker, not of launch slurm\n"
    code, out, err = cli("launch", "local", "--plan", str(plan_file), "--dry-run", "--image", "x")
    assert err == ("trainplan launch: error: --image is an option of launch hyperpod-eks and k8s and sagemaker and "
                   "slurm, not of launch local\n")


def test_s3_data_is_for_sagemaker_only(cli, plan_file, no_submit):
    code, out, err = cli("launch", "slurm", "--plan", str(plan_file), "--dry-run", "--data", "s3://b/train")
    assert (code, out) == (2, "")
    assert err == ("trainplan launch: error: --data s3://b/train: S3 data is mounted by SageMaker only "
                   "(launch sagemaker); for launch slurm give a path every node sees\n")
