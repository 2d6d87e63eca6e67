"""`trainplan calibrate` on run directories (built in tests/commands/run_dirs.py, no torch): it writes
a profile that records what it was fitted on, which `plan --profile` and `estimate --profile` state
in one line, with the band at that profile's cross-validated error; what would poison later plans is
refused in one line and nothing is written (issue 27)."""

import json

from run_dirs import GPU, SHAPES, slower_gemms, write_run, write_runs

from trainplan.profile import default_profile, load_profile


def test_one_cpu_run_for_a_gpu_profile_is_one_line_and_writes_nothing(cli, tmp_path):
    run = write_run(tmp_path / "cpurun", SHAPES[0], device="cpu")
    out = tmp_path / "p.json"
    code, stdout, err = cli("calibrate", "--runs", str(run), "--out", str(out))
    assert code == 2 and stdout == "" and len(err.strip().splitlines()) == 1
    assert "run cpurun ran on cpu" in err and GPU in err and default_profile().name in err
    assert not out.exists()


def test_runs_no_physical_value_explains_are_refused(cli, tmp_path):
    out = tmp_path / "p.json"
    code, _, err = cli("calibrate", "--runs", *write_runs(tmp_path, slower=4), "--out", str(out))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "calibration refused" in err and "its lower bound" in err and not out.exists()


def test_too_few_runs_move_nothing(cli, tmp_path):
    out = tmp_path / "p.json"
    code, _, err = cli("calibrate", "--runs", *write_runs(tmp_path, slower_gemms(0.85), shapes=SHAPES[:2]),
                       "--out", str(out))
    assert code == 2 and "2 run(s) move no coefficient" in err and not out.exists()


def test_calibrate_writes_its_provenance_and_says_what_it_kept(cli, tmp_path):
    out = tmp_path / "h200-cal.json"
    code, stdout, err = cli("calibrate", "--runs", *write_runs(tmp_path, slower_gemms(0.85)), "--out", str(out), "--json")
    assert code == 0, err
    d = json.loads(stdout)
    assert set(d["coefficients"]).isdisjoint(d["kept"]) and all(d["kept"].values())
    cv = d["cv_error"]["tokens_per_s_per_gpu"]
    assert d["cv_error"]["method"] == "leave one run out" and cv["all"]["median_abs"] < cv["before"]["median_abs"]
    prof = load_profile(out)
    f = prof.fitted_on
    assert (f.kind, f.count, f.gpus, f.models) == ("runs", 4, (GPU,), ("llama-3.1-8b", "llama-3.2-1b"))
    assert f.sources == tuple(str((tmp_path / f"run{i}").resolve()) for i in range(4)) and len(f.dates) == 1
    assert prof.name == "h200-cal" and prof.throughput_error(False) == cv["p90_abs"]
    start = default_profile()
    for k in d["kept"]:
        assert getattr(prof, k) == getattr(start, k)  # without evidence, the start profile's value
    code, text, _ = cli("calibrate", "--runs", *map(str, sorted(tmp_path.glob("run*"))), "--out", str(out))
    assert code == 0 and "kept at profile dev-loso's value:" in text and "leave one run out" in text


def test_plan_and_estimate_state_the_profile_and_its_band(cli, tmp_path):
    out = tmp_path / "h200-cal.json"
    assert cli("calibrate", "--runs", *write_runs(tmp_path, slower_gemms(0.85)), "--out", str(out))[0] == 0
    prof = load_profile(out)
    line = f"profile h200-cal: fitted on 4 runs of llama-3.1-8b, llama-3.2-1b on {GPU} ({prof.fitted_on.dates[0]})"
    code, text, err = cli("plan", "--model", "llama-3.2-1b", "--instance", "ml.p5e.48xlarge", "--profile", str(out))
    assert code == 0, err
    assert line in text and "cross-validated error" in text and "outside that fit" not in text
    band = next(x for x in text.splitlines() if "tokens/s at " in x)
    assert "published runs" not in band and "profile h200-cal's p90 error" in band
    assert band.endswith(f"(x/{1 + prof.throughput_error(False):.2f})")
    code, text, err = cli("estimate", "--model", "llama-3.1-70b", "--instance", "ml.p6-b200.48xlarge",
                          "--layout", "bf16 ac=full mb=1 dp=1x8(fsdp)", "--profile", str(out))
    assert code == 0, err
    assert "profile h200-cal: fitted on 4 runs" in text and "this plan's b200-180gb, llama-3.1-70b are outside that fit" in text


def test_a_profile_without_cross_validation_says_its_band_is_assumed(cli, tmp_path):
    old = tmp_path / "old.json"  # what calibrate wrote before it recorded provenance, from one run
    old.write_text(json.dumps({"schema": "trainplan-profile/1", "name": "old", "coefficients": {"gemm_eff": 0.3},
                               "cv_error": {"tokens_per_s_per_gpu": {"all": {"median_abs": None}, "p90_abs": 0.25}}}))
    code, text, err = cli("plan", "--model", "llama-3.2-1b", "--instance", "ml.p5e.48xlarge", "--profile", str(old))
    assert code == 0, err
    assert "published runs" not in text
    assert "profile old: no record of what it was fitted on, no cross-validated error: its band is an assumed 25%" in text


def test_a_directory_that_is_not_a_run_is_a_one_line_error(cli, tmp_path):
    code, _, err = cli("calibrate", "--runs", str(tmp_path), "--out", str(tmp_path / "p.json"))
    assert code == 2 and "not a run directory" in err and not (tmp_path / "p.json").exists()
