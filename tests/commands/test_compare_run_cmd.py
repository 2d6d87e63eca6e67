"""`trainplan compare-run` compares a run with a prediction for the device it ran on: a run on its
plan's GPU reads its measured/predicted ratios; a CPU run, or a run on another GPU, has no such
prediction (the planner has no CPU device) and is refused in one line that says what to do, instead
of the ratio of a CPU's speed to an H200's (issue 27: 3,559 for the step time). Runs are built in
tests/commands/run_dirs.py."""

import json

import pytest
from run_dirs import GPU, SHAPES, slower_gemms, write_run, write_runs


def test_a_run_on_its_plans_gpu_is_compared(cli, tmp_path):
    run = write_run(tmp_path / "r", SHAPES[0], slower=1.25)
    code, out, err = cli("compare-run", str(run), "--json")
    assert code == 0, err
    rows = {r["field"]: r for r in json.loads(out)["rows"]}
    assert rows["tokens_per_s_per_gpu"]["measured_over_predicted"] == pytest.approx(1 / 1.25)
    assert rows["step_time_s"]["measured_over_predicted"] == pytest.approx(1.25)


@pytest.mark.parametrize("json_flag", [(), ("--json",)])
def test_a_cpu_run_is_refused_in_one_line_saying_what_to_do(cli, tmp_path, json_flag):
    run = write_run(tmp_path / "cpurun", SHAPES[0], device="cpu")
    code, out, err = cli("compare-run", str(run), *json_flag)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "ran on cpu" in err and GPU in err and str(run / "summary.json") in err


def test_a_run_on_another_gpu_is_refused(cli, tmp_path):
    run = write_run(tmp_path / "r", SHAPES[0], gpu="a100-sxm-80gb")
    code, _, err = cli("compare-run", str(run))
    assert code == 2 and "ran on a100-sxm-80gb" in err and f"predicts it on {GPU}" in err


def test_a_profile_fitted_on_the_run_predicts_it_by_the_fold_without_it(cli, tmp_path):
    runs = write_runs(tmp_path, slower_gemms(0.85))
    cal = tmp_path / "cal.json"
    assert cli("calibrate", "--runs", *runs, "--out", str(cal))[0] == 0
    code, out, err = cli("compare-run", runs[0], "--profile", str(cal), "--json")
    assert code == 0, err
    c = json.loads(out)["calibrated"]
    assert c["fold"] == "run0" and c["fitted_on"].startswith("profile cal (without run0): fitted on 4 runs")
    ratio = {r["field"]: r["measured_over_predicted"] for r in c["rows"]}["tokens_per_s_per_gpu"]
    errors = json.loads(cal.read_text())["cv_error"]["runs"]["run0"]
    assert ratio == pytest.approx(1 / (1 + errors["after"]))  # the cross-validated prediction of this run
