"""Fault injection, stop signals (2 gloo ranks): SIGTERM, SIGINT and SIGUSR1 to one rank, SIGTERM
and SIGINT to torchrun, SIGINT to `trainplan train` as Ctrl-C sends it. In each case every rank
saves the same step and exits without a traceback, and a restart resumes from that step."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from runtime_helpers import ranks_of, read_jsonl, torchrun, trainplan_frames

pytestmark = [pytest.mark.torch, pytest.mark.distributed, pytest.mark.slow]

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def _rank_argv(out, ck, steps=200):
    return ["-m", "trainplan.runtime", "--demo", "--steps", str(steps), "--no-progress", "--out", str(out),
            "--checkpoint-dir", str(ck)]


def _wait_for_steps(out, n, proc):
    """Until the run has recorded n steps (a wait for the run to be under way, not a timing assertion)."""
    deadline = time.monotonic() + 180
    m = out / "measurements.jsonl"
    while time.monotonic() < deadline and proc.poll() is None:
        if m.is_file() and len(read_jsonl(m)) >= n:
            return
        time.sleep(0.2)
    raise AssertionError(f"the run did not reach step {n}")


def _assert_saved_and_resumable(out, ck, stopped_by: str, stderr: str) -> int:
    s = json.loads((out / "summary.json").read_text())
    assert s["stopped_by"] == stopped_by and 1 <= s["steps"] < 200
    saved = ck / f"step-{s['steps']:08d}"
    assert s["checkpoint"] == str(saved)
    # every rank saved that step: its extras, its shard, and the manifest that lists them all
    files = json.loads((saved / "manifest.json").read_text())["files"]
    assert {"extras-rank0.pt", "extras-rank1.pt", "__0_0.distcp", "__1_0.distcp", ".metadata"} <= set(files)
    assert not [p for p in ck.iterdir() if p.name.endswith(".partial")]
    assert trainplan_frames(stderr) == [] and "KeyboardInterrupt" not in stderr
    assert [r["step"] for r in read_jsonl(out / "measurements.jsonl")][-1] == s["steps"]
    p = torchrun(*_rank_argv(out, ck), "--stop-at-step", str(s["steps"] + 1))
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads((out / "summary.json").read_text())["start_step"] == s["steps"]
    return s["steps"]


@pytest.mark.parametrize("fault,name,step", [("term@3:1", "SIGTERM", 3), ("usr1@2:0", "SIGUSR1", 2)])
def test_a_signal_to_one_rank_stops_every_rank_at_the_same_step(tmp_path, fault, name, step):
    # The rank sends itself the signal at the start of `step`; the other rank never receives it.
    out, ck = tmp_path / "run", tmp_path / "ck"
    p = torchrun(*_rank_argv(out, ck), env={"TRAINPLAN_FAULT": fault})
    assert p.returncode == 0, p.stderr[-3000:]
    assert _assert_saved_and_resumable(out, ck, name, p.stderr) == step


def test_sigint_to_one_rank_from_outside(tmp_path):
    out, ck = tmp_path / "run", tmp_path / "ck"
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", *_rank_argv(out, ck)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    _wait_for_steps(out, 2, proc)
    os.kill(ranks_of(proc.pid)[1], signal.SIGINT)
    _, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 0, stderr[-3000:]
    _assert_saved_and_resumable(out, ck, "SIGINT", stderr)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_torchrun_reaches_the_ranks_which_save(tmp_path, sig):
    # torchrun passes SIGTERM/SIGINT on to its workers' process groups and waits for them
    # (--shutdown-timeout, 30 s, then SIGKILL); it then exits non-zero with its own traceback.
    out, ck = tmp_path / "run", tmp_path / "ck"
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", *_rank_argv(out, ck)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    _wait_for_steps(out, 2, proc)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=180)
    _assert_saved_and_resumable(out, ck, sig.name, stderr)


def test_ctrl_c_to_trainplan_train_saves_and_exits_0(tmp_path):
    out, ck = tmp_path / "run", tmp_path / "ck"
    argv = [sys.executable, "-m", "trainplan", "train", "--nproc", "2", "--steps", "200", "--out", str(out),
            "--checkpoint-dir", str(ck), "--no-progress", "--json"]
    # Its own session, as a shell's foreground job: Ctrl-C signals the whole process group.
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                            start_new_session=True)
    _wait_for_steps(out, 2, proc)
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 0, stderr[-3000:]
    assert json.loads(stdout)["stopped_by"] == "SIGINT"
    assert "trainplan train: SIGINT: the ranks save a checkpoint after this step and stop" in stderr
    _assert_saved_and_resumable(out, ck, "SIGINT", stderr)
