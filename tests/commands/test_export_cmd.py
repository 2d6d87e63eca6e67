"""`trainplan export --plan P --to torchtitan [--out DIR]` and `trainplan estimate --from FILE`:
files printed or written whole, errors in one line with nothing written, and the estimate of an
exported config equal to the plan's."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "export"))
from tt_plans import plan_of

GOOD = "fp8_rowwise ac=selective mb=1 ga=16 dp=1x2(fsdp) tp=2 pp=2 interleaved/v2 torch_compile=true stack=torchtitan"


def _plan(tmp_path, text=GOOD) -> str:
    p = tmp_path / "plan.json"
    p.write_text(plan_of(text).to_json())
    return str(p)


def test_without_out_the_files_are_printed_under_their_names(cli, tmp_path):
    code, out, err = cli("export", "--plan", _plan(tmp_path), "--to", "torchtitan")
    assert code == 0, err
    assert out.startswith("# trainplan_job.py\n") and "def trainplan_job() -> Trainer.Config:" in out


def test_out_writes_the_files_and_estimate_from_gives_the_plans_numbers(cli, tmp_path):
    plan = _plan(tmp_path)
    code, out, err = cli("export", "--plan", plan, "--to", "torchtitan", "--out", str(tmp_path / "job"))
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "job").iterdir()) == ["trainplan_job.py"]
    code, out, err = cli("estimate", "--from", str(tmp_path / "job" / "trainplan_job.py"),
                         "--instance", "ml.p5.48xlarge", "--json")
    assert code == 0, err
    got = json.loads(out)
    assert got["estimate"]["tokens_per_s"] == json.loads(Path(plan).read_text())["estimate"]["tokens_per_s"]
    assert got["from"][0].endswith("as torchtitan 0.3.0")


def test_a_refused_plan_is_one_line_and_writes_nothing(cli, tmp_path):
    plan = _plan(tmp_path, "bf16 ac=full mb=1 ga=1 dp=1x8(zero1) stack=torchtitan")
    code, _out, err = cli("export", "--plan", plan, "--to", "torchtitan", "--out", str(tmp_path / "job"))
    assert code == 2 and err.count("\n") == 1 and "sharding zero1" in err
    assert not (tmp_path / "job").exists() or not any((tmp_path / "job").iterdir())


def test_estimate_from_refuses_flags_it_replaces_and_files_it_cannot_place(cli, tmp_path):
    (tmp_path / "job.py").write_text("def f():\n    return 1\n")
    code, _, err = cli("estimate", "--from", str(tmp_path / "job.py"), "--tp", "2")
    assert code == 2 and "holds the model, batch and layout; leave out --tp" in err and "--from " in err
    code, _, err = cli("estimate", "--from", str(tmp_path / "job.toml"))
    assert code == 2 and "cannot tell which framework's configuration this is; known: .py (nemo/torchtitan)" in err
    code, _, err = cli("estimate", "--from", str(tmp_path / "job.py"))
    assert code == 2 and "the config function must return a config call" in err


def test_json_carries_the_files_and_where_they_went(cli, tmp_path):
    code, out, err = cli("export", "--plan", _plan(tmp_path), "--to", "torchtitan", "--json")
    assert code == 0, err
    got = json.loads(out)
    assert (got["framework"], got["release"], got["out"]) == ("torchtitan", "0.3.0", None)
    assert list(got["files"]) == ["trainplan_job.py"]


def test_megatron_arguments_exported_then_read_by_estimate_from_give_the_plans_numbers(cli, tmp_path):
    """--from tells a Megatron argument list by its suffix (export.FROM_SUFFIXES)."""
    plan = tmp_path / "p.json"
    code, _, err = cli("plan", "--model", "mixtral-8x7b", "--stack", "megatron", "--max-nodes", "4", "--out", str(plan))
    assert code == 0, err
    code, _, err = cli("export", "--plan", str(plan), "--to", "megatron", "--out", str(tmp_path / "mlm"))
    assert code == 0, err
    code, out, err = cli("estimate", "--from", str(tmp_path / "mlm" / "megatron_args.txt"), "--json")
    assert code == 0, err
    got = json.loads(out)
    assert got["estimate"]["tokens_per_s"] == json.loads(plan.read_text())["estimate"]["tokens_per_s"]
    assert got["from"][0].endswith("as megatron 0.16.1")
