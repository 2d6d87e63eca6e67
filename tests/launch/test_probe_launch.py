"""`trainplan launch TARGET --probe`: a short job on the plan's instance type that runs `trainplan
probe --quick` instead of the trainer (1 node, or 2 for EFA), and says where the profile lands."""

from __future__ import annotations

import json

import pytest

from trainplan.launch import sagemaker_entry


@pytest.mark.parametrize("target,extra", [("slurm", ()), ("k8s", ("--image", "img:1")),
                                          ("local", ("--rdzv-endpoint", "10.0.0.1:29500"))])
@pytest.mark.parametrize("nodes", [1, 2])
def test_probe_jobs_run_the_probe_on_one_or_two_nodes(cli, plan_file, target, extra, nodes):
    code, out, err = cli("launch", target, "--plan", str(plan_file), "--probe", "--probe-nodes", str(nodes),
                         "--dry-run", "--json", *extra)
    assert code == 0, err
    r = json.loads(out)
    text = json.dumps(r)
    assert "-m trainplan probe --quick" in text or '"-m", "trainplan", "probe", "--quick"' in text
    assert "trainplan.runtime" not in text.replace("trainplan.runtime.", "")  # the trainer is not started
    assert "--instance ml.p6-b200.48xlarge" in text or '"--instance", "ml.p6-b200.48xlarge"' in text
    assert f"--nnodes {nodes}" in text or f'"--nnodes", "{nodes}"' in text
    assert "machine.json" in err  # where the profile lands


def test_sagemaker_probe_job_and_its_container_command(cli, plan_file):
    code, out, err = cli("launch", "sagemaker", "--plan", str(plan_file), "--probe", "--dry-run", "--json",
                         "--role", "arn:aws:iam::123456789012:role/R", "--region", "us-east-1", "--bucket", "b-1",
                         "--image", "img:1")
    assert code == 0, err
    req = json.loads(out)["request"]
    assert req["compute"]["instance_count"] == 1
    hps = req["hyperparameters"]
    assert hps["probe"] == "true" and hps["instance"] == "ml.p6-b200.48xlarge"
    assert "output/model/machine.json" in err and "aws s3 cp" in err
    env = {"SM_HPS": json.dumps(hps), "SM_HOST_COUNT": "1", "SM_CURRENT_HOST_RANK": "0", "SM_NUM_GPUS": "8"}
    argv = sagemaker_entry.command(env)
    assert argv[6:] == ["-m", "trainplan", "probe", "--quick", "--out", f"{hps['out']}/machine.json",
                        "--instance", "ml.p6-b200.48xlarge"]


def test_probe_nodes_without_probe_is_refused(cli, plan_file):
    code, _, err = cli("launch", "slurm", "--plan", str(plan_file), "--probe-nodes", "2", "--dry-run")
    assert code == 2 and "--probe-nodes applies to --probe only" in err
