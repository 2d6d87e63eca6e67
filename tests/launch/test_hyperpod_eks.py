"""Target hyperpod-eks: a HyperPodPyTorchJob (apiVersion sagemaker.amazonaws.com/v1) for the SageMaker
HyperPod training operator, checked against the operator's job models.

The models are the HyperPod CLI's (sagemaker-hyperpod 3.12.0, repo aws/sagemaker-hyperpod-cli:
sagemaker/hyperpod/training/config/hyperpod_pytorch_job_unified_config.py). That package does not
install beside the SageMaker SDK v3 (it pins sagemaker-core<2), so every manifest is walked through
the field names read from it (hyperpod_eks.toml [crd]); where the module can be imported (installed,
or HYPERPOD_UNIFIED_CONFIG=path/to/hyperpod_pytorch_job_unified_config.py, a file that needs only
pydantic, and which `make install` unpacks from the wheel under .venv/hyperpod-models), each manifest is
also validated by the pydantic models themselves.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import shlex
from pathlib import Path

import pytest
from framework_plans import megatron_moe_plan, megatron_plan, torchtitan_plan
from launch_fixtures import check_golden, make_plan

from trainplan.errors import TrainplanError
from trainplan.launch import find_target, hyperpod_eks, render
from trainplan.launch.hyperpod_eks import HyperPodEksOptions, problems

# where `make install` unpacks the sagemaker-hyperpod 3.12.0 wheel (never installed: see the module doc)
UNPACKED = Path(__file__).resolve().parents[2] / ".venv" / "hyperpod-models"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/trainplan:0.1.0"


def _job(rendered) -> dict:
    return rendered.request["items"][-1]


def _rendered():
    yield "megatron-moe", render("hyperpod-eks", megatron_moe_plan(), HyperPodEksOptions())
    yield "megatron", render("hyperpod-eks", megatron_plan(), HyperPodEksOptions(checkpoint_pvc="fsx-claim"))
    yield "torchtitan", render("hyperpod-eks", torchtitan_plan(), HyperPodEksOptions(image=IMAGE, max_retries=0))
    yield "trainplan", render("hyperpod-eks", make_plan(), HyperPodEksOptions(image=IMAGE, steps=50))


def _models():
    """The operator's pydantic models, or None."""
    path = os.environ.get("HYPERPOD_UNIFIED_CONFIG")
    unpacked = UNPACKED / "sagemaker/hyperpod/training/config/hyperpod_pytorch_job_unified_config.py"
    if not path and unpacked.is_file():  # `make install` unpacks the wheel there (Makefile)
        path = str(unpacked)
    if path:
        spec = importlib.util.spec_from_file_location("hyperpod_unified_config", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    try:
        return importlib.import_module("sagemaker.hyperpod.training.config.hyperpod_pytorch_job_unified_config")
    except ImportError:
        return None


def test_every_manifest_has_only_the_operators_fields():
    for name, r in _rendered():
        job = _job(r)
        assert (job["apiVersion"], job["kind"]) == ("sagemaker.amazonaws.com/v1", "HyperPodPyTorchJob")
        assert problems(job) == [], name


def test_every_manifest_validates_through_the_operators_models():
    models = _models()
    if models is None:
        pytest.skip("the HyperPod CLI's job models are not importable (set HYPERPOD_UNIFIED_CONFIG to the file)")
    for name, r in _rendered():
        job = _job(r)
        # the manifest spells the models' field names (camelCase), as the SDK's own create() dumps them
        spec = models._HyperPodPytorchJob.model_validate(job["spec"], by_alias=False, by_name=True)
        models.Metadata.model_validate(job["metadata"], by_alias=False, by_name=True)
        dumped = spec.model_dump(exclude_none=True)
        assert dumped["replicaSpecs"][0]["template"] == job["spec"]["replicaSpecs"][0]["template"], name


def test_the_check_names_a_field_the_operator_does_not_have():
    r = render("hyperpod-eks", megatron_plan(), HyperPodEksOptions())
    job = json.loads(json.dumps(_job(r)))
    job["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]["comand"] = ["x"]
    del job["spec"]["replicaSpecs"][0]["name"]
    found = problems(job)
    assert any("containers[0].comand: not a field of Containers" in p for p in found)
    assert any("replicaSpecs[0].name: required" in p for p in found)
    bad = type(r)(**{**{f: getattr(r, f) for f in r.__dataclass_fields__},
                     "request": {**r.request, "items": [*r.request["items"][:-1], job]}})
    with pytest.raises(TrainplanError, match="does not match the operator's models"):
        find_target("hyperpod-eks").check(bad)


def test_hyperpodrun_starts_the_ranks_and_sigterm_reaches_them():
    r = render("hyperpod-eks", megatron_moe_plan(), HyperPodEksOptions(grace_s=300))
    job = _job(r)
    assert job["spec"]["nprocPerNode"] == "8" and job["spec"]["replicaSpecs"][0]["replicas"] == 2
    pod = job["spec"]["replicaSpecs"][0]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 300
    line = pod["containers"][0]["command"][2].replace("$$", "$")
    words = shlex.split(line.rsplit("exec ", 1)[1])
    assert words[:1] == ["hyperpodrun"]
    assert words[words.index("--shutdown-signal") + 1] == "SIGTERM"
    assert words[words.index("--shutdown-timeout") + 1] == "300"
    assert words[words.index("--nnodes") + 1] == "2"
    assert "--save" in words and "/checkpoints/trainplan-mixtral-8x7b" in words
    assert hyperpod_eks.data()["launcher"]["install"] in line
    assert job["spec"]["runPolicy"]["jobMaxRetryCount"] == 3


def test_trainplans_trainer_runs_under_hyperpodrun_too():
    r = render("hyperpod-eks", make_plan(), HyperPodEksOptions(image=IMAGE))
    line = _job(r)["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]["command"][2]
    assert "exec hyperpodrun" in line and "-m trainplan.runtime" in line


def test_manifest_golden():
    r = render("hyperpod-eks", megatron_plan(), HyperPodEksOptions(checkpoint_pvc="fsx-claim", namespace="training"))
    check_golden("hyperpod_eks_megatron_llama8b_p6.json", r.text)
    assert json.loads(r.text) == r.request
