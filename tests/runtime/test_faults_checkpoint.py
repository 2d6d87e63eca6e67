"""Fault injection, checkpoints (2 gloo ranks): a corrupt, truncated or empty newest checkpoint,
a kill in the middle of a save. In each case the restart names the bad checkpoint, takes the
previous good one, and trains on to the same losses as a run that was never interrupted (so it
lost only the steps after that checkpoint and loaded nothing corrupt), and measurements.jsonl
holds every step once."""

import json
import shutil

import pytest
from runtime_helpers import plan_file, read_jsonl, torchrun

pytestmark = [pytest.mark.torch, pytest.mark.distributed, pytest.mark.slow]


def _train(out, plan, *extra, env=None):
    return torchrun("-m", "trainplan.runtime", "--plan", str(plan), "--fit-world", "--device", "cpu",
                    "--no-progress",
                    "--out", str(out), *extra, env=env)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A 6-step plan that checkpoints every 2 steps: its uninterrupted losses, and a run stopped
    after step 4 (checkpoints step-2 and step-4, measurements of steps 1-4)."""
    d = tmp_path_factory.mktemp("base")
    plan = plan_file(d / "plan.json", steps=6, checkpoint_every=2)
    p = _train(d / "ref", plan)
    assert p.returncode == 0, p.stderr[-3000:]
    p = _train(d / "run", plan, "--checkpoint-dir", str(d / "ck"), "--stop-at-step", "4")
    assert p.returncode == 0, p.stderr[-3000:]
    assert sorted(x.name for x in (d / "ck").iterdir()) == ["step-00000002", "step-00000004"]
    return d, plan, [r["loss"] for r in read_jsonl(d / "ref" / "measurements.jsonl")]


def _copy(base, tmp_path):
    d, plan, ref = base
    shutil.copytree(d / "ck", tmp_path / "ck")
    shutil.copytree(d / "run", tmp_path / "run")
    return tmp_path / "ck", tmp_path / "run", plan, ref


def _resume(ck, out, plan, ref, expect_from: str):
    p = _train(out, plan, "--checkpoint-dir", str(ck))
    assert p.returncode == 0, p.stderr[-3000:]
    s = json.loads((out / "summary.json").read_text())
    assert s["resumed_from"] == str(ck / expect_from)
    recs = read_jsonl(out / "measurements.jsonl")
    assert [r["step"] for r in recs] == [1, 2, 3, 4, 5, 6]  # each step once, the replayed ones replaced
    assert [r["loss"] for r in recs] == ref  # bit for bit: the good checkpoint, nothing corrupt
    return p, s


def test_flipped_bytes_in_a_shard_fall_back_to_the_previous_checkpoint(base, tmp_path):
    ck, out, plan, ref = _copy(base, tmp_path)
    shard = ck / "step-00000004" / "__1_0.distcp"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2: len(data) // 2 + 16] = bytes(b ^ 0xFF for b in data[len(data) // 2: len(data) // 2 + 16])
    shard.write_bytes(bytes(data))
    p, s = _resume(ck, out, plan, ref, expect_from="step-00000002")
    warning = [line for line in p.stderr.splitlines() if "warning: checkpoint" in line]
    assert len(warning) == 1 and "step-00000004 is unusable (__1_0.distcp does not match its sha256" in warning[0]
    assert s["skipped_checkpoints"][0].startswith(str(ck / "step-00000004"))
    assert (ck / "step-00000004.bad" / "__1_0.distcp").is_file()  # kept for a person, out of the way


def test_a_truncated_shard_falls_back_to_the_previous_checkpoint(base, tmp_path):
    ck, out, plan, ref = _copy(base, tmp_path)
    shard = ck / "step-00000004" / "__0_0.distcp"
    shard.write_bytes(shard.read_bytes()[:1000])
    p, _ = _resume(ck, out, plan, ref, expect_from="step-00000002")
    assert "__0_0.distcp has 1000 bytes" in p.stderr


def test_an_empty_newest_step_directory_is_skipped(base, tmp_path):
    ck, out, plan, ref = _copy(base, tmp_path)
    (ck / "step-00000006").mkdir()  # a half-synced or emptied directory, newer than the good ones
    p, _ = _resume(ck, out, plan, ref, expect_from="step-00000004")
    assert "step-00000006 is unusable (empty directory)" in p.stderr


def test_no_usable_checkpoint_stops_instead_of_starting_over(base, tmp_path):
    ck, out, plan, _ = _copy(base, tmp_path)
    for step in ("step-00000002", "step-00000004"):
        (ck / step / "manifest.json").unlink()
    p = _train(out, plan, "--checkpoint-dir", str(ck))
    assert p.returncode != 0
    errors = [line for line in p.stderr.splitlines() if line.startswith("trainplan.runtime: error:")]
    assert len(errors) == 1 and f"no usable checkpoint in {ck}: step-00000004 (no manifest.json" in errors[0]
    assert sorted(x.name for x in ck.iterdir()) == ["step-00000002", "step-00000004"]  # left as they were


def test_a_kill_in_the_middle_of_a_save_leaves_the_previous_checkpoint(base, tmp_path):
    _, plan, ref = base
    ck, out = tmp_path / "ck", tmp_path / "run"
    # rank 1 dies after writing its shards of step 4, before the manifest: torchrun stops rank 0
    p = _train(out, plan, "--checkpoint-dir", str(ck), env={"TRAINPLAN_FAULT": "killsave@4:1"})
    assert p.returncode != 0
    assert sorted(x.name for x in ck.iterdir()) == ["step-00000002", "step-00000004.partial"]
    _resume(ck, out, plan, ref, expect_from="step-00000002")
    assert sorted(x.name for x in ck.iterdir()) == ["step-00000004", "step-00000006"]  # .partial cleared
