"""Calibration: the fit recovers known coefficients; profiles load, refuse bad keys, and fold."""

import json
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from trainplan.calibration.fitting import fit, framework_factors, loso, predicted_tps
from trainplan.errors import TrainplanError
from trainplan.hardware import Cluster, find_node
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.models import resolve
from trainplan.profile import FittedOn, Profile, default_profile, load_profile


@dataclass
class FakeCase:
    job: Job
    layout: Layout
    source_key: str
    framework: str
    measured: dict


def _cases(truth: Profile):
    out = []
    for i, (model, seq, L) in enumerate([
        ("llama-3.1-8b", 8192, Layout(dp_shard=8)),
        ("llama-3.1-8b", 2048, Layout(dp_shard=8, micro_batch=4)),
        ("llama-3.1-70b", 4096, Layout(dp_shard=8, ac="full")),
        ("qwen3-8b", 4096, Layout(dp_shard=8, micro_batch=2)),
    ]):
        j = Job(resolve(model), Cluster(find_node("ml.p5.48xlarge"), 1), Workload(seq, L.micro_batch * 8))
        c = FakeCase(j, L.with_stack("torchtitan"), f"s{i % 2}", "fw", {})
        c.measured["tokens_per_s_per_gpu"] = predicted_tps(c, truth)
        out.append(c)
    return out


def test_fit_recovers_a_known_gemm_efficiency():
    truth = Profile(gemm_eff=0.62)
    cases = _cases(truth)
    got = fit(cases, Profile(), params=("gemm_eff",), frameworks=False)
    assert got.gemm_eff == pytest.approx(0.62, rel=0.03)


def test_framework_factor_needs_two_sources_and_loso_has_one_fold_per_source():
    cases = _cases(Profile(gemm_eff=0.7))
    assert set(framework_factors(cases, Profile(gemm_eff=0.7))) == {"torchtitan"}  # keyed by the stack
    assert framework_factors(cases[::2], Profile()) == {}  # one source only: nothing learned
    folds = loso(cases, Profile(), params=("gemm_eff",), frameworks=False, sweeps=2)
    assert set(folds) == {"s0", "s1"}


def test_profile_round_trip_and_folds(tmp_path):
    p = replace(Profile(gemm_eff=0.7, arch_gemm_eff={"ampere": 1.1}, framework_time={"nemo": 0.9}),
                folds={"src": {"gemm_eff": 0.5}})
    f = tmp_path / "p.json"
    f.write_text(json.dumps(p.to_dict()))
    q = load_profile(f)
    assert q.gemm_eff == 0.7 and q.arch_gemm_eff == {"ampere": 1.1}
    assert q.fold("src").gemm_eff == 0.5 and q.fold("other").gemm_eff == 0.7
    assert q.time_factor("nemo") == 0.9 and q.time_factor("x") == 1.0


def test_profile_rejects_unknown_coefficients(tmp_path):
    f = tmp_path / "p.json"
    f.write_text(json.dumps({"schema": "trainplan-profile/1", "coefficients": {"gemm_efff": 1}}))
    with pytest.raises(TrainplanError, match="unknown key 'gemm_efff'"):
        load_profile(f)


def test_packaged_profile_carries_its_cross_validated_error():
    p = default_profile()
    assert p.folds and p.cv_error["tokens_per_s_per_gpu"]["quality=full"]["count"] > 40
    assert "records" in p.cv_error


def test_packaged_profile_records_what_it_was_fitted_on():
    p = default_profile()
    f = p.fitted_on
    assert f.kind == "published" and f.count == len(p.cv_error["records"]) and set(f.sources) == set(p.folds)
    assert p.describe().startswith(f"profile {p.name}: fitted on {f.count} published records of ")


def test_provenance_round_trips_and_a_malformed_one_is_refused(tmp_path):
    f = FittedOn(kind="runs", count=3, gpus=("h100-sxm-80gb",), models=("llama-3.1-8b",), sources=("/r/a", "/r/b", "/r/c"),
                 dates=("2026-07-01", "2026-07-03"), method="leave one run out")
    path = tmp_path / "p.json"
    path.write_text(json.dumps(replace(Profile(), fitted_on=f).to_dict()))
    assert load_profile(path).fitted_on == f
    for bad, msg in (({"kind": "guess"}, "kind must be one of"), ({"count": "3"}, "count must be"),
                     ({"gpus": [1]}, "gpus must be a list of strings"), ({"when": 1}, "unknown key 'when'")):
        path.write_text(json.dumps(replace(Profile(), fitted_on=f).to_dict() | {"fitted_on": f.to_dict() | bad}))
        with pytest.raises(TrainplanError, match=msg):
            load_profile(path)
    assert "fitted_on" not in Profile().to_dict()  # a profile without one writes what older trainplans read


def test_packaged_coefficients_are_within_their_physical_bounds():
    from trainplan.calibration.fitting import BOUNDS

    p = default_profile()
    for k in p.meta["fitted"]:
        lo, hi = BOUNDS[k]
        assert lo <= getattr(p, k) <= hi, k
        assert all(lo <= f[k] <= hi for f in p.folds.values()), k
    assert p.gemm_eff <= 1 and p.attn_eff <= 1 and p.hbm_eff <= 1 and p.moe_gemm_eff <= 1


DEV = Path(__file__).parents[2].parent / "shared" / "validation" / "published_dev.json"


@pytest.mark.skipif(not DEV.is_file(), reason="the dev dataset lives in the shared tree")
def test_packaged_memory_error_has_not_drifted_from_the_memory_model():
    # The search widens its memory band by the profile's peak_mem_gib p90 error (Profile.memory_band);
    # it is computed at fit time from the memory model (calibration/build.py, dated in meta). When
    # the memory model changes, this fails: refit with `trainplan validate --dataset ... --fit`.
    from trainplan.validation.dataset import load_dataset
    from trainplan.validation.run import run

    p = default_profile()
    assert p.meta.get("fitted_at")
    _, cases = load_dataset(DEV)
    now = run(cases, p)["summary"]["peak_mem_gib"]["all"]
    stored = p.cv_error["peak_mem_gib"]["all"]
    for k in ("median_abs", "p90_abs"):
        assert now[k] == pytest.approx(stored[k], abs=0.01), f"memory model changed since the fit ({k}): refit the profile"


def test_packaged_profile_keeps_only_what_the_time_split_supports():
    # issue 23: every coefficient the primary time split did not support sits at its prior, every
    # fold and split fold too; the support table says why for each
    from trainplan.calibration.fitting import FITTED

    p, prior = default_profile(), Profile()
    sup = p.meta["support"]
    assert set(sup["coefficients"]) == {*FITTED, "framework_time"}
    for k in sup["dropped"]:
        assert not sup["coefficients"][k]["supported"]
        if k == "framework_time":
            assert p.framework_time == {} and all(not f["framework_time"] for f in (*p.folds.values(), *p.splits.values()))
        else:
            assert getattr(p, k) == getattr(prior, k) and all(f[k] == getattr(prior, k) for f in p.splits.values())
    assert set(p.meta["fitted"]) == set(sup["kept"])
    assert any(k.startswith("time<") for k in p.splits) and any(k.startswith("generation=") for k in p.splits)
