"""The pieces of fault tolerance, one process each: the fault switch, manifests, retention,
preflight, the non-finite guard and the schedule after a change of --steps."""

import errno
import itertools
import json
import math
from dataclasses import replace

import pytest

from trainplan.errors import TrainplanError
from trainplan.runtime import faults, manifest, preflight, retention
from trainplan.runtime.numerics import NonFiniteGuard
from trainplan.runtime.optim import WarmupCosine, lr_factor


def test_fault_switch_is_inert_unset_and_parses_steps_ranges_and_ranks(monkeypatch):
    monkeypatch.delenv(faults.ENV, raising=False)
    assert not faults.active("nan", 3) and not faults.active("readonly")
    monkeypatch.setenv(faults.ENV, "nan@3-5, kill@7:1, enospc@4-, readonly")
    monkeypatch.setenv("RANK", "0")
    assert [s for s in range(1, 9) if faults.active("nan", s)] == [3, 4, 5]
    assert not faults.active("kill", 7)  # rank 1 only
    monkeypatch.setenv("RANK", "1")
    assert faults.active("kill", 7) and not faults.active("kill", 6)
    assert faults.active("enospc", 40) and not faults.active("enospc", 3)
    assert faults.active("readonly")
    monkeypatch.setenv(faults.ENV, "nan@x")
    with pytest.raises(TrainplanError, match="cannot read 'nan@x'"):
        faults.active("nan", 1)


def test_enospc_fault_raises_the_errno_a_full_disk_raises(monkeypatch):
    monkeypatch.setenv(faults.ENV, "enospc@2")
    faults.after_shards(1)
    with pytest.raises(OSError) as e:
        faults.after_shards(2)
    assert e.value.errno == errno.ENOSPC


def _checkpoint(d, files):
    d.mkdir(parents=True)
    for name, body in files.items():
        (d / name).write_bytes(body)
    manifest.write(d, 1, 1, manifest.describe(d, sorted(files)))


def test_manifest_tells_intact_truncated_corrupted_missing_and_unfinished(tmp_path):
    d = tmp_path / "step-00000001"
    _checkpoint(d, {"__0_0.distcp": b"a" * 1000, ".metadata": b"meta"})
    body, why = manifest.read(d)
    assert why == "" and set(body["files"]) == {"__0_0.distcp", ".metadata"}
    names = sorted(body["files"])
    assert manifest.check(d, body["files"], names, digests=True) == ""
    shard = d / "__0_0.distcp"
    shard.write_bytes(b"a" * 500 + b"b" + b"a" * 499)  # one byte flipped, same size
    assert manifest.check(d, body["files"], names, digests=False) == ""
    assert "does not match its sha256" in manifest.check(d, body["files"], names, digests=True)
    shard.write_bytes(b"a" * 10)
    assert "has 10 bytes, its manifest says 1000" in manifest.check(d, body["files"], names, digests=True)
    shard.unlink()
    assert manifest.check(d, body["files"], names, digests=True) == "__0_0.distcp is missing"
    (tmp_path / "step-00000002").mkdir()
    assert manifest.read(tmp_path / "step-00000002") == (None, "empty directory")
    (tmp_path / "step-00000002" / "__0_0.distcp").write_bytes(b"x")
    assert manifest.read(tmp_path / "step-00000002")[1] == "no manifest.json (its save did not finish)"


def test_prune_keeps_the_newest_and_the_pinned_checkpoint(tmp_path):
    for s in (2, 4, 6, 8):
        retention.step_dir(tmp_path, s).mkdir()
    (tmp_path / "step-00000010.partial").mkdir()
    retention.pin(tmp_path, 4, "before the first non-finite step")
    retention.pin(tmp_path, 6, "a later pin does not move the first")
    retention.prune(tmp_path, 2)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == \
           ["step-00000004", "step-00000006", "step-00000008", "step-00000010.partial"]
    retention.prune(tmp_path, 1)  # room for one being written: the newest stays, and the pinned
    retention.remove_stale(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["step-00000004", "step-00000008"]
    assert retention.move_aside(tmp_path / "step-00000008").name == "step-00000008.bad"
    assert [s for s, _ in retention.finished(tmp_path)] == [4]


def test_a_gpu_plan_needs_a_gpu_unless_asked_for_cpu():
    with pytest.raises(TrainplanError, match="pass --device cpu"):
        preflight.choose_device(None, gpu_plan=True, cuda_available=False)
    with pytest.raises(TrainplanError):
        preflight.choose_device("cuda", gpu_plan=False, cuda_available=False)
    assert preflight.choose_device("cpu", gpu_plan=True, cuda_available=True) == "cpu"
    assert preflight.choose_device(None, gpu_plan=True, cuda_available=True) == "cuda"
    assert preflight.choose_device(None, gpu_plan=False, cuda_available=False) == "cpu"  # the demo


def test_a_mamba_model_on_gpus_needs_the_scan_kernels_it_was_costed_with():
    """Nemotron-H (Mamba-2) and Jamba (Mamba-1) plans cost mamba_ssm's fused scans: on CUDA without
    them the trainer refuses before it starts (transformers' reference scan would hold ~7x the
    activations); on CPU, and for models without Mamba layers, nothing is asked."""
    from trainplan.models import resolve

    none = lambda name: None  # nothing installed
    for name in ("nemotron-h-8b", "jamba-1.5-mini"):
        with pytest.raises(TrainplanError) as e:
            preflight.check_scan_kernels(resolve(name), "cuda", find=none)
        text = str(e.value)
        assert "mamba_ssm and causal_conv1d are not installed" in text and "pip install mamba-ssm" in text
        assert "\n" not in text
        preflight.check_scan_kernels(resolve(name), "cpu", find=none)
    with pytest.raises(TrainplanError, match="causal_conv1d is not installed"):
        preflight.check_scan_kernels(resolve("nemotron-h-8b"), "cuda", find=lambda n: None if n == "causal_conv1d" else n)
    preflight.check_scan_kernels(resolve("nemotron-h-8b"), "cuda", find=lambda n: n)  # both there
    preflight.check_scan_kernels(resolve("llama-3.1-8b"), "cuda", find=none)  # no Mamba layers


def _size(total: float) -> preflight.CheckpointSize:
    return preflight.CheckpointSize(states=total, counters=0, framing=0, metadata=0, extras=0, margin=0)


def test_checkpoint_size_counts_states_records_metadata_extras_and_a_margin():
    from trainplan.models.params import count_params
    from trainplan.runtime.demo import demo_plan

    plan = demo_plan(2)
    n = count_params(plan.job.model).total
    one = preflight.checkpoint_size(plan, world=2, tensors=38)
    assert one.states == 12 * n  # fp32 master + AdamW m, v
    pure = replace(plan, layout=plan.layout.with_(precision="bf16_pure"))
    assert preflight.checkpoint_size(pure, world=2, tensors=38).states == 6 * n
    # 38 tensors x (3 pieces per rank x 2 ranks + a step) records, 12 settings each, their metadata
    assert one.framing == 38 * 7 * preflight.ITEM_BYTES + 38 * preflight.GROUP_KEYS * preflight.GROUP_ITEM_BYTES
    assert one.metadata == 38 * (7 + preflight.GROUP_KEYS) * preflight.METADATA_ITEM_BYTES
    assert one.margin == pytest.approx(preflight.MARGIN * (one.total - one.margin))
    # more ranks, more pieces; replicas (dp_replicate) are written once
    assert preflight.checkpoint_size(plan, world=4, tensors=38).framing > one.framing
    hsdp = replace(plan, layout=plan.layout.with_(dp_replicate=2, dp_shard=1))
    assert preflight.checkpoint_size(hsdp, world=2, tensors=38).framing < one.framing


def test_preflight_refuses_a_directory_without_room_for_two_checkpoints(tmp_path):
    import shutil

    free = shutil.disk_usage(tmp_path).free
    preflight.check_checkpoint_dir(tmp_path / "ok", _size(1e6))
    with pytest.raises(TrainplanError) as e:
        preflight.check_checkpoint_dir(tmp_path / "ck", _size(free))  # two need twice what is free
    assert "free but 2 checkpoints of this plan need about" in str(e.value) and "\n" not in str(e.value)
    # checkpoints already there are room a save reclaims (it prunes them first)
    old = retention.step_dir(tmp_path / "ck", 1)
    old.mkdir()
    (old / "shard").write_bytes(b"x" * 4096)
    assert preflight.held_bytes(tmp_path / "ck") == 4096


def test_preflight_names_an_unwritable_directory(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    with pytest.raises(TrainplanError, match=r"checkpoint directory .*file/ck is not writable \(Not a directory\)"):
        preflight.check_checkpoint_dir(tmp_path / "file" / "ck", _size(1.0))
    # Tests run as root here, where chmod cannot make a directory read-only: the switch raises EROFS.
    monkeypatch.setenv(faults.ENV, "readonly")
    with pytest.raises(TrainplanError, match=r"is not writable \(Read-only file system\)"):
        preflight.check_checkpoint_dir(tmp_path / "ck", _size(1.0))


def test_a_full_disk_is_recognised_by_errno_or_by_the_room_left(tmp_path):
    from torch.distributed.checkpoint.api import CheckpointException

    enospc = OSError(errno.ENOSPC, "No space left on device")
    wrapped = CheckpointException("save failed", {1: (enospc, None)})
    assert preflight.looks_like_disk_full(wrapped, tmp_path, one_checkpoint=1.0)
    torch_zip = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
    assert not preflight.looks_like_disk_full(torch_zip, tmp_path, one_checkpoint=1.0)
    assert preflight.looks_like_disk_full(torch_zip, tmp_path, one_checkpoint=1e30)


def test_guard_skips_non_finite_steps_and_is_exhausted_after_k_in_a_row():
    g = NonFiniteGuard(max_in_row=2)
    assert not g.skip(1, 3.0, 1.0)
    assert g.skip(2, math.nan, 1.0) and not g.exhausted
    assert not g.skip(3, 3.0, 1.0)  # a finite step ends the streak
    assert g.skip(4, 3.0, math.inf) and g.skip(5, math.nan, math.nan) and g.exhausted
    assert g.skipped == 3
    assert g.message(5, "ck/step-00000003").startswith(
        "loss or gradient norm not finite for 2 steps in a row (steps 4-5, --max-nonfinite 2)")
    fp16 = NonFiniteGuard(check_grad_norm=False)  # the loss scaler owns infinite gradients
    assert not fp16.skip(1, 3.0, math.inf)


def test_schedule_after_a_longer_resume_continues_down_from_where_it_was():
    s = WarmupCosine(warmup=3, total=6, min_ratio=0.1)
    before = [s(i) for i in range(6)]
    s.retarget(at_step=4, total=10)
    after = [s(i) for i in range(4, 11)]
    assert after[0] == pytest.approx(before[4])  # no jump at the resume
    assert all(a >= b for a, b in itertools.pairwise(after))  # never rises
    assert after[-1] == pytest.approx(0.1) and s(3 + 1) > lr_factor(5, 3, 6, 0.1)
    naive = lr_factor(4, 3, 10, 0.1)  # what a schedule rebuilt for 10 steps would give at step 4
    assert naive > before[4]


def test_schedule_resumed_in_warmup_or_with_the_same_steps():
    s = WarmupCosine(warmup=3, total=6, min_ratio=0.1)
    s.retarget(at_step=2, total=10)  # still warming up: as if started with 10 steps
    assert [s(i) for i in range(11)] == [lr_factor(i, 3, 10, 0.1) for i in range(11)]
    same = WarmupCosine(3, 6, 0.1)
    same.retarget(at_step=4, total=6)
    assert [same(i) for i in range(7)] == [lr_factor(i, 3, 6, 0.1) for i in range(7)]


def test_schedule_state_travels_in_the_scheduler_state_dict():
    import torch

    from trainplan.plan import TrainSettings
    from trainplan.runtime.optim import make_optimizer, retarget

    model = torch.nn.Linear(2, 2)
    opt, sched = make_optimizer(model, TrainSettings(warmup_steps=2), 8)
    for _ in range(5):
        opt.step()
        sched.step()
    state = json.loads(json.dumps(sched.state_dict(), default=list))
    _, sched2 = make_optimizer(torch.nn.Linear(2, 2), TrainSettings(warmup_steps=2), 20)
    sched2.load_state_dict(state)
    assert sched2.lr_lambdas[0].total == 8  # the saved run's total, not this run's
    retarget(sched2, 5, 20)
    assert sched2.lr_lambdas[0](5) == pytest.approx(sched.lr_lambdas[0](5))


def test_checkpoint_every_is_refused_at_the_edge_unless_positive_and_with_a_directory(cli, tmp_path):
    for bad in ("0", "-3", "two"):
        code, _, err = cli("train", "--checkpoint-every", bad, "--out", str(tmp_path / "run"))
        assert code == 2 and err.count("\n") == 1 and "--checkpoint-every: expected an integer >= 1" in err
    code, _, err = cli("train", "--checkpoint-every", "2", "--out", str(tmp_path / "run"))
    assert code == 2 and err.strip() == "trainplan train: error: --checkpoint-every needs --checkpoint-dir: where the checkpoints go"
    assert not (tmp_path / "run").exists()
