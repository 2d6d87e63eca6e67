"""The plan report reads what plan.json holds: typed estimates, never a new estimate."""

from __future__ import annotations

import json

import pytest
import report_samples as S

from trainplan.errors import TrainplanError
from trainplan.plan import plan_from_dict
from trainplan.report.records import compare_rows, quantile, validate_points
from trainplan.report.views import MEMORY_GROUPS, as_plan, plan_view

GiB = 1024**3


@pytest.fixture
def no_estimate(monkeypatch):
    """Any call of the cost model from here on fails the test."""
    import trainplan.estimate

    def refuse(*a, **k):
        raise AssertionError("the report called estimate()")

    monkeypatch.setattr(trainplan.estimate, "estimate", refuse)
    monkeypatch.setattr("trainplan.search.evaluator.ModelEvaluator.detail", refuse)


def test_plan_json_round_trips_every_estimate_exactly():
    p = S.plan()
    back = plan_from_dict(json.loads(p.to_json()))
    assert back.estimate == p.estimate
    assert [a.estimate for a in back.runners_up] == [a.estimate for a in p.runners_up]
    assert [(a.layout, a.estimate) for a in back.pareto] == [(a.layout, a.estimate) for a in p.pareto]


def test_the_report_shows_the_numbers_of_plan_json_without_estimating(no_estimate, tmp_path, cli):
    text = S.plan().to_json()
    d = json.loads(text)
    f = tmp_path / "plan.json"
    f.write_text(text)
    code, out, err = cli("report", str(f), "--json")
    assert code == 0, err
    shown = json.loads(out)
    for row, written in zip([shown["chosen"], *shown["runners_up"]],
                            [d["estimate"], *(a["estimate"] for a in d["runners_up"])]):
        for k in ("tokens_per_s", "tokens_per_s_per_gpu", "mfu", "step_time_s", "peak_mem_gib",
                  "usd_per_million_tokens", "hours_to_tokens", "usd_to_tokens", "binding"):
            assert row[k] == written[k], k
        assert sum(row["time_s"].values()) == pytest.approx(written["time_s"]["total"], rel=1e-12)
        assert sum(row["memory_gib"].values()) == pytest.approx(written["peak_mem_gib"], rel=1e-12)
    assert [r["label"] for r in shown["pareto"]] == ["chosen", "#2", "#5"]
    code, _, err = cli("report", str(f), "--html", str(tmp_path / "p.html"))
    assert code == 0, err
    code, out, _ = cli("report", str(f))
    assert code == 0 and "chosen: fp8_rowwise ac=full mb=1 ga=8 dp=2x8(fsdp)" in out


def test_memory_groups_hold_every_term_of_the_breakdown():
    from trainplan.costs.memory import MemoryBreakdown

    grouped = [t for terms in MEMORY_GROUPS.values() for t in terms]
    terms = [f for f in MemoryBreakdown.__dataclass_fields__
             if isinstance(getattr(S.plan().estimate.memory, f), float) and f != "microbatches_in_flight"]
    assert sorted(grouped) == sorted(terms)  # a new term must be given a group


def test_rows_add_up_to_their_totals_and_traffic_comes_from_the_ledger():
    v = plan_view(S.plan())
    for r in v.ranked:
        e = r.estimate
        assert sum(sum(g.values()) for g in r.memory_gib().values()) == pytest.approx(e.peak_mem_gib)
        assert sum(r.time_s().values()) == pytest.approx(e.step_time_s)
    hsdp = v.chosen  # only the dp all-reduce crosses nodes, and only its network part counts
    dp = [c for c in hsdp.estimate.comm if c.dimension == "dp"]
    assert dp and all(c.tier == "efa" for c in dp)
    assert hsdp.network_bytes_per_gpu() == pytest.approx(sum(c.network_bytes for c in dp))
    inter, _ = hsdp.traffic_per_token()
    assert inter == pytest.approx(hsdp.network_bytes_per_gpu() * 16 / (8192 * 128))


def test_a_plan_without_runners_up_or_estimate_reads():
    v = plan_view(S.plan(runners_up=False, pareto=()))
    assert v.runners_up == () and v.pareto == ()
    bare = plan_from_dict({**S.plan().to_dict(), "estimate": None, "runners_up": [], "pareto": []})
    r = plan_view(bare).chosen
    assert r.memory_gib() == {} and r.time_s() == {} and r.traffic_per_token() is None


def test_an_estimate_from_an_older_trainplan_is_refused_naming_the_schema():
    d = S.plan().to_dict()
    for e in d["estimate"]["comm"]:
        del e["network_bytes"]  # what trainplan wrote before the ledger split its network part
    with pytest.raises(TrainplanError) as e:
        plan_from_dict(d)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("plan.json: estimate.comm[0]: missing required key 'network_bytes'")
    assert "trainplan-plan/1 estimate was written by trainplan" in msg and "`trainplan plan --out`" in msg


def test_what_is_not_a_plan_is_a_one_line_error():
    with pytest.raises(TrainplanError, match=r"^plan report: no plan found; expected a plan.json"):
        as_plan({"something": 1})


def test_compare_rows_keep_cost_units_of_costs_cost():
    (r, *_, none) = compare_rows(S.compare_result())
    assert (r.gpu, r.usd_per_million_tokens, r.hours_to_tokens) == ("b200-180gb", 3.421, 15014.4)
    assert none.note == "does not fit in 4 nodes" and none.tokens_per_s is None
    with pytest.raises(TrainplanError, match=r"^compare report: expected `trainplan compare --json`"):
        compare_rows({"plan": {}})


def test_validate_points_error_is_recomputed_and_missing_measured_comes_from_error():
    pts, skipped = validate_points(S.validate_points_sample())
    assert skipped == [["M004", "precision nvfp4 on a GPU without fp4 tensor cores"]]
    m2 = next(p for p in pts if p.record == "M002" and p.metric == "step_time_s")
    assert m2.error == pytest.approx(2.9 / 3.1 - 1)
    m5 = next(p for p in pts if p.record == "M005" and p.metric == "step_time_s")
    assert m5.measured == pytest.approx(5.0) and m5.error == pytest.approx(-0.2)
    assert not any(p.record == "M001" and p.metric == "peak_mem_gib" for p in pts)  # no measurement
    with pytest.raises(TrainplanError, match=r"^validate report: expected `trainplan validate --json`"):
        validate_points({"summary": {}})


def test_a_predicted_record_with_nothing_measured_is_listed_not_dropped():
    rec = {"id": "M218", "gpu": "b200-180gb", "predicted": {"step_time_s": 34.2, "mfu": None},
           "measured": {"step_time_s": None}, "error": {"step_time_s": None}, "skipped_reason": None}
    assert validate_points({"records": [rec]}) == (
        [], [["M218", "predicted, but no measured value of these metrics to compare with"]])


def test_validate_points_take_gpu_and_measured_from_the_dataset():
    result = {"records": [{"id": "X1", "predicted": {"step_time_s": 2.0}, "error": {},
                           "skipped_reason": None}]}
    dataset = {"records": [{"id": "X1", "hardware": {"gpu": "h200-141gb"}, "source_key": "paper",
                            "measured": {"step_time_s": 1.6}}]}
    (p,) = validate_points(result, dataset)[0]
    assert (p.gpu, p.source, p.measured) == ("h200-141gb", "paper", 1.6)
    assert p.error == pytest.approx(0.25)


def test_quantile_interpolates_like_numpy():
    assert quantile([1, 2, 3, 4], 0.5) == 2.5
    assert quantile([0, 10], 0.9) == 9.0
    assert quantile([7], 0.9) == 7
