"""The launch registry: known targets, unknown names, and checks every target shares."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import trainplan.launch
from trainplan.errors import TrainplanError
from trainplan.launch import TARGETS, LaunchOptions, render


def test_every_target_module_is_registered_under_its_name():
    # a target module defines TARGET (launch/base.Target); TARGETS holds each of them, and nothing else
    found = {}
    for m in pkgutil.iter_modules(trainplan.launch.__path__):
        module = importlib.import_module(f"trainplan.launch.{m.name}")
        if hasattr(module, "TARGET"):
            found[module.TARGET.name] = module.TARGET
    assert found and found == TARGETS
    assert all(name == t.name for name, t in TARGETS.items())


def test_unknown_target_lists_the_known(plan4):
    with pytest.raises(TrainplanError) as e:
        render("slurmm", plan4)
    assert str(e.value) == f"unknown launch target 'slurmm': did you mean 'slurm'? known: {', '.join(sorted(TARGETS))}."


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_control_characters_are_refused_everywhere(plan4, target):
    # A newline in a job name would end a '#SBATCH' comment and start a shell command.
    with pytest.raises(TrainplanError) as e:
        render(target, plan4, LaunchOptions(job_name="a\nrm -rf ~"))
    assert str(e.value) == "job-name contains a control character: 'a\\nrm -rf ~'"


def test_efa_environment_follows_the_catalog_not_the_fabric_name():
    """EFA is a catalog fact (instances.toml network.kind), not a substring of the fabric's name."""
    from dataclasses import replace

    from trainplan.hardware import find_node
    from trainplan.launch.env import network_env

    p6 = find_node("ml.p6-b200.48xlarge")
    env, why = network_env(p6)
    assert env["FI_PROVIDER"] == "efa" and env["FI_EFA_USE_DEVICE_RDMA"] == "1" and set(why) == set(env)
    g6e, _ = network_env(find_node("ml.g6e.48xlarge"))
    assert g6e["FI_PROVIDER"] == "efa" and "FI_EFA_USE_DEVICE_RDMA" not in g6e  # no GPUDirect RDMA
    renamed = replace(p6, inter_node_fabric="InfiniBand NDR")  # a name says nothing
    assert network_env(renamed)[0] == env
    ib = replace(p6, network=replace(p6.network, kind="infiniband"))
    assert "FI_PROVIDER" not in network_env(ib)[0]
    assert "NCCL_SOCKET_IFNAME" not in network_env(p6, sagemaker=True)[0]
