"""Target local: the torchrun command line, single node and multi-node (c10d)."""

from __future__ import annotations

import shlex

import pytest
from launch_fixtures import check_golden

from trainplan.errors import TrainplanError
from trainplan.launch import LaunchOptions, render


def test_single_node_is_standalone_with_one_process_per_gpu(plan4):
    r = render("local", plan4, LaunchOptions(plan_path="plan.json", nnodes=1))
    assert r.argv[:6] == ("torchrun", "--standalone", "--nnodes", "1", "--nproc-per-node", "8")
    assert r.argv[6:] == ("-m", "trainplan.runtime", "--plan", "plan.json")


def test_multi_node_uses_c10d_rendezvous_and_efa_on_gpus(plan4):
    opts = LaunchOptions(plan_path="/fsx/plan.json", node_rank=3, rdzv_endpoint="10.0.0.1:29500",
                         steps=20, out_dir="/fsx/out", checkpoint_dir="/fsx/ckpt")
    r = render("local", plan4, opts)
    # torchrun flags: https://pytorch.org/docs/stable/elastic/run.html
    check_golden("local_multinode.txt", r.text)
    a = list(r.argv)
    assert a[a.index("--nnodes") + 1] == "4" and a[a.index("--node-rank") + 1] == "3"
    assert a[a.index("--rdzv-backend") + 1] == "c10d"
    assert a[a.index("--rdzv-endpoint") + 1] == "10.0.0.1:29500"
    assert a[a.index("-m") + 1:] == ["trainplan.runtime", "--plan", "/fsx/plan.json", "--steps", "20",
                                     "--out", "/fsx/out", "--checkpoint-dir", "/fsx/ckpt"]
    assert r.env["FI_PROVIDER"] == "efa" and r.env["FI_EFA_USE_DEVICE_RDMA"] == "1"


def test_cpu_hides_gpus_so_the_runtime_uses_gloo(plan4):
    r = render("local", plan4, LaunchOptions(nnodes=1, nproc_per_node=2, device="cpu", fit_world=True))
    assert r.env["CUDA_VISIBLE_DEVICES"] == ""
    assert "FI_PROVIDER" not in r.env
    assert r.argv[-1] == "--fit-world"
    assert not r.notes


def test_world_mismatch_is_noted(plan4):
    r = render("local", plan4, LaunchOptions(nnodes=1, nproc_per_node=2, device="cpu"))
    assert "plan's layout is for 32 GPUs" in r.notes[0]


def test_multi_node_without_endpoint_is_refused(plan4):
    with pytest.raises(TrainplanError, match=r"^4 nodes need a rendezvous: pass --rdzv-endpoint HOST:PORT"):
        render("local", plan4, LaunchOptions())


@pytest.mark.parametrize("opts, msg", [
    (LaunchOptions(rdzv_endpoint="10.0.0.1"), "--rdzv-endpoint must be HOST:PORT, got '10.0.0.1'"),
    (LaunchOptions(rdzv_endpoint="h:1", node_rank=4), "--node-rank 4 is outside 0..3 for 4 nodes"),
])
def test_bad_local_options(plan4, opts, msg):
    with pytest.raises(TrainplanError) as e:
        render("local", plan4, opts)
    assert str(e.value) == msg


def test_text_is_the_argv_shell_quoted(plan4):
    weird = "/tmp/my plans/it's $(rm -rf ~).json"
    r = render("local", plan4, LaunchOptions(plan_path=weird, nnodes=1, device="cpu"))
    words = shlex.split(r.text)
    assert words[:2] == ["CUDA_VISIBLE_DEVICES=", "OMP_NUM_THREADS=1"]
    assert words[2:] == list(r.argv)
    assert weird in r.argv
