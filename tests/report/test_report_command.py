"""`trainplan report FILE [--html OUT]`: terminal summary or HTML for plan/compare/validate JSON."""

from __future__ import annotations

import json

import pytest
import report_samples as S


@pytest.fixture
def files(tmp_path):
    out = {}
    for name, data in (("plan.json", S.plan_result()["plan"]), ("plan_out.json", S.plan_result()),
                       ("compare.json", S.compare_result()), ("validate.json", S.validate_result())):
        (tmp_path / name).write_text(json.dumps(data))
        out[name] = str(tmp_path / name)
    return out


def test_plan_json_summary_fits_80_columns(cli, files):
    code, out, err = cli("report", files["plan_out.json"])
    assert code == 0, err
    assert out.splitlines()[0] == "llama-3.1-70b on 2 x ml.p6-b200.48xlarge, 16 GPUs"
    assert "chosen: fp8_rowwise ac=full mb=1 ga=8 dp=2x8(fsdp)" in out
    assert "runners-up:" in out and "Pareto set" in out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "\x1b[" not in out  # captured output is not a terminal
    code, same, _ = cli("report", files["plan.json"])  # plan.json itself: the same text
    assert same == out


def test_plan_command_and_report_print_one_rendering(cli, tmp_path):
    f = tmp_path / "plan.json"
    code, out, err = cli("plan", "--model", "llama-3.1-8b", "--out", str(f))
    assert code == 0, err
    code, report, _ = cli("report", str(f))
    # `plan` adds its priority and what the search did; the rest is the report's own text
    body = out.splitlines()[1:-2]
    assert report.splitlines()[1:] == body
    assert out.splitlines()[0] == report.splitlines()[0] + ", priority throughput"


def test_json_of_each_kind(cli, files):
    for name, kind in (("plan.json", "plan"), ("compare.json", "compare"), ("validate.json", "validate")):
        code, out, err = cli("report", files[name], "--json")
        assert code == 0, err
        assert json.loads(out)["kind"] == kind
    d = json.loads(cli("report", files["compare.json"], "--json")[1])
    assert d["rows"][0]["usd_per_million_tokens"] == 3.421


def test_compare_and_validate_summaries(cli, files):
    code, out, _ = cli("report", files["compare.json"])
    assert code == 0 and "p4d.24xlarge: does not fit in 4 nodes" in out
    assert out.splitlines()[3].split()[-2:] == ["3,421", "625.6"]  # $/B tokens and days
    code, out, _ = cli("report", files["validate.json"])
    assert code == 0 and out.splitlines()[0].startswith("id  ")
    assert "skipped M009: global batch not published" in out
    assert max(len(line) for line in out.splitlines()) <= 80


def test_validate_command_and_report_print_one_rendering(cli, tmp_path):
    code, out, err = cli("validate", "--json")
    assert code == 0, err
    f = tmp_path / "validate.json"
    f.write_text(out)
    assert cli("report", str(f))[1] == cli("validate")[1]


@pytest.mark.parametrize("name", ["plan.json", "plan_out.json", "compare.json", "validate.json"])
def test_html_for_each_kind(cli, files, tmp_path, name):
    target = tmp_path / "r" / "report.html"
    target.parent.mkdir()  # --html writes into a directory, never creates one (parsing.output_file_in_dir)
    code, out, err = cli("report", files[name], "--html", str(target))
    assert (code, out) == (0, "")
    assert err == f"wrote {target}\n"  # stderr: stdout stays for data
    assert target.read_text().startswith("<!DOCTYPE html>")


def test_unknown_json_is_one_line_error(cli, tmp_path):
    p = tmp_path / "x.json"
    p.write_text('{"hello": 1}')
    code, _, err = cli("report", str(p))
    assert code == 2
    assert err == ("trainplan report: error: cannot tell what this JSON is: expected a plan.json "
                   "(schema trainplan-plan/1) or the --json output of `trainplan plan`, `compare` "
                   "or `validate`\n")


def test_missing_file_and_impossible_plan(cli, tmp_path):
    code, _, err = cli("report", str(tmp_path / "nope.json"))
    assert code == 2 and "does not exist or is not a file" in err
    plan = S.plan_result()["plan"]
    plan["layout"]["tp"] = 3
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(plan))
    target = tmp_path / "bad.html"
    code, _, err = cli("report", str(p), "--html", str(target))
    assert code == 2 and err.startswith(f"trainplan report: error: {p}: ")
    assert not target.exists()


def test_html_hook_for_other_commands(tmp_path, capsys, monkeypatch):
    import argparse

    from trainplan.errors import TrainplanError
    from trainplan.report.cli import add_html_argument, write_html

    p = argparse.ArgumentParser()
    add_html_argument(p)
    write_html(p.parse_args([]), "compare", S.compare_result())  # no --html: nothing happens
    assert capsys.readouterr() == ("", "")
    target = tmp_path / "c.html"
    write_html(p.parse_args(["--html", str(target)]), "compare", S.compare_result())
    assert target.read_text().startswith("<!DOCTYPE html>")
    assert capsys.readouterr().err == f"wrote {target}\n"
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(TrainplanError, match=r"^HTML reports need plotly: pip install 'trainplan\[report\]'$"):
        write_html(p.parse_args(["--html", str(tmp_path / "x.html")]), "plan", S.plan())
    assert not (tmp_path / "x.html").exists()


def test_terminal_helpers_do_not_import_plotly():
    """The planner commands print through report.terminal/progress/summary: they must start fast."""
    import subprocess
    import sys

    code = ("import sys; import trainplan.report, trainplan.report.terminal, trainplan.report.progress, "
            "trainplan.report.summary, trainplan.report.records, trainplan.report.cli, "
            "trainplan.commands.report; assert 'plotly' not in sys.modules, 'plotly imported'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
