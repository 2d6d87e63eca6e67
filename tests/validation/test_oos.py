"""Out-of-sample discipline (issue 23 item 1): the splits fit on what they should and predict what
they should, a coefficient the time split does not support is pinned, the band is the p90 of the
nearest group of runs like the plan's and widens where nothing like it was measured, and coverage
counts the runs inside their own band. Every answer here is known by construction."""

import datetime
from dataclasses import dataclass, field

import pytest

from trainplan.band import Bands, RunError, coverage, fold_error
from trainplan.calibration.fitting import fit, predicted_tps
from trainplan.calibration.splits import split_folds
from trainplan.calibration.support import support
from trainplan.errors import TrainplanError
from trainplan.hardware import Cluster, find_node
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.models import resolve
from trainplan.profile import Profile
from trainplan.validation.dates import SourceDates, parse_date, source_dates
from trainplan.validation.splits import fold_keys, predicting_key

D = datetime.date


@dataclass
class FakeCase:
    job: Job
    layout: Layout
    source_key: str
    framework: str
    measured: dict
    record: dict = field(default_factory=dict)
    id: str = ""


# (source, published, model, seq, layout): two early sources and one late, on H100 (hopper)
RUNS = [
    ("early-a", "2024-01-10", "llama-3.1-8b", 8192, Layout(dp_shard=8)),
    ("early-a", "2024-01-10", "llama-3.1-8b", 2048, Layout(dp_shard=8, micro_batch=4)),
    ("early-b", "2024-06-01", "llama-3.1-70b", 4096, Layout(dp_shard=8, ac="full")),
    ("early-b", "2024-06-01", "qwen3-8b", 16384, Layout(dp_shard=8)),
    ("late", "2025-09-01", "llama-3.1-8b", 16384, Layout(dp_shard=8)),
    ("late", "2025-09-01", "qwen3-8b", 2048, Layout(dp_shard=8, micro_batch=4)),
]
DATES = SourceDates({}, {}, (D(2025, 1, 1),), D(2025, 1, 1))


def _cases(truth_for):
    out = []
    for i, (src, when, model, seq, L) in enumerate(RUNS):
        j = Job(resolve(model), Cluster(find_node("ml.p5.48xlarge"), 1), Workload(seq, L.micro_batch * 8))
        c = FakeCase(j, L.with_stack("torchtitan"), src, "fw", {}, {"id": f"r{i}", "source_key": src, "published": when},
                     f"r{i}")
        c.measured["tokens_per_s_per_gpu"] = predicted_tps(c, truth_for(src))
        out.append(c)
    return out


def test_dates_read_a_record_first_then_its_source_and_refuse_a_bad_one():
    d = source_dates()
    assert d.primary in d.split_dates
    assert d.of({"source_key": "korthikanti"}) == D(2022, 5, 1)  # 'YYYY-MM': the 1st of the month
    assert d.of({"source_key": "korthikanti", "published": "2030-01-02"}) == D(2030, 1, 2)
    assert d.of({"source_key": "nobody"}) is None
    with pytest.raises(TrainplanError, match="YYYY-MM-DD or YYYY-MM"):
        parse_date("June 2025", "x")


def test_every_dev_source_with_a_measurement_has_a_date_and_its_basis():
    from trainplan.validation.dataset import DEV_DATASET, load_dataset

    d = source_dates()
    _, cases = load_dataset(DEV_DATASET)
    measured = {c.source_key for c in cases if c.measured.get("tokens_per_s_per_gpu") or c.measured.get("step_time_s")}
    assert measured <= set(d.published)
    assert all(d.basis[k] for k in measured)


def test_the_time_split_fits_the_past_and_predicts_the_later_source_only():
    cases = _cases(lambda s: Profile())
    keys = fold_keys(cases, DATES)
    assert [c.id for c in keys["time<2025-01-01"]] == ["r0", "r1", "r2", "r3"]
    assert [predicting_key("time", c, DATES, D(2025, 1, 1)) for c in cases] == [None] * 4 + ["time<2025-01-01"] * 2
    # leave one family out: llama and qwen3 folds; one generation only: nothing left to fit, no fold
    assert {k for k in keys if k.startswith("family=")} == {"family=llama", "family=qwen3"}
    assert not any(k.startswith("generation=") for k in keys)
    assert predicting_key("family", cases[3], DATES) == "family=qwen3"


def test_a_biased_later_source_is_not_fitted_to_by_the_time_split():
    # the early sources ran at gemm_eff 0.62; the late one measured 0.4 (a known bias)
    cases = _cases(lambda s: Profile(gemm_eff=0.4 if s == "late" else 0.62))
    folds = split_folds(cases, Profile(), DATES, params=("gemm_eff",), frameworks=False, sweeps=6)
    assert folds["time<2025-01-01"].gemm_eff == pytest.approx(0.62, rel=0.03)  # the fit never saw 'late'
    # the bias is real: fitted on the late source alone, gemm_eff is its 0.4
    late = fit([c for c in cases if c.source_key == "late"], Profile(), params=("gemm_eff",), frameworks=False, sweeps=6)
    assert late.gemm_eff == pytest.approx(0.4, rel=0.03)


def test_a_coefficient_the_time_split_does_not_support_is_pinned_at_its_prior():
    # early sources: gemm_eff 0.62 and attention at 0.4; the late source: gemm_eff 0.62, attention at
    # the prior 0.73. Fitting attn_eff on the past makes the later source worse: it is dropped.
    cases = _cases(lambda s: Profile(gemm_eff=0.62) if s == "late" else Profile(gemm_eff=0.62, attn_eff=0.4))
    s = support(cases, Profile(), DATES, params=("gemm_eff", "attn_eff"))
    assert s["fitted_on"] == 4 and s["predicted"] == 2
    assert s["coefficients"]["gemm_eff"]["supported"] and not s["coefficients"]["attn_eff"]["supported"]
    assert s["coefficients"]["attn_eff"]["error_pinned"] < s["coefficients"]["attn_eff"]["error_fitted"]
    assert s["kept"] == ["gemm_eff"] and "attn_eff" in s["dropped"]
    assert s["error_kept_fitted"]["mean_abs_log"] < s["error_all_fitted"]["mean_abs_log"]


def _run(i, src, err, gen="hopper", model="dense", scale="gpus<256", stack="megatron", quality="full",
         method="loso", features=("dense",)):
    return RunError(f"r{i}", src, method, gen, model, scale, stack, quality, features, err)


def test_the_band_is_the_p90_of_the_nearest_group_with_enough_runs():
    # 10 hopper dense megatron runs at 10% and 10 torchtitan ones at 30%: each stack its own band
    runs = [_run(i, f"s{i % 5}", 0.10) for i in range(10)]
    runs += [_run(10 + i, f"t{i % 5}", 0.30, stack="torchtitan") for i in range(10)]
    b = Bands(tuple(runs), {"generation": 0.5, "architecture": 0.6}, min_runs=10)
    assert b.band("hopper", "dense", "gpus<256", "megatron").error == pytest.approx(0.10)
    assert b.band("hopper", "dense", "gpus<256", "torchtitan").error == pytest.approx(0.30)
    # a stack nobody measured: its group is let go, all 20 hopper dense runs decide (p90 of 10x0.1, 10x0.3)
    nemo = b.band("hopper", "dense", "gpus<256", "nemo")
    assert nemo.error == pytest.approx(0.30) and nemo.runs == 20 and dict(nemo.group) == {
        "generation": "hopper", "model": "dense", "scale": "gpus<256"}
    assert not nemo.widened and "20 out-of-sample runs like this plan's (hopper, dense, gpus<256)" in nemo.basis


def test_the_band_widens_for_an_unseen_gpu_generation_and_architecture_and_says_so():
    runs = tuple(_run(i, f"s{i % 4}", 0.05 + 0.01 * i) for i in range(12))
    b = Bands(runs, {"generation": 0.45, "architecture": 0.6}, min_runs=10)
    seen = b.band("hopper", "dense", "gpus<256", "megatron", features=("dense",))
    new_gpu = b.band("blackwell", "dense", "gpus<256", "megatron", features=("dense",))
    assert seen.error < 0.2 and not seen.widened
    assert new_gpu.error == 0.45 and new_gpu.widened == ("generation",)
    assert new_gpu.basis.endswith("widened: no blackwell run was ever measured, so the p90 error of runs "
                                  "predicted leave one GPU generation out (45%)")
    mla = b.band("hopper", "moe", "gpus<256", "megatron", features=("moe", "mla"))
    assert mla.error == 0.6 and mla.widened == ("architecture",) and "no measured run had mla, moe" in mla.basis


def test_the_plan_band_of_a_profile_with_an_out_of_sample_pool_is_that_pool_s():
    from trainplan.estimate import estimate

    runs = [_run(i, f"s{i % 4}", 0.08, stack="torchtitan", scale="gpus<256").to_dict() for i in range(12)]
    prof = Profile(cv_error={"out_of_sample": {"min_runs": 10, "runs": runs, "unseen": {"generation": 0.4}}})
    j = Job(resolve("llama-3.1-8b"), Cluster(find_node("ml.p5.48xlarge"), 1), Workload(8192, 8))
    e = estimate(j, Layout(dp_shard=8).with_stack("torchtitan"), prof, with_memory=False)
    assert e.band[1] / e.tokens_per_s_per_gpu == pytest.approx(1.08)
    assert "12 out-of-sample runs like this plan's (hopper, dense, gpus<256, torchtitan, full)" in e.band_basis
    b200 = Job(resolve("llama-3.1-8b"), Cluster(find_node("ml.p6-b200.48xlarge"), 1), Workload(8192, 8))
    eb = estimate(b200, Layout(dp_shard=8).with_stack("torchtitan"), prof, with_memory=False)
    assert eb.band[1] / eb.tokens_per_s_per_gpu == pytest.approx(1.4) and "no blackwell run" in eb.band_basis
    # a profile without a pool keeps its own cross-validated error and says nothing of its own
    plain = estimate(j, Layout(dp_shard=8).with_stack("torchtitan"), Profile(), with_memory=False)
    assert plain.band_basis == "" and plain.band[1] / plain.tokens_per_s_per_gpu == pytest.approx(1.25)


def test_coverage_counts_runs_inside_a_band_made_without_their_own_source():
    # 10 sources of one run each at 10% and one at 50%: each band (from the other 10 runs) is the
    # p90 of the others; the 50% run falls outside, the 10% runs inside
    runs = [_run(i, f"s{i}", 0.10) for i in range(10)] + [_run(10, "s10", 0.50)]
    cov = coverage(Bands(tuple(runs), {}, min_runs=10))
    assert cov["all"] == {"count": 11, "inside": 10, "share": pytest.approx(10 / 11)}
    assert cov["by_method"]["loso"]["count"] == 11


def test_an_under_prediction_is_inside_its_band_as_far_as_an_over_prediction():
    # the band is x/(1+e)..x*(1+e): predicting half the measurement is a fold error of 100%
    assert fold_error(-0.5) == pytest.approx(1.0) and fold_error(1.0) == pytest.approx(1.0)


def test_the_packaged_band_widens_for_a_generation_it_never_measured():
    # the packaged pool has Ampere, Hopper and Blackwell runs, no Ada (L40S): a plan there takes the
    # leave-one-generation-out p90 and says so; a Hopper plan does not
    from trainplan.profile import default_profile

    p = default_profile()
    ada = p.throughput_band("ada", False, 32, "trainplan", ("dense",))
    hopper = p.throughput_band("hopper", False, 32, "trainplan", ("dense",))
    assert ada.widened == ("generation",) and "no ada run was ever measured" in ada.basis
    assert ada.error >= p.cv_error["out_of_sample"]["unseen"]["generation"] and not hopper.widened


def test_the_packaged_band_pool_has_not_drifted_from_the_cost_model():
    # The band is drawn from the errors stored at fit time (calibration/build.py, dated in meta).
    # When the cost model moves them, this fails: refit with `trainplan validate --fit`.
    from trainplan.band import p90
    from trainplan.profile import default_profile
    from trainplan.validation.dataset import DEV_DATASET, load_dataset
    from trainplan.validation.holdout import holdout_cases
    from trainplan.validation.oos import out_of_sample

    p = default_profile()
    _, cases = load_dataset(DEV_DATASET)
    now = out_of_sample(cases, p, holdout=holdout_cases())["band"]
    stored = p.cv_error["out_of_sample"]
    assert len(now["runs"]) == len(stored["runs"])
    for run in (now, stored):
        run["p90"] = p90([fold_error(r["error"]) for r in run["runs"]])
    assert now["p90"] == pytest.approx(stored["p90"], abs=0.02), "cost model changed since the fit: refit the profile"


def test_the_band_is_a_conformal_bound_over_sources_not_runs():
    # Ten runs of one source at 40% and one run each of nine others at 5%: by runs the p90 would be
    # 40% or 5% by how many runs a source printed; by sources the ten sources weigh alike and
    # ceil(0.9 x 11) = 10 of them must be inside: the bound is 40%.
    from trainplan.band import conformal_p90

    heavy = [_run(i, "big", 0.40) for i in range(10)]
    light = [_run(10 + i, f"s{i}", 0.05) for i in range(9)]
    assert conformal_p90(heavy + light) == pytest.approx(0.40)
    # twenty sources of one run: the 19th smallest (ceil(0.9 x 21) = 19), not the interpolated p90
    spread = [_run(i, f"t{i}", 0.01 * (i + 1)) for i in range(20)]
    assert conformal_p90(spread) == pytest.approx(0.19)
    # a source that printed many runs is one unit: t0's ten 30% runs weigh as one of the 20 sources,
    # so the 19 others (2%..20%) reach the level first and the bound is 20%, not 30%
    many = [_run(100 + i, "t0", 0.30) for i in range(10)] + spread[1:]
    assert conformal_p90(many) == pytest.approx(0.20)
