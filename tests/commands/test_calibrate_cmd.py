"""Probe, calibrate, re-plan on the trainer's own CPU runs: `trainplan calibrate` fits on two runs of
different layouts, writes a profile that `plan --profile` and `compare-run --profile` read, and
reports the leave-one-run-out error with the error before."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from trainplan.runtime.demo import demo_plan

    root = tmp_path_factory.mktemp("runs")
    env = os.environ | {"PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    dirs = []
    for name, kw in (("mb4", {"micro_batch": 4}), ("mb2-full", {"micro_batch": 2, "ac": "full"})):
        (root / f"{name}.json").write_text(demo_plan(8, steps=4, **kw).to_json())
        r = subprocess.run([sys.executable, "-m", "trainplan.runtime", "--plan", str(root / f"{name}.json"),
                            "--fit-world", "--device", "cpu", "--steps", "4", "--out", str(root / name),
                            "--no-progress"],
                           env=env, capture_output=True, text=True, timeout=300, check=False)
        assert r.returncode == 0, r.stderr[-2000:]
        dirs.append(str(root / name))
    return dirs


def test_calibrate_writes_a_profile_plan_and_compare_run_read(cli, runs, tmp_path):
    out = tmp_path / "cal.json"
    code, stdout, err = cli("calibrate", "--runs", *runs, "--out", str(out), "--json")
    assert code == 0, err
    d = json.loads(stdout)
    cv = d["cv_error"]
    assert cv["method"] == "leave one run out" and set(cv["runs"]) == {"mb4", "mb2-full"}
    assert cv["tokens_per_s_per_gpu"]["before"]["count"] == 2
    from trainplan.profile import load_profile

    prof = load_profile(out)
    assert prof.name == "calibrated" and set(prof.folds) == {"mb4", "mb2-full"}
    code, _, err = cli("plan", "--model", "llama-3.2-1b", "--instance", "ml.p5e.48xlarge", "--profile", str(out))
    assert code == 0, err
    code, stdout, err = cli("compare-run", runs[0], "--profile", str(out), "--json")
    assert code == 0, err
    c = json.loads(stdout)
    assert c["calibrated"]["profile"] == str(out) and len(c["calibrated"]["rows"]) == len(c["rows"])


def test_a_directory_that_is_not_a_run_is_a_one_line_error(cli, tmp_path):
    code, _, err = cli("calibrate", "--runs", str(tmp_path), "--out", str(tmp_path / "p.json"))
    assert code == 2 and "not a run directory" in err and not (tmp_path / "p.json").exists()
