"""Reading the commands' JSON into report views: every accepted shape, and the errors."""

from __future__ import annotations

import pytest
import report_samples as S

from trainplan.errors import TrainplanError
from trainplan.report.inputs import (
    comm_rows,
    layout_short,
    memory_terms_gib,
    plan_view,
    time_terms_s,
)
from trainplan.report.records import compare_rows, quantile, validate_points

GiB = 1024**3


@pytest.mark.parametrize("mem", [
    {"parameters": 2 * GiB, "activations": 3 * GiB, "total": 5 * GiB},
    {"parameters_bytes": 2 * GiB, "activations_bytes": 3 * GiB, "total_bytes": 5 * GiB},
    {"parameters_gib": 2.0, "activations_gib": 3.0, "parameters_bytes": 1, "total_gib": 5.0},
    {"gib": {"parameters": 2.0, "activations": 3.0, "total": 5.0}, "bytes": {"parameters": 1}},
    {"bytes": {"parameters": 2 * GiB, "activations": {"attention": 1 * GiB, "mlp": 2 * GiB}},
     "worst_stage": 0, "total_allocated": 1, "reserved": 1},
])
def test_memory_terms_in_every_accepted_shape(mem):
    assert memory_terms_gib(mem) == {"parameters": 2.0, "activations": 3.0}


def test_time_terms_flatten_exposed_comm_per_dimension_and_drop_the_total():
    t = {"compute_s": 10.0, "exposed_comm": {"tp_s": 1.0, "fsdp": 0.5}, "bubble": 2, "total": 13.5}
    assert time_terms_s(t) == {"GEMM + attention": 10.0, "exposed comm tp": 1.0, "exposed comm fsdp": 0.5,
                               "bubble": 2.0}


def test_comm_rows_accept_alternative_key_names():
    (r,) = comm_rows([{"op": "all-gather", "dim": "fsdp", "link": "efa", "bytes_per_gpu": 5.0,
                       "time_s": 1.0, "exposed_seconds": 0.25}])
    assert (r.collective, r.dimension, r.tier, r.bytes, r.seconds, r.exposed_s) == (
        "all-gather", "fsdp", "efa", 5.0, 1.0, 0.25)


def test_layout_short_matches_layout_short():
    from trainplan.layout import Layout

    lay = Layout(ac="full", micro_batch=2, grad_accum=4, dp_shard=8, tp=2, pp=2, cp=2)
    assert layout_short(lay.to_dict()) == lay.short()  # with the pipeline schedule
    future = {**Layout(tp=2).to_dict(), "new_knob": 1}
    assert layout_short(future) == "bf16 ac=none mb=1 ga=1 dp=1x1(fsdp) tp=2"


def test_plan_view_of_plan_output():
    v = plan_view(S.plan_result())
    assert v.title == "llama-3.1-70b on 2 x ml.p6-b200.48xlarge"
    assert v.gpu_name == "b200-180gb" and v.capacity_gib == pytest.approx(179.0, abs=1.5)
    assert [c.label for c in v.runners_up] == ["#2", "#3", "#4", "#5"]
    assert len(v.pareto) == 3
    ch = v.chosen
    assert ch.peak_mem_gib == pytest.approx(sum(ch.memory_gib.values()))
    assert ch.step_time_s == pytest.approx(sum(ch.time_s.values()))
    assert ch.inter_node_bytes == pytest.approx(17.6e9)  # only the dp all-reduce crosses EFA
    assert ch.layout_short.startswith("fp8_rowwise ac=selective")


def test_a_bare_plan_json_is_a_plan_without_runners_up():
    v = plan_view(S.plan_result()["plan"])
    assert v.runners_up == () and v.pareto == () and v.chosen.label == "chosen"


def test_a_plan_without_an_estimate_still_reads():
    plan = {**S.plan_result()["plan"], "estimate": None}
    c = plan_view(plan).chosen
    assert c.memory_gib == {} and c.peak_mem_gib == 0 and c.step_time_s is None


def test_errors_for_what_is_not_a_plan():
    with pytest.raises(TrainplanError, match=r"^plan report: no plan found; expected a plan.json"):
        plan_view({"something": 1})
    with pytest.raises(TrainplanError, match=r"^compare report: expected `trainplan compare --json`"):
        compare_rows({"plan": {}})
    with pytest.raises(TrainplanError, match=r"^validate report: expected `trainplan validate --json`"):
        validate_points({"summary": {}})


def test_compare_rows_from_estimates_and_hours():
    (r,) = compare_rows({"rows": [{"instance": "ml.p5.48xlarge", "nodes": 2, "estimate": {
        "tokens_per_s": 1000.0, "usd_per_million_tokens": 3.0, "hours_to_tokens": 48.0}}]})
    assert (r.gpu, r.tokens_per_s, r.usd_per_billion_tokens, r.days) == ("h100-sxm-80gb", 1000.0,
                                                                         3000.0, 2.0)


def test_validate_points_error_is_recomputed_and_missing_measured_comes_from_error():
    pts, skipped = validate_points(S.validate_result())
    assert skipped == [["M004", "precision nvfp4 on a GPU without fp4 tensor cores"]]
    m2 = next(p for p in pts if p.record == "M002" and p.metric == "step_time_s")
    assert m2.error == pytest.approx(2.9 / 3.1 - 1)
    m5 = next(p for p in pts if p.record == "M005" and p.metric == "step_time_s")
    assert m5.measured == pytest.approx(5.0) and m5.error == pytest.approx(-0.2)
    assert not any(p.record == "M001" and p.metric == "peak_mem_gib" for p in pts)  # no measurement


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


def _search_entry(tokens_per_s_scale: float = 1.0) -> tuple[dict, dict, dict]:
    """(plan.json, a runner-up entry shaped like search Candidate.to_dict, its real estimate)."""
    from trainplan.estimate import estimate
    from trainplan.hardware import Cluster, find_node
    from trainplan.job import Job, Workload
    from trainplan.layout import Layout

    plan = S.plan_result()["plan"]
    layout = Layout(ac="full", micro_batch=1, grad_accum=8, dp_shard=16)
    job = Job(S.LLAMA_70B, Cluster(find_node("ml.p6-b200.48xlarge"), 2),
              Workload(seq_len=8192, global_batch=128))
    est = estimate(job, layout).to_dict()
    entry = {"instance": "ml.p6-b200.48xlarge", "nodes": 2, "gpus": 16, "seq_len": 8192,
             "global_batch": 128, "layout": layout.to_dict(), "layout_short": layout.short(),
             "tokens_per_s": est["tokens_per_s"] * tokens_per_s_scale,
             "tokens_per_s_per_gpu": est["tokens_per_s_per_gpu"], "step_time_s": est["step_time_s"],
             "mfu": est["mfu"], "memory_gib": est["peak_mem_gib"], "capacity_gib": 179.0,
             "headroom_gib": 179.0 - est["peak_mem_gib"], "inter_node_bytes_per_token": 1234.0,
             "usd_per_billion_tokens": 1500.0}
    return plan, entry, est


def test_a_search_entry_gets_its_breakdown_from_the_cost_model():
    from trainplan.report.inputs import search_candidate

    plan, entry, est = _search_entry()
    c = search_candidate(entry, "#2", plan)
    assert sum(c.memory_gib.values()) == pytest.approx(est["peak_mem_gib"], rel=1e-3)
    assert sum(c.time_s.values()) == pytest.approx(est["step_time_s"], rel=1e-6)
    assert c.comm  # the ledger too
    assert (c.peak_mem_gib, c.tokens_per_s, c.inter_node_bytes_per_token) == (
        entry["memory_gib"], entry["tokens_per_s"], 1234.0)
    assert c.usd_per_million_tokens == pytest.approx(1.5)
    assert c.extra["headroom_gib"] == pytest.approx(179.0 - est["peak_mem_gib"])


def test_a_search_entry_the_cost_model_disagrees_with_keeps_totals_only():
    from trainplan.report.inputs import search_candidate

    plan, entry, _ = _search_entry(tokens_per_s_scale=1.1)  # e.g. planned with another profile
    c = search_candidate(entry, "#2", plan)
    assert c.memory_gib == {} and c.time_s == {} and c.comm == ()
    assert c.peak_mem_gib == entry["memory_gib"] and c.step_time_s == entry["step_time_s"]


def test_time_terms_name_exposed_communication_by_dimension_and_drop_zeros():
    t = {"compute": 117.0, "recompute": 38.2, "dp": 7.2, "tp": 9.4, "pp": 0.0, "bubble": 0.0,
         "optimizer": 0.03, "overhead": 0.0}
    assert time_terms_s(t) == {"GEMM + attention": 117.0, "recompute": 38.2, "exposed comm dp": 7.2,
                               "exposed comm tp": 9.4, "optimizer": 0.03}


def test_step_time_parts_of_the_real_estimate_stack_to_its_total():
    # costs/steptime.py: StepTime is an exact partition, so the stacked bars equal the step time
    from trainplan.estimate import estimate
    from trainplan.hardware import cluster
    from trainplan.job import Job, Workload
    from trainplan.layout import Layout
    from trainplan.models import resolve

    job = Job(resolve("llama-3.1-8b"), cluster("ml.p5.48xlarge", 1), Workload(8192, 16))
    t = estimate(job, Layout(dp_shard=8, tp=1, micro_batch=2, grad_accum=1, ac="full")).to_dict()["time_s"]
    parts = time_terms_s(t)
    assert "GEMM + attention" in parts and "non-GEMM" in parts and "other" not in parts
    assert sum(parts.values()) == pytest.approx(t.get("total", t.get("total_s")), rel=1e-9)


def test_a_total_larger_than_its_parts_shows_the_rest():
    assert time_terms_s({"compute": 1.0, "tp": 0.5, "total": 2.0}) == {
        "GEMM + attention": 1.0, "exposed comm tp": 0.5, "other": 0.5}
