"""End to end through torchrun: the demo trains, resume is exact, SIGTERM checkpoints and exits."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from runtime_helpers import read_jsonl, torchrun

from trainplan.runtime.demo import demo_plan

pytestmark = [pytest.mark.torch, pytest.mark.distributed, pytest.mark.slow]


def test_demo_trains_with_fsdp_on_two_processes(cli, tmp_path):
    # The "done when": trainplan train --nproc 2 --steps 30 --json
    code, out, err = cli("train", "--nproc", "2", "--steps", "30", "--json", "--out", str(tmp_path), "--no-progress")
    assert code == 0, err
    s = json.loads(out)
    assert s["steps"] == 30 and s["world_size"] == 2 and "dp=1x2(fsdp)" in s["layout"]
    recs = read_jsonl(s["measurements"])
    losses = [r["loss"] for r in recs]
    assert len(losses) == 30
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 1.0  # byte-level loss falls by > 1 nat
    assert s["first_loss"] == losses[0] and s["last_loss"] == losses[-1] and s["tokens_per_s"] > 0
    assert {"step_time_s", "tokens_per_s_per_gpu", "mfu", "peak_mem_gib"} <= set(recs[0])
    # the run is a CPU run of a plan for an H200: compare-run and calibrate read its device from the
    # summary the trainer wrote and refuse it in one line (issue 27), nothing calibrated
    cal = tmp_path / "cal.json"
    for argv in (("compare-run", str(tmp_path)), ("calibrate", "--runs", str(tmp_path), "--out", str(cal))):
        code, out, err = cli(*argv)
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "ran on cpu" in err, err
    assert not cal.exists()


def _run(out, *extra, stderr: list | None = None):
    which = () if "--plan" in extra else ("--demo",)
    p = torchrun("-m", "trainplan.runtime", *which, "--no-progress", "--out", str(out), *extra)
    assert p.returncode == 0, p.stderr[-3000:]
    if stderr is not None:
        stderr.append(p.stderr)
    return [r["loss"] for r in read_jsonl(out / "measurements.jsonl")]


def test_resume_gives_the_losses_of_an_uninterrupted_run(tmp_path):
    ref = _run(tmp_path / "ref", "--steps", "6", "--tensorboard", str(tmp_path / "tb"))
    ck = tmp_path / "ck"
    first = _run(tmp_path / "a", "--steps", "6", "--checkpoint-dir", str(ck), "--stop-at-step", "3")
    assert len(first) == 3 and sorted(p.name for p in ck.iterdir()) == ["step-00000003"]
    said = []
    resumed = _run(tmp_path / "a", "--steps", "6", "--checkpoint-dir", str(ck), stderr=said)
    assert resumed == ref  # bit for bit: model, optimizer, schedule, data position, RNG
    assert json.loads((tmp_path / "a" / "summary.json").read_text())["start_step"] == 3
    # announced once (rank 0) before the first step, and counted from the step it resumed at
    assert said[0].count(f"resuming from {ck / 'step-00000003'} at step 3: steps 4-6 to run") == 1
    assert "over 3 steps (4-6, resumed at step 3)" in said[0]
    assert any(p.name.startswith("events.out.tfevents") for p in (tmp_path / "tb").iterdir())


def test_pipeline_resume_gives_the_losses_of_an_uninterrupted_run(tmp_path):
    # pp=2 (1f1b, 2 micro-batches): each rank saves its own stage with DCP, under the whole
    # model's parameter names, and resumes it exactly.
    from dataclasses import replace

    from trainplan.runtime.demo import DEMO_MODEL

    plan = tmp_path / "plan.json"
    # A plan for one 8-GPU node (pp=2 x dp 4), fitted to 2 processes: pp=2 x dp 1.
    plan.write_text(demo_plan(8, steps=4, micro_batch=2, grad_accum=2, pp=2,
                              model=replace(DEMO_MODEL, tied_embeddings=False)).to_json())
    args = ("--plan", str(plan), "--fit-world", "--device", "cpu")
    ref = _run(tmp_path / "ref", *args)
    ck = tmp_path / "ck"
    first = _run(tmp_path / "a", *args, "--checkpoint-dir", str(ck), "--stop-at-step", "2")
    assert first == ref[:2] and len(ref) == 4
    # The resumed run ends as a SageMaker job does: the whole model exported from all stages.
    p = torchrun("-m", "trainplan.runtime", "--no-progress", "--out", str(tmp_path / "a"), *args,
                 "--checkpoint-dir", str(ck), env={"SM_MODEL_DIR": str(tmp_path / "model"), "SM_CURRENT_HOST": "algo-1"})
    assert p.returncode == 0, p.stderr[-3000:]
    resumed = [r["loss"] for r in read_jsonl(tmp_path / "a" / "measurements.jsonl")]
    assert resumed == ref  # bit for bit
    from safetensors.torch import load_file

    weights = load_file(tmp_path / "model" / "model.safetensors")
    assert {"tok_embeddings.weight", "layers.0.attention.wq.weight", "layers.3.feed_forward.w2.weight",
            "norm.weight", "output.weight"} <= set(weights) and len(weights) == 4 * 9 + 3
    assert json.loads((tmp_path / "a" / "summary.json").read_text())["layout"].endswith("pp=2 1f1b")
    import torch.distributed.checkpoint as dcp

    keys = set(dcp.FileSystemReader(str(ck / "step-00000002")).read_metadata().state_dict_metadata)
    # stage 0 (rank 0) holds the embedding and layers 0-1, stage 1 layers 2-3, the norm and head
    assert {"model.tok_embeddings.weight", "model.layers.0.attention.wq.weight",
            "model.layers.3.attention.wq.weight", "model.output.weight", "model.norm.weight"} <= keys


def test_sigterm_saves_a_checkpoint_and_exits_cleanly(tmp_path):
    out, ck = tmp_path / "run", tmp_path / "ck"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "trainplan", "train", "--nproc", "2", "--steps", "500",
                             "--out", str(out), "--checkpoint-dir", str(ck), "--no-progress", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        m = out / "measurements.jsonl"
        if m.is_file() and len(read_jsonl(m)) >= 2:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr[-3000:]
    s = json.loads(stdout)
    assert s["stopped_by"] == "SIGTERM" and 2 <= s["steps"] < 500
    saved = ck / f"step-{s['steps']:08d}"
    assert s["checkpoint"] == str(saved)
    assert {"extras-rank0.pt", "extras-rank1.pt", ".metadata"} <= {p.name for p in saved.iterdir()}
    assert not [p for p in ck.iterdir() if p.name.endswith(".partial")]


def test_plan_for_more_gpus_is_refused_before_launch(cli, tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(demo_plan(8).to_json())
    code, _, err = cli("train", "--plan", str(plan), "--nproc", "2")
    assert code == 2
    assert f"{plan} needs 8 processes (dp_replicate*dp_shard*tp*pp*cp) but --nproc is 2; " \
           "drop --nproc, or pass --fit-world to rescale dp_shard" in err
    code, out, _ = cli("train", "--plan", str(plan), "--nproc", "2", "--fit-world", "--dry-run")
    assert code == 0
    assert "-m torch.distributed.run --standalone --nproc-per-node=2 -m trainplan.runtime --plan" in out
    assert out.rstrip().endswith("--fit-world")


def test_single_process_trains_without_fsdp_and_exports_for_sagemaker(tmp_path):
    # One rank: no FSDP (autocast gives bf16 mixed precision), the path of a one-GPU check. Under
    # SageMaker (SM_* set) the final model goes to SM_MODEL_DIR; flags still choose the dirs.
    model_dir = tmp_path / "model"
    p = torchrun("-m", "trainplan.runtime", "--demo", "--no-progress", "--out", str(tmp_path / "out"),
                 "--checkpoint-dir", str(tmp_path / "ck"), "--steps", "12", "--json", nproc=1,
                 env={"SM_MODEL_DIR": str(model_dir), "SM_CURRENT_HOST": "algo-1"})
    assert p.returncode == 0, p.stderr[-3000:]
    s = json.loads(p.stdout)
    losses = [r["loss"] for r in read_jsonl(tmp_path / "out" / "measurements.jsonl")]
    assert s["world_size"] == 1 and "dp=1x1" in s["layout"]
    assert sum(losses[-3:]) / 3 < losses[0] - 0.8
    assert s["model_file"] == str(model_dir / "model.safetensors")
    from safetensors.torch import load_file

    weights = load_file(s["model_file"])
    assert weights["tok_embeddings.weight"].shape == (259, 128)
    assert s["checkpoint"] == str(tmp_path / "ck" / "step-00000012")


def _two_nodes(tmp_path, rdzv_id, *extra):
    """Two torchrun 'nodes' of one rank each on this machine, each with its own checkpoint dir."""
    from trainplan.runtime.distributed import free_port

    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1", f"--node-rank={n}",
         "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id={rdzv_id}",
         "-m", "trainplan.runtime", "--demo", "--steps", "4", "--no-progress", "--out", str(tmp_path / f"out{n}"),
         "--checkpoint-dir", str(tmp_path / f"ck{n}"), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for n in (0, 1)]
    for p in procs:
        _, err = p.communicate(timeout=180)
        assert p.returncode == 0, err[-3000:]


def test_checkpoint_dirs_local_to_each_node(tmp_path):
    # SageMaker: /opt/ml/checkpoints is local to each node, synced to one S3 prefix and restored
    # whole to every node on a restart. Each node must publish (rename) its own part; resuming
    # from the union was checked by hand (2 x torchrun --nnodes 2, merged dirs: same losses).
    _two_nodes(tmp_path, "save", "--stop-at-step", "2")
    parts = [{p.name for p in (tmp_path / f"ck{n}").iterdir()} for n in (0, 1)]
    assert parts == [{"step-00000002"}, {"step-00000002"}]  # published on both, no .partial left
    files = [{p.name for p in (tmp_path / f"ck{n}" / "step-00000002").iterdir()} for n in (0, 1)]
    assert files[0] == {".metadata", "__0_0.distcp", "extras-rank0.pt", "manifest.json"}
    assert files[1] == {"__1_0.distcp", "extras-rank1.pt", "manifest.json"}
    # each node's manifest lists the whole checkpoint: the union SageMaker restores to every node
    listed = [set(json.loads((tmp_path / f"ck{n}" / "step-00000002" / "manifest.json").read_text())["files"])
              for n in (0, 1)]
    assert listed[0] == listed[1] == (files[0] | files[1]) - {"manifest.json"}
