"""Target local: the torchrun command line, single node and multi-node (c10d)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from launch_fixtures import check_golden

from trainplan.errors import TrainplanError
from trainplan.launch import render
from trainplan.launch.local import LocalOptions


def test_single_node_is_standalone_with_one_process_per_gpu(plan4):
    r = render("local", plan4, LocalOptions(plan_path="plan.json", nnodes=1))
    assert r.argv[:6] == ("torchrun", "--standalone", "--nnodes", "1", "--nproc-per-node", "8")
    assert r.argv[6:] == ("-m", "trainplan.runtime", "--plan", "plan.json")


def test_multi_node_uses_c10d_rendezvous_and_efa_on_gpus(plan4):
    opts = LocalOptions(plan_path="/fsx/plan.json", node_rank=3, rdzv_endpoint="10.0.0.1:29500",
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
    r = render("local", plan4, LocalOptions(nnodes=1, nproc_per_node=2, device="cpu", fit_world=True))
    assert r.env["CUDA_VISIBLE_DEVICES"] == ""
    assert "FI_PROVIDER" not in r.env
    assert r.argv[-3:] == ("--device", "cpu", "--fit-world")  # the runtime refuses a plan on CPU otherwise
    assert not r.notes


def test_world_mismatch_is_noted(plan4):
    r = render("local", plan4, LocalOptions(nnodes=1, nproc_per_node=2, device="cpu"))
    assert "plan's layout is for 32 GPUs" in r.notes[0]


def test_multi_node_without_endpoint_is_refused(plan4):
    with pytest.raises(TrainplanError, match=r"^4 nodes need a rendezvous: pass --rdzv-endpoint HOST:PORT"):
        render("local", plan4, LocalOptions())


@pytest.mark.parametrize("opts, msg", [
    (LocalOptions(rdzv_endpoint="10.0.0.1"), "--rdzv-endpoint must be HOST:PORT, got '10.0.0.1'"),
    (LocalOptions(rdzv_endpoint="h:1", node_rank=4), "--node-rank 4 is outside 0..3 for 4 nodes"),
])
def test_bad_local_options(plan4, opts, msg):
    with pytest.raises(TrainplanError) as e:
        render("local", plan4, opts)
    assert str(e.value) == msg


def test_text_is_the_argv_shell_quoted(plan4):
    weird = "/tmp/my plans/it's $(rm -rf ~).json"
    r = render("local", plan4, LocalOptions(plan_path=weird, nnodes=1, device="cpu"))
    words = shlex.split(r.text)
    assert words[:2] == ["CUDA_VISIBLE_DEVICES=", "OMP_NUM_THREADS=1"]
    assert words[2:] == list(r.argv)
    assert weird in r.argv


@pytest.mark.torch
@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_to_the_launcher_stops_torchrun_and_every_rank(tmp_path, sig):
    """`trainplan launch local` on a tiny CPU plan, then SIGTERM (kill, a scheduler) or SIGINT
    (Ctrl-C) to the launcher: it passes the signal to torchrun's process group, and after a bounded
    wait no process it started is left. With SIGTERM the trainer saves first (the runtime's
    handler), so the run can resume."""
    pytest.importorskip("torch")
    from signal_fixtures import alive, descendants, kill_all, wait_for

    from trainplan.hardware import Cluster, find_node
    from trainplan.job import Job, Workload
    from trainplan.layout import Layout
    from trainplan.models.spec import ModelSpec
    from trainplan.plan import Plan, TrainSettings

    tiny = ModelSpec(name="tiny", model_type="llama", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2,
                     head_dim=16, ffn_size=128, vocab_size=320, tied_embeddings=True)
    plan = Plan(Job(tiny, Cluster(find_node("ml.p6e-gb200.36xlarge"), 1), Workload(seq_len=32, global_batch=4)),
                Layout(micro_batch=1, dp_shard=4), TrainSettings(steps=100000, warmup_steps=1, checkpoint_every=0))
    (tmp_path / "plan.json").write_text(plan.to_json())
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    launcher = subprocess.Popen(
        [sys.executable, "-m", "trainplan", "launch", "local", "--plan", "plan.json", "--device", "cpu",
         "--nnodes", "1", "--nproc-per-node", "2", "--fit-world", "--out", "out", "--checkpoint-dir", "ck"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    started: set[int] = set()
    try:
        measurements = tmp_path / "out" / "measurements.jsonl"
        wait_for(lambda: measurements.exists() and measurements.read_text().count("\n") >= 1,
                 limit_s=240, what="the first step")
        started = descendants(launcher.pid)
        assert len(started) >= 3, "torchrun and two ranks"
        launcher.send_signal(sig)
        out = launcher.communicate(timeout=120)[0]
        wait_for(lambda: not any(alive(p) for p in started), limit_s=60, what="torchrun and the ranks to exit")
    finally:
        if launcher.poll() is None:
            launcher.kill()
        kill_all(p for p in started if alive(p))
    assert f"passing {signal.Signals(sig).name} to torchrun" in out
    if sig == signal.SIGTERM:
        summary = json.loads((tmp_path / "out" / "summary.json").read_text())
        assert summary["stopped_by"] == "SIGTERM" and (tmp_path / summary["checkpoint"]).is_dir()


def test_data_paths_reach_the_trainer_and_s3_is_refused(plan4):
    r = render("local", plan4, LocalOptions(nnodes=1, data=("/data/a", "/data/b")))
    assert r.argv[r.argv.index("--data") + 1] == "/data/a,/data/b"
    with pytest.raises(TrainplanError, match=r"S3 data is mounted by SageMaker only"):
        render("local", plan4, LocalOptions(nnodes=1, data=("s3://bkt/x",)))


def test_a_model_the_launched_trainer_would_build_differently_is_refused(plan4):
    # launched ranks build trainplan's own decoder (no --hf), which has no attention sinks or windows
    from dataclasses import replace

    from trainplan.errors import TrainplanError
    from trainplan.launch import render
    from trainplan.models import resolve

    plan = replace(plan4, job=replace(plan4.job, model=resolve("gpt-oss-120b")))
    with pytest.raises(TrainplanError, match="gpt-oss-120b uses attention sinks, sliding-window attention"):
        render("local", plan)
