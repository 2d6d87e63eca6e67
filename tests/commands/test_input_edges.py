"""The CLI's edge: usage errors are one line with exit 2, numbers are finite and bounded, output
paths are checked before any work, and JSON in or out never holds NaN or infinity."""

import json

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
