"""The launch registry: known targets, unknown names, and checks every target shares."""

from __future__ import annotations

import pytest

from trainplan.errors import TrainplanError
from trainplan.launch import TARGETS, LaunchOptions, render


def test_targets():
    assert set(TARGETS) == {"local", "sagemaker", "slurm", "k8s"}


def test_unknown_target_lists_the_known(plan4):
    with pytest.raises(TrainplanError) as e:
        render("slurmm", plan4)
    assert str(e.value) == "unknown launch target 'slurmm': did you mean 'slurm'? known: k8s, local, sagemaker, slurm."


@pytest.mark.parametrize("target", ["local", "slurm", "k8s", "sagemaker"])
def test_control_characters_are_refused_everywhere(plan4, target):
    # A newline in a job name would end a '#SBATCH' comment and start a shell command.
    with pytest.raises(TrainplanError) as e:
        render(target, plan4, LaunchOptions(job_name="a\nrm -rf ~"))
    assert str(e.value) == "job-name contains a control character: 'a\\nrm -rf ~'"
