"""The CLI's edge: usage errors are one line with exit 2, numbers are finite and bounded, output
paths are checked before any work, and JSON in or out never holds NaN or infinity."""

import json
from pathlib import Path

import pytest

from trainplan.commands._common import print_json, tokens
from trainplan.errors import TrainplanError
from trainplan.parsing import MAX_JSON_DEPTH, parse_json, read_json


def _one_line_usage_error(code, out, err, command):
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"trainplan {command}: error: ")
    assert err.rstrip().endswith("(see --help)")


@pytest.mark.parametrize("argv", [
    ["estimate", "--nodes", "x"],
    ["estimate", "--nodes", "0"],
    ["plan", "--priority", "speed"],
    ["launch", "local"],  # --plan is required
    ["estimate", "--bogus", "3"],  # unrecognised: said by the command's parser
    ["fit", "--capacity-gib", "nan"],
    ["plan", "--tolerance", "inf"],
    ["trace", "--model", "llama-3.2-1b", "--fsdp", "-3"],
])
def test_usage_errors_are_one_line_naming_the_command(cli, argv):
    _one_line_usage_error(*cli(*argv), argv[0])


def test_no_command_bare_flags_is_one_line(cli):
    code, _out, err = cli("--bogus")
    assert code == 2 and err == "trainplan: error: unrecognized arguments: --bogus (see --help)\n"


def test_help_still_prints_help(cli):
    code, out, _ = cli("plan", "--help")
    assert code == 0 and out.startswith("usage: trainplan plan")


@pytest.mark.parametrize("text", ["infB", "nanT", "inf", "-5B", "0", "1e30", "2e18"])
def test_token_counts_are_finite_positive_and_bounded(cli, text):
    code, out, err = cli("estimate", "--model", "llama-3.2-1b", "--tokens", text)
    _one_line_usage_error(code, out, err, "estimate")
    assert "argument --tokens" in err


def test_token_suffixes():
    assert [tokens(t) for t in ("1.5T", "300b", "2_000", "1e18")] == [1_500_000_000_000, 300_000_000_000, 2000, 10**18]


@pytest.mark.parametrize("flag, value", [("--price", "nan"), ("--price", "inf"), ("--price", "-1"),
                                         ("--budget", "nan"), ("--budget", "1e400")])
def test_money_is_finite_and_positive(cli, flag, value):
    _one_line_usage_error(*cli("plan", "--model", "llama-3.2-1b", flag, value), "plan")


@pytest.mark.parametrize("flag", ["--out", "--html"])
def test_plan_output_to_a_directory_or_under_a_file_is_refused_before_the_search(cli, tmp_path, flag):
    (tmp_path / "afile").write_text("x")
    for target, why in ((tmp_path, "is a directory"), (tmp_path / "afile" / "p.json", "which is a file")):
        code, out, err = cli("plan", "--model", "llama-3.2-1b", flag, str(target))
        _one_line_usage_error(code, out, err, "plan")
        assert why in err
    assert (tmp_path / "afile").read_text() == "x"


def test_validate_fit_output_is_checked_before_any_work(cli, tmp_path):
    (tmp_path / "afile").write_text("x")
    # the dataset does not even exist: the bad --fit path is refused first, when the flags are read
    code, out, err = cli("validate", "--dataset", str(tmp_path / "none.json"), "--fit",
                         str(tmp_path / "afile" / "profile.json"))
    _one_line_usage_error(code, out, err, "validate")
    assert "--fit" in err


def test_train_out_under_a_file_is_one_line(cli, tmp_path):
    (tmp_path / "afile").write_text("x")
    code, _out, err = cli("train", "--out", str(tmp_path / "afile" / "run"), "--dry-run")
    assert code == 2 and err.count("\n") == 1 and "which is a file, not a directory" in err


def test_print_json_refuses_non_finite_numbers(capsys):
    with pytest.raises(TrainplanError, match=r"non-finite number .* at \$\.a\[1\]\.b"):
        print_json({"a": [1, {"b": float("nan")}]})
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("text, message", [
    ('{"lr": NaN}', "NaN is not a JSON number"),
    ('{"lr": -Infinity}', "-Infinity is not a JSON number"),
    ("[" * 100_000 + "]" * 100_000, f"nests deeper than {MAX_JSON_DEPTH} levels"),
    ("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1), f"nests deeper than {MAX_JSON_DEPTH} levels"),
])
def test_json_is_the_standard_and_bounded(text, message):
    with pytest.raises(TrainplanError, match=message):
        parse_json(text, "plan 'x'")


def test_json_at_the_depth_limit_reads(tmp_path):
    f = tmp_path / "ok.json"
    f.write_text("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH)
    assert read_json(f, "file") == json.loads(f.read_text())


def test_trace_refuses_an_absurd_fsdp_size_at_once(cli):
    # --fsdp 100000 used to run for about half an hour (the fake process group grows with it)
    code, out, err = cli("trace", "--model", "llama-3.2-1b", "--fsdp", "100000")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "fsdp 100000 is past the limit of 1024 ranks" in err


def test_compare_run_with_a_malformed_summary_is_one_line(cli, tmp_path):
    (tmp_path / "summary.json").write_text('{"world_size": "x"}')
    (tmp_path / "plan.json").write_text("{}")
    code, _, err = cli("compare-run", str(tmp_path))
    assert code == 2 and err.count("\n") == 1 and "world_size must be a positive integer, got 'x'" in err


# ---- train: every input checked before any process starts (runtime/inputs.py) ------------------
@pytest.fixture
def no_start(monkeypatch):
    """torchrun must not be started: a refusal has to come before it."""
    from trainplan.launch import supervise

    def refuse(*a, **k):
        raise AssertionError(f"torchrun started: {a}")

    monkeypatch.setattr(supervise, "run", refuse)


def _one_line(code, out, err, command="train"):
    assert code == 2 and out == "", (code, out, err)
    assert err.count("\n") == 1 and err.startswith(f"trainplan {command}: error: ") and "Traceback" not in err, err
    return err


def _data_file(tmp_path, name, content):
    f = tmp_path / name
    if isinstance(content, bytes):
        f.write_bytes(content)
    elif isinstance(content, str):
        f.write_text(content)
    else:  # a numpy array
        import numpy as np

        np.save(f, content)
    return str(f)


def _bad_data(tmp_path):
    import numpy as np

    (tmp_path / "empty-dir").mkdir()
    return [
        (str(tmp_path / "none.jsonl"), "does not exist"),
        ("", "expected one or more comma-separated names"),
        (" , ", "expected one or more comma-separated names"),
        (f"{tmp_path / 'a.txt'},,x", "empty name"),
        (str(tmp_path / "empty-dir"), "holds no"),
        (_data_file(tmp_path, "notes.csv", "a,b\n"), "unknown kind"),
        (_data_file(tmp_path, "bad.jsonl", '{"text": "ok"}\n{"txt": 1}\n'), "bad.jsonl:2: expected a JSON object"),
        (_data_file(tmp_path, "num.jsonl", '{"text": 5}\n'), '"text" must be a string'),
        (_data_file(tmp_path, "latin.jsonl", b'{"text": "caf\xe9"}\n'), "not UTF-8 text"),
        (_data_file(tmp_path, "grid.npy", np.zeros((2, 3), dtype=np.int64)), "expected a 1-D integer array"),
        (_data_file(tmp_path, "float.npy", np.zeros(8, dtype=np.float32)), "expected a 1-D integer array"),
        (_data_file(tmp_path, "big.npy", np.array([1, 2, 10**6], dtype=np.int64)), "holds token id 1000000"),
        (_data_file(tmp_path, "junk.npy", b"not an array"), "not a readable .npy array"),
        (_data_file(tmp_path, "junk.parquet", b"not parquet"), "not a readable parquet file"),
    ]


def test_bad_data_is_refused_before_any_process_starts(cli, tmp_path, no_start):
    for data, why in _bad_data(tmp_path):
        err = _one_line(*cli("train", "--device", "cpu", "--steps", "1", "--out", str(tmp_path / "run"), "--data", data))
        assert why in err, (data, err)
    assert not (tmp_path / "run").exists()  # nothing half-written


def test_good_data_passes_the_checks(cli, tmp_path):
    import numpy as np

    for data in (_data_file(tmp_path, "ok.jsonl", '{"text": "hello"}\n'), _data_file(tmp_path, "ok.txt", "hi"),
                 _data_file(tmp_path, "ok.npy", np.arange(100, dtype=np.int32)), str(tmp_path)):
        code, out, err = cli("train", "--data", data, "--dry-run")
        assert code == 0 and "--data" in out, err


@pytest.mark.parametrize("flag", ["--out", "--tensorboard"])
def test_run_directories_must_be_writable_directories(cli, tmp_path, no_start, flag):
    (tmp_path / "afile").write_text("x")
    cases = [(tmp_path / "afile", "is not a directory"), (tmp_path / "afile" / "run", "which is a file")]
    if Path("/proc/self").is_dir():  # root may write anywhere os.access asks about, but not under /proc
        cases.append((Path("/proc/trainplan-run"), "cannot create a directory in '/proc'"))
    for path, why in cases:
        err = _one_line(*cli("train", "--device", "cpu", "--steps", "1", flag, str(path)))
        assert why in err, err
    assert (tmp_path / "afile").read_text() == "x"


def test_tokenizer_is_checked_before_any_process_starts(cli, tmp_path, no_start):
    (tmp_path / "tok").mkdir()
    for tok, why in ((str(tmp_path / "none.json"), "does not exist"), (str(tmp_path / "tok"), "does not exist"),
                     ("", "--tokenizer is empty")):
        err = _one_line(*cli("train", "--device", "cpu", "--steps", "1", "--tokenizer", tok))
        assert why in err, err


@pytest.mark.parametrize("argv, why", [
    (["--tp", "3"], "tp*pp*cp = 3 does not divide the 1 processes"),
    (["--tp", "2", "--nproc", "2", "--model", "tiny-moe", "--ep", "3"], "ep=3 does not divide the 8 experts"),
    (["--ep", "2", "--nproc", "2"], "ep=2 but demo-llama-tiny has no experts"),
    (["--etp", "1"], "etp=1 splits routed experts, but demo-llama-tiny has none"),
    (["--hf"], "--hf needs a plan with hf_config"),
    (["--model", "nope"], "is not a demo model"),
])
def test_demo_layouts_are_checked_before_any_process_starts(cli, no_start, argv, why):
    assert why in _one_line(*cli("train", "--device", "cpu", *argv))


def _plan_file(cli, tmp_path, **train) -> str:
    code, _, err = cli("plan", "--model", "llama-3.2-1b", "--instance", "ml.p5.48xlarge", "--nodes", "1",
                       "--out", str(tmp_path / "plan.json"))
    assert code == 0, err
    d = json.loads((tmp_path / "plan.json").read_text())
    d["train"].update(train)
    (tmp_path / "plan.json").write_text(json.dumps(d))
    return str(tmp_path / "plan.json")


def test_plan_warmup_longer_than_its_steps_is_refused(cli, tmp_path, no_start):
    plan = _plan_file(cli, tmp_path, steps=50, warmup_steps=100)
    err = _one_line(*cli("train", "--plan", plan, "--dry-run"))
    assert "warmup_steps 100 is longer than the run's 50 steps" in err


def test_a_train_section_without_steps_or_warmup_takes_the_defaults(cli, tmp_path, no_start):
    """A hand-written train section may leave steps and warmup_steps out (the dataclass defaults,
    1000 and 100): the check reads the fields' defaults, not the slotted class's attributes, which
    once made such a plan.json a TypeError traceback (tests/fuzz/test_fuzz_plan_json found it)."""
    plan = _plan_file(cli, tmp_path)
    path = tmp_path / "plan.json"
    d = json.loads(path.read_text())
    for k in ("steps", "warmup_steps"):
        d["train"].pop(k)
    path.write_text(json.dumps(d))
    code, _, err = cli("train", "--plan", plan, "--dry-run")
    assert code == 0 and "Traceback" not in err, err
    d["train"]["steps"] = 50  # the default warmup of 100 is then longer than the run
    path.write_text(json.dumps(d))
    assert "warmup_steps 100 is longer than the run's 50 steps" in _one_line(*cli("train", "--plan", plan, "--dry-run"))


def test_a_plan_of_zero_steps_needs_steps(cli, tmp_path, no_start):
    plan = _plan_file(cli, tmp_path, steps=0)
    err = _one_line(*cli("train", "--plan", plan, "--fit-world", "--nproc", "1", "--device", "cpu"))
    assert "train.steps is 0: give --steps N" in err


@pytest.mark.parametrize("edit, why", [
    (lambda e: e.update(tokens_per_s=-5), "tokens_per_s must be a number >= 0, got -5"),
    (lambda e: e.update(tokens_per_s_per_gpu=0), "tokens_per_s_per_gpu must be > 0"),
    (lambda e: e.pop("peak_mem_gib"), "missing key 'peak_mem_gib'"),
    (lambda e: e.pop("goodput"), "missing key 'goodput'"),
    (lambda e: e["memory"]["gib"].pop("params"), "missing key 'memory.gib.params'"),
    (lambda e: e["memory"]["bytes"].update(total=1.0), "memory.bytes.total is 1.0 but"),
    (lambda e: e.update(step_time_s="NaN"), "step_time_s is 'NaN' but"),
    (lambda e: e["time_s"].update(dp=-0.5), "time_s.dp must be a number >= 0"),
    (lambda e: e["comm"][0].update(count=-1), "comm[0].count must be a number >= 0"),
    (lambda e: e.update(band=[5.0, 1.0]), "band must be two numbers 0 < low <= high"),
    (lambda e: e.update(binding="fast"), "binding must be one of"),
    (lambda e: e["memory"]["activation_groups"].pop("qkv"), "missing 'qkv'"),
])
def test_an_edited_estimate_is_refused(cli, tmp_path, no_start, edit, why):
    plan = _plan_file(cli, tmp_path)
    d = json.loads(Path(plan).read_text())
    edit(d["estimate"])
    Path(plan).write_text(json.dumps(d))
    for argv in (["train", "--plan", plan, "--dry-run"], ["launch", "local", "--plan", plan, "--dry-run"],
                 ["report", plan]):
        err = _one_line(*cli(*argv), argv[0])
        assert why in err, err


def test_vp_needs_pipeline_parallelism(cli):
    err = _one_line(*cli("estimate", "--model", "llama-3.1-8b", "--instance", "ml.p5.48xlarge", "--vp", "3", "--pp", "1"),
                    "estimate")
    assert "vp=3 needs pipeline parallelism (pp > 1)" in err


def test_etp_on_a_dense_model_is_refused(cli):
    err = _one_line(*cli("estimate", "--model", "llama-3.1-8b", "--instance", "ml.p5.48xlarge", "--etp", "1"),
                    "estimate")
    assert "etp=1 splits routed experts, but llama-3.1-8b has none" in err


@pytest.mark.parametrize("value", ["", ",", " , ", "ml.p5.48xlarge,,ml.p4d.24xlarge", "ml.p5.48xlarge,"])
def test_empty_comma_lists_are_refused(cli, value):
    for argv in (["compare", "--model", "llama-3.2-1b", "--instances", value],
                 ["plan", "--model", "llama-3.2-1b", "--instance", value]):
        err = _one_line(*cli(*argv), argv[0])
        assert "comma" in err and err.rstrip().endswith("(see --help)")


@pytest.mark.parametrize("command", [["plan", "--model", "llama-3.2-1b"], ["compare", "--model", "llama-3.2-1b"]])
def test_html_into_a_missing_directory_creates_nothing(cli, tmp_path, command):
    target = tmp_path / "missing" / "deeper" / "r.html"
    err = _one_line(*cli(*command, "--html", str(target)), command[0])
    assert "does not exist; create it first" in err
    assert not (tmp_path / "missing").exists()


def test_the_checks_do_not_import_torch(tmp_path):
    """A bad input is refused before torch is imported (it takes seconds to import, and the
    planner-only install has none): run with torch made unimportable."""
    import subprocess
    import sys

    code = ("import sys; sys.modules['torch'] = None\n"
            "from trainplan.cli import main\n"
            "sys.exit(main(sys.argv[1:]))")
    (tmp_path / "afile").write_text("x")
    for argv in (["train", "--device", "cpu", "--data", str(tmp_path / "none.jsonl")],
                 ["train", "--device", "cpu", "--tp", "3"],
                 ["train", "--device", "cpu", "--tensorboard", str(tmp_path / "afile" / "tb")]):
        p = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120,
                           check=False)
        assert p.returncode == 2 and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr
