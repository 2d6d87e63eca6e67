"""Kernel launches (costs/launch.py): the GPU waits only when issuing a layer's kernels takes longer
than running them, and CUDA graphs remove the wait (NVIDIA, "Getting Started with CUDA Graphs")."""

import pytest

from trainplan.costs import launch
from trainplan.costs.steptime import step_time
from trainplan.hardware import Cluster, find_node
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.models import resolve
from trainplan.profile import Profile

PRIOR = Profile()


def test_exposed_is_the_issue_time_beyond_the_gpu_time():
    kernels = launch.layer_kernels(fused=False, recompute_frac=0.0, tp_collectives=0)
    assert kernels == launch.FORWARD_KERNELS[False] * (1 + launch.BACKWARD_PER_FORWARD)
    host = 16 * kernels * launch.LAUNCH_S
    assert launch.exposed_launch(16, kernels, host / 4, cuda_graphs=False) == pytest.approx(host * 3 / 4)
    assert launch.exposed_launch(16, kernels, host * 2, cuda_graphs=False) == 0.0  # the GPU is the bottleneck
    assert launch.exposed_launch(16, kernels, host / 4, cuda_graphs=True) == 0.0
    # fused kernels launch fewer kernels; recompute and tp collectives launch more
    assert launch.layer_kernels(True, 0.0, 0) < kernels < launch.layer_kernels(False, 1.0, 8)


def _job(seq, gb):
    return Job(resolve("llama-3.2-1b"), Cluster(find_node("ml.p5.48xlarge"), 1), Workload(seq, gb))


def test_a_tiny_micro_batch_waits_on_launches_and_cuda_graphs_remove_it():
    # 1B model, 64 tokens per GPU: a layer's GPU work lasts far less than issuing its ~80 kernels
    L = Layout(dp_shard=8, micro_batch=1, grad_accum=1)
    eager = step_time(_job(64, 8), L, PRIOR).time
    graphs = step_time(_job(64, 8), L.with_(execution=L.execution.with_(cuda_graphs=True)), PRIOR).time
    assert eager.launch > 0 and graphs.launch == 0
    assert eager.total - graphs.total == pytest.approx(eager.launch, rel=1e-9)
    # at 8k tokens per GPU the GPU work hides every launch
    assert step_time(_job(8192, 8), L, PRIOR).time.launch == 0
