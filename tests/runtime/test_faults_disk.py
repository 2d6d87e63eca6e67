"""Fault injection, the checkpoint directory: read-only, not a directory, too small, full in the
middle of a save. The start-up check refuses in seconds with one line; a full disk during a save
says "no space left on device" (never torch's inline_container.cc), leaves the previous checkpoint
intact, and a restart after freeing space resumes from it.

Real faults where the machine allows them: a tmpfs or a read-only bind mount in a private user and
mount namespace (`unshare -rm`). These tests run as root, where chmod cannot make a directory
read-only, and CI may forbid namespaces: the fault switch (TRAINPLAN_FAULT=readonly, enospc@STEP)
then simulates the same errno, and those tests always run."""

import json
import os
import shlex
import subprocess
import sys

import pytest
from runtime_helpers import plan_file, private_mounts, read_jsonl, torchrun, trainplan_frames

pytestmark = [pytest.mark.torch, pytest.mark.distributed, pytest.mark.slow]

needs_mounts = pytest.mark.skipif(not private_mounts(), reason="no private mount namespace here (unshare -rm)")


def _errors(stderr: str, prefix="trainplan.runtime: error:") -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(prefix)]


def _rank_argv(plan, out, ck, *extra) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m",
            "trainplan.runtime", "--plan", str(plan), "--fit-world", "--device", "cpu", "--no-progress",
            "--out", str(out), "--checkpoint-dir", str(ck), *extra]


def _in_private_mount(setup: str, *commands: list[str]) -> subprocess.CompletedProcess:
    """Run shell `setup` (mounts) then each command, in one private user + mount namespace."""
    script = "set -e; " + setup + "; " + "; ".join(f"{shlex.join(c)} || echo exit=$?" for c in commands)
    return subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=600,
                          check=False, env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_cli_refuses_a_read_only_or_impossible_checkpoint_dir_before_starting(cli, tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    code, _, err = cli("train", "--nproc", "2", "--checkpoint-dir", str(tmp_path / "file" / "ck"), "--out",
                       str(tmp_path / "run"))
    assert code == 2 and err.count("\n") == 1
    assert f"checkpoint directory {tmp_path / 'file' / 'ck'} is not writable (Not a directory)" in err
    monkeypatch.setenv("TRAINPLAN_FAULT", "readonly")  # root: chmod cannot make it read-only
    code, _, err = cli("train", "--nproc", "2", "--checkpoint-dir", str(tmp_path / "ck"), "--out", str(tmp_path / "run"))
    assert code == 2 and "is not writable (Read-only file system" in err
    assert not (tmp_path / "run").exists()  # nothing started


def test_ranks_refuse_a_read_only_checkpoint_dir_before_building_the_model(tmp_path):
    plan = plan_file(tmp_path / "plan.json")
    p = subprocess.run(_rank_argv(plan, tmp_path / "run", tmp_path / "ck"), capture_output=True, text=True,
                       timeout=240, check=False, env={**os.environ, "OMP_NUM_THREADS": "1",
                                                       "TRAINPLAN_FAULT": "readonly"})
    assert p.returncode != 0
    errors = _errors(p.stderr)
    assert len(errors) == 1 and "is not writable (Read-only file system" in errors[0]  # said once, by rank 0
    assert trainplan_frames(p.stderr) == [] and not (tmp_path / "run").exists()


@needs_mounts
def test_a_really_read_only_or_too_small_directory_is_refused_in_seconds(tmp_path):
    ro, small = tmp_path / "ro", tmp_path / "small"
    ro.mkdir()
    small.mkdir()
    cli = [sys.executable, "-m", "trainplan", "train", "--nproc", "2", "--out", str(tmp_path / "run")]
    p = _in_private_mount(
        f"mount --bind {ro} {ro}; mount -o remount,bind,ro {ro}; mount -t tmpfs -o size=20m tmpfs {small}",
        [*cli, "--checkpoint-dir", str(ro / "ck")], [*cli, "--checkpoint-dir", str(small)])
    errors = _errors(p.stderr, "trainplan train: error:")
    assert len(errors) == 2, p.stderr[-3000:]
    assert f"checkpoint directory {ro / 'ck'} is not writable (Read-only file system)" in errors[0]
    # 20 MiB: two saves of this plan write 21.1 MiB; counting the states alone (18.8 MiB) passed it (issue 27)
    assert f"checkpoint directory {small} has 20.0 MiB free but 2 checkpoints of this plan need about" in errors[1]
    assert "MiB weights and AdamW states" in errors[1] and "5% margin" in errors[1]
    assert p.stdout.count("exit=2") == 2 and not (tmp_path / "run").exists()


def test_enospc_in_a_save_stops_with_one_line_and_keeps_the_previous_checkpoint(tmp_path):
    plan = plan_file(tmp_path / "plan.json", steps=6, checkpoint_every=2)
    out, ck = tmp_path / "run", tmp_path / "ck"
    p = torchrun(*_rank_argv(plan, out, ck)[3:], env={"TRAINPLAN_FAULT": "enospc@4:1"})
    assert p.returncode != 0
    errors = _errors(p.stderr)
    assert len(errors) == 1 and errors[0].startswith(
        f"trainplan.runtime: error: no space left on device while saving the checkpoint of step 4 in {ck} (")
    assert "the previous checkpoint step-00000002 is intact: free space or point --checkpoint-dir" in errors[0]
    assert "inline_container" not in p.stderr and trainplan_frames(p.stderr) == []
    assert sorted(x.name for x in ck.iterdir()) == ["step-00000002"]  # the failed one removed, room given back
    assert json.loads((out / "summary.json").read_text())["stopped_by"] == "save failed"
    p = torchrun(*_rank_argv(plan, out, ck)[3:])
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads((out / "summary.json").read_text())["resumed_from"] == str(ck / "step-00000002")
    assert [r["step"] for r in read_jsonl(out / "measurements.jsonl")] == [1, 2, 3, 4, 5, 6]


@needs_mounts
def test_a_really_full_disk_in_a_save_says_so_and_the_restart_resumes(tmp_path):
    # A 48 MiB tmpfs passes the start-up check (two checkpoints of ~11 MiB); before the save of
    # step 4 the fault switch fills it, and torch's own writer hits the real ENOSPC.
    plan = plan_file(tmp_path / "plan.json", steps=6, checkpoint_every=2)
    out, ck = tmp_path / "run", tmp_path / "ck"
    ck.mkdir()
    argv = _rank_argv(plan, out, ck)
    p = _in_private_mount(f"mount -t tmpfs -o size=48m tmpfs {ck}",
                          ["env", "TRAINPLAN_FAULT=fill@4", *argv],
                          ["sh", "-c", f"ls {ck} > {tmp_path / 'after-full.txt'}; rm {ck}/.fault-ballast"],
                          [*argv, "--stop-at-step", "5"])
    errors = _errors(p.stderr)
    assert len(errors) == 1, p.stderr[-4000:]
    assert errors[0].startswith(f"trainplan.runtime: error: no space left on device while saving the checkpoint "
                                f"of step 4 in {ck}")
    assert "the previous checkpoint step-00000002 is intact" in errors[0]
    assert "inline_container" not in p.stderr and trainplan_frames(p.stderr) == []
    assert (tmp_path / "after-full.txt").read_text().split() == ["step-00000002"]
    s = json.loads((out / "summary.json").read_text())
    assert s["resumed_from"] == str(ck / "step-00000002") and s["steps"] == 5


@needs_mounts
def test_a_save_needs_room_for_two_checkpoints_not_three(tmp_path):
    # 28 MiB holds two checkpoints of this plan (~10.6 MiB each on disk) but not three: keep-last-2
    # pruning after the third save would hit ENOSPC; pruning down to one before it does not.
    plan = plan_file(tmp_path / "plan.json", steps=6, checkpoint_every=2)
    out, ck = tmp_path / "run", tmp_path / "ck"
    ck.mkdir()
    p = _in_private_mount(f"mount -t tmpfs -o size=28m tmpfs {ck}", _rank_argv(plan, out, ck),
                          ["sh", "-c", f"ls {ck} > {tmp_path / 'kept.txt'}"])
    assert "exit=" not in p.stdout, p.stderr[-3000:]
    assert (tmp_path / "kept.txt").read_text().split() == ["step-00000004", "step-00000006"]
    assert json.loads((out / "summary.json").read_text())["checkpoint"] == str(ck / "step-00000006")
