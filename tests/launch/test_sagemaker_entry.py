"""The job's first process (launch/sagemaker_entry.py): the torchrun command it builds from the
SM_* environment SageMaker sets, and what it does when torchrun fails or is stopped."""

from __future__ import annotations

import json
import sys

import pytest

from trainplan.launch import sagemaker_entry

HPS = {"plan": "/opt/ml/input/data/code/plan.json", "out": "/opt/ml/model", "checkpoint-dir": "/opt/ml/checkpoints",
       "nproc-per-node": 8, "steps": 200, "data": "channel:train"}


def _env(**extra) -> dict[str, str]:
    # As sagemaker 3.27 container_drivers/scripts/environment.py writes them.
    return {"SM_HPS": json.dumps(HPS), "SM_HOST_COUNT": "1", "SM_CURRENT_HOST_RANK": "0",
            "SM_MASTER_ADDR": "algo-1", "SM_MASTER_PORT": "7777", "SM_NUM_GPUS": "8", **extra}


def test_one_host_runs_every_gpu_and_the_runtime_with_the_hyperparameters():
    argv = sagemaker_entry.command(_env())
    assert argv[:6] == ["torchrun", "--standalone", "--nnodes", "1", "--nproc-per-node", "8"]
    assert argv[6:] == ["-m", "trainplan.runtime", "--plan", HPS["plan"], "--out", "/opt/ml/model",
                        "--checkpoint-dir", "/opt/ml/checkpoints", "--steps", "200", "--data", "channel:train"]


def test_several_hosts_meet_at_the_first_with_a_static_rendezvous():
    argv = sagemaker_entry.command(_env(SM_HOST_COUNT="4", SM_CURRENT_HOST_RANK="2"))
    i = argv.index("-m")
    assert argv[:i] == ["torchrun", "--nnodes", "4", "--nproc-per-node", "8", "--node-rank", "2",
                        "--master-addr", "algo-1", "--master-port", "7777"]


def test_gpus_the_container_sees_win_over_the_plans_count():
    assert sagemaker_entry.command(_env(SM_NUM_GPUS="4"))[5] == "4"
    assert sagemaker_entry.command(_env(SM_NUM_GPUS="0"))[5] == "8"  # no GPU seen: the plan's


def test_boolean_hyperparameters_are_flags():
    env = _env(SM_HPS=json.dumps({**HPS, "fit-world": True}))
    assert sagemaker_entry.command(env)[-1] == "--fit-world"
    env = _env(SM_HPS=json.dumps({**HPS, "fit-world": "false"}))
    assert "--fit-world" not in sagemaker_entry.command(env)


def test_an_unknown_hyperparameter_fails_the_job_with_its_reason(tmp_path, monkeypatch):
    failure = tmp_path / "failure"
    monkeypatch.setenv("SM_OUTPUT_FAILURE", str(failure))
    assert sagemaker_entry.main(_env(SM_HPS=json.dumps({**HPS, "lr": 1}))) == 2
    assert failure.read_text().startswith("trainplan entry: unknown hyperparameter 'lr'")


def test_outside_a_training_container_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("SM_OUTPUT_FAILURE", str(tmp_path / "failure"))
    assert sagemaker_entry.main({}) == 2
    assert (tmp_path / "failure").read_text() == "trainplan entry: not a SageMaker training container: 'SM_HPS'\n"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX signals")
def test_a_failing_torchrun_writes_the_failure_file(tmp_path, monkeypatch):
    """torchrun's exit status is the job's; the failure file says why (SageMaker shows it)."""
    failure = tmp_path / "failure"
    monkeypatch.setenv("SM_OUTPUT_FAILURE", str(failure))
    monkeypatch.setattr(sagemaker_entry, "command", lambda env: [sys.executable, "-c", "raise SystemExit(3)"])
    assert sagemaker_entry.main(_env()) == 3
    assert "torchrun exited with 3" in failure.read_text()
