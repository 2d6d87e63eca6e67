"""Fault injection, numerics and trainer honesty (2 gloo ranks): NaN at step k is skipped and
counted; a streak stops the run with one line and keeps the checkpoint from before it; a plan is
refused on a machine without a GPU unless --device cpu; a resume with a larger --steps never
raises the learning rate."""

import itertools
import json
import math

import pytest
from runtime_helpers import plan_file, read_jsonl, torchrun, trainplan_frames

from trainplan.runtime.optim import lr_factor

pytestmark = [pytest.mark.torch, pytest.mark.distributed, pytest.mark.slow]


def _train(out, plan, *extra, env=None, nproc=2):
    return torchrun("-m", "trainplan.runtime", "--plan", str(plan), "--fit-world", "--no-progress",
                    "--out", str(out), *extra, env=env, nproc=nproc)


def test_a_nan_step_is_skipped_counted_and_training_goes_on(tmp_path):
    plan = plan_file(tmp_path / "plan.json", steps=6)
    # rank 1 alone gets a NaN loss at step 3: both ranks must skip the same update
    p = _train(tmp_path / "run", plan, "--device", "cpu", env={"TRAINPLAN_FAULT": "nan@3:1"})
    assert p.returncode == 0, p.stderr[-3000:]
    recs = read_jsonl(tmp_path / "run" / "measurements.jsonl")
    assert [r["step"] for r in recs] == [1, 2, 3, 4, 5, 6]
    assert [r["skipped"] for r in recs] == [False, False, True, False, False, False]
    assert recs[2]["loss"] is None and recs[2]["grad_norm"] is None  # JSON has no NaN
    # had the NaN gradients reached the weights, every later loss would be NaN too
    assert all(math.isfinite(r["loss"]) for r in recs[3:])
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert s["skipped_steps"] == 1 and s["stopped_by"] is None


def test_a_nan_streak_stops_with_one_line_and_keeps_the_checkpoint_before_it(tmp_path):
    plan = plan_file(tmp_path / "plan.json", steps=10, checkpoint_every=1)
    ck = tmp_path / "ck"
    # every step from 3 on is NaN; 4 in a row stop the run. Checkpoints of steps 3-5 are written
    # meanwhile, and keep-last-2 pruning would delete step-2 without the pin.
    p = _train(tmp_path / "run", plan, "--device", "cpu", "--checkpoint-dir", str(ck), "--max-nonfinite", "4",
               env={"TRAINPLAN_FAULT": "nan@3-"})
    assert p.returncode != 0
    errors = [line for line in p.stderr.splitlines() if line.startswith("trainplan.runtime: error:")]
    assert errors == [(f"trainplan.runtime: error: loss or gradient norm not finite for 4 steps in a row (steps 3-6, "
                       f"--max-nonfinite 4); stopped without saving; the last checkpoint before it, "
                       f"{ck / 'step-00000002'}, is kept: lower the learning rate, check the data at those steps, "
                       "or resume from that checkpoint")]
    assert trainplan_frames(p.stderr) == []
    assert sorted(x.name for x in ck.iterdir()) == ["pinned.json", "step-00000002", "step-00000004", "step-00000005"]
    assert json.loads((ck / "pinned.json").read_text())["step"] == 2
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert s["stopped_by"] == "non-finite" and s["skipped_steps"] == 4 and s["steps"] == 6


def test_trainplan_train_says_a_stop_once_without_torchruns_failure_report(tmp_path):
    # Under `trainplan train` the ranks leave the stop's line to it (summary.json) and exit 0, so
    # torchrun prints no ChildFailedError report; the command still fails (exit 2).
    import os
    import subprocess
    import sys

    argv = [sys.executable, "-m", "trainplan", "train", "--nproc", "2", "--steps", "8", "--out", str(tmp_path / "run")]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TRAINPLAN_FAULT": "nan@3-"}
    p = subprocess.run(argv, capture_output=True, text=True, timeout=240, env=env, check=False)
    assert p.returncode == 2, p.stderr[-3000:]
    errors = [line for line in p.stderr.splitlines() if "error" in line.lower()]
    expected = ("trainplan train: error: loss or gradient norm not finite for 3 steps in a row (steps 3-5, "
                "--max-nonfinite 3); stopped without saving; no checkpoint was written before it: lower the "
                "learning rate, check the data at those steps, or resume from that checkpoint")
    assert errors == [expected], p.stderr[-3000:]
    assert "FAILED" not in p.stderr and "Traceback" not in p.stderr


def test_a_rank_usage_error_is_one_line():
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "trainplan.runtime", "--steps", "x"], capture_output=True, text=True,
                       timeout=120, check=False)
    assert p.returncode == 2
    assert p.stderr == ("python -m trainplan.runtime: error: argument --steps: invalid int value: 'x' "
                        "(see --help)\n")


def test_a_plan_without_a_gpu_is_refused_unless_device_cpu(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    plan = plan_file(tmp_path / "plan.json", steps=2)
    p = _train(tmp_path / "run", plan, nproc=1)
    assert p.returncode != 0
    assert ("trainplan.runtime: error: this plan is for GPUs but torch sees none (torch.cuda.is_available() is "
            "False); run it on a GPU machine, or pass --device cpu") in p.stderr
    assert not (tmp_path / "run").exists()


def test_a_longer_resume_continues_the_decay_instead_of_raising_the_lr(tmp_path):
    plan = plan_file(tmp_path / "plan.json", steps=6, checkpoint_every=0)
    ck, out = tmp_path / "ck", tmp_path / "run"
    p = _train(out, plan, "--device", "cpu", "--checkpoint-dir", str(ck), "--stop-at-step", "4")
    assert p.returncode == 0, p.stderr[-3000:]
    p = _train(out, plan, "--device", "cpu", "--checkpoint-dir", str(ck), "--steps", "10")
    assert p.returncode == 0, p.stderr[-3000:]
    lrs = [r["lr"] for r in read_jsonl(out / "measurements.jsonl")]
    peak, warmup = 3e-3, 3  # the demo plan's
    assert len(lrs) == 10
    assert lrs[4] == pytest.approx(peak * lr_factor(4, warmup, 6, 0.1))  # step 5: the 6-step schedule's value
    assert lrs[4] < peak * lr_factor(4, warmup, 10, 0.1)  # a schedule rebuilt for 10 steps would jump up
    assert all(a >= b for a, b in itertools.pairwise(lrs[4:]))  # then only down
    assert lrs[-1] > peak * 0.1 and lrs[-1] < lrs[5]
