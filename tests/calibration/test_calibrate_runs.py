"""calibrate() on runs (calibration/runs.py): a residual the runs show is recovered and the error
reported is leave-one-run-out; what cannot be trusted is refused in one line, nothing returned: a run
of another device than its plan's GPU, a coefficient driven to its bound, a fit that predicts unseen
runs worse than the start profile; a coefficient without enough runs behind it keeps the start's value.

The runs are built here: their measured tokens/s is the model's prediction under a known "truth"
profile, so what the fit should find is known."""

from dataclasses import replace

import pytest

from trainplan.calibration.evidence import MIN_RUNS, choose
from trainplan.calibration.fitting import predicted_tps
from trainplan.calibration.runs import RUN_PARAMS, RunCase, calibrate
from trainplan.errors import TrainplanError
from trainplan.hardware import Cluster, find_node
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.models import resolve
from trainplan.profile import Profile

H200 = "ml.p5e.48xlarge"  # h200-sxm-141gb
# (model, micro-batch, activation checkpointing, sequence): layouts whose GEMM, attention, element-wise
# and communication shares differ, as a team's runs of a few configurations would
SHAPES = [("llama-3.2-1b", 1, "none", 4096), ("llama-3.2-1b", 2, "full", 2048), ("llama-3.2-1b", 1, "selective", 8192),
          ("llama-3.1-8b", 1, "full", 8192), ("llama-3.1-8b", 2, "none", 2048)]


def runs(truth: Profile, shapes=SHAPES, instance=H200, device=None) -> list[RunCase]:
    node = find_node(instance)
    out = []
    for i, (model, mb, ac, seq) in enumerate(shapes):
        job = Job(resolve(model), Cluster(node, 1), Workload(seq, 8 * mb))
        c = RunCase(f"run{i}", job, Layout(micro_batch=mb, ac=ac, dp_shard=8, precision="bf16"), {}, device=device,
                    path=f"/runs/run{i}", date=f"2026-07-0{i + 1}")
        out.append(replace(c, measured={"tokens_per_s_per_gpu": predicted_tps(c, truth)}))
    return out


START = Profile()  # the priors: gemm_eff 0.9, attn_eff 0.73, ...


def test_a_residual_inside_its_bounds_is_recovered_and_cross_validated():
    prof = calibrate(runs(replace(START, gemm_eff=0.72)), START)
    assert prof.gemm_eff == pytest.approx(0.72, rel=0.03)
    cv = prof.cv_error["tokens_per_s_per_gpu"]
    assert cv["before"]["median_abs"] > 0.05  # the start profile is off by the residual
    assert cv["all"]["median_abs"] < cv["before"]["median_abs"] / 3
    assert set(prof.folds) == {f"run{i}" for i in range(len(SHAPES))} and set(prof.folds["run0"]) == set(prof.meta["fitted"])
    assert prof.cv_error["method"] == "leave one run out"
    assert prof.throughput_error(False) == cv["p90_abs"]  # the band is this profile's cross-validated error


def test_the_profile_records_what_it_was_fitted_on():
    f = calibrate(runs(replace(START, gemm_eff=0.72)), START).fitted_on
    assert (f.kind, f.count, f.gpus) == ("runs", len(SHAPES), ("h200-sxm-141gb",))
    assert f.models == ("llama-3.1-8b", "llama-3.2-1b") and f.sources[0] == "/runs/run0"
    assert f.dates == ("2026-07-01", f"2026-07-0{len(SHAPES)}") and f.method == "leave one run out"


@pytest.mark.parametrize("device", ["cpu", "a100-sxm-80gb"])
def test_a_run_of_another_device_than_its_plans_gpu_is_refused_by_name(device):
    cases = runs(START)
    cases[1] = replace(cases[1], device=device)
    with pytest.raises(TrainplanError) as e:
        calibrate(cases, START)
    msg = str(e.value)
    assert "\n" not in msg and f"run run1 ran on {device}" in msg and "h200-sxm-141gb" in msg


def test_runs_of_two_gpu_types_are_refused():
    cases = runs(START)[:3] + runs(START, instance="ml.p5.48xlarge")[3:]
    with pytest.raises(TrainplanError, match="one GPU type at a time"):
        calibrate(cases, START)


def test_a_coefficient_driven_to_its_bound_is_refused():
    # runs 4x slower than any physical efficiency explains (a CPU run labelled as a GPU one, or a broken run)
    cases = [replace(c, measured={"tokens_per_s_per_gpu": c.measured["tokens_per_s_per_gpu"] / 4}) for c in runs(START)]
    with pytest.raises(TrainplanError, match="calibration refused: the fit drives gemm_eff to 0.3 .its lower bound"):
        calibrate(cases, START)


def test_a_fit_worse_than_the_start_on_unseen_runs_is_refused():
    # the start predicts two runs exactly and one 40% too fast: each fold that sees the odd run
    # moves off the truth and mispredicts the run it left out
    cases = runs(START, shapes=SHAPES[:3])
    cases[2] = replace(cases[2], measured={"tokens_per_s_per_gpu": cases[2].measured["tokens_per_s_per_gpu"] * 0.6})
    with pytest.raises(TrainplanError, match=r"on runs it has not seen \(leave one run out\) the fit errs by a median"):
        calibrate(cases, START)


def test_too_few_runs_keep_the_start_value_and_say_why():
    cases = runs(replace(START, gemm_eff=0.72))
    with pytest.raises(TrainplanError, match=f"2 run.s. move no coefficient .a coefficient moves only with {MIN_RUNS} or more runs"):
        calibrate(cases[:2], START)
    prof = calibrate(cases[:MIN_RUNS], START)  # three runs: the largest term moves, the rest are kept
    assert prof.meta["fitted"] and set(prof.meta["fitted"]) | set(prof.meta["kept"]) == set(RUN_PARAMS)
    for p, why in prof.meta["kept"].items():
        assert getattr(prof, p) == getattr(START, p) and why


def test_evidence_needs_runs_that_vary_the_term():
    # five runs of one layout: one scale can be fitted, no second coefficient told apart from it
    same = runs(START, shapes=[SHAPES[0]] * 5)
    ev = choose(same, START, RUN_PARAMS)
    assert len(ev.moved) == 1
    assert any("do not tell it apart" in why for why in ev.kept.values())
    # without a machine profile for the GPU its residuals are not seen at all (formulas price every kernel)
    assert "in 0 of 5 run(s)" in ev.kept["machine_compute"]


def test_a_published_record_calibrates_as_the_run_it_stands_for():
    # from_record (bench/closed_loop.py) turns validation Cases into runs: the same fit as the runs
    from trainplan.calibration.runs import from_record
    from trainplan.validation.dataset import Case

    truth_runs = runs(replace(START, gemm_eff=0.72))
    records = [Case(c.id, {"source_key": "src", "measured": c.measured}, c.job, c.layout, "trainplan", (), None)
               for c in truth_runs]
    got = [from_record(r) for r in records]
    assert [(g.id, g.gpu, g.measured["tokens_per_s_per_gpu"]) for g in got] == \
        [(c.id, c.gpu, c.measured["tokens_per_s_per_gpu"]) for c in truth_runs]
    assert calibrate(got, START).gemm_eff == calibrate(truth_runs, START).gemm_eff
    skipped = replace(records[0], job=None, layout=None, skipped_reason="a layout trainplan refuses")
    with pytest.raises(TrainplanError, match="run0 is not representable .a layout trainplan refuses."):
        from_record(skipped)
