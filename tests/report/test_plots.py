"""Plot builders: the right numbers in the right traces, units on every axis, a caption each."""

from __future__ import annotations

import re

import pytest
import report_samples as S

from trainplan.report.inputs import plan_view
from trainplan.report.plots import (
    comm_plot,
    memory_groups,
    memory_plot,
    pareto_plot,
    plan_plots,
    step_time_plot,
)
from trainplan.report.plots_compare import compare_plots
from trainplan.report.plots_validate import validate_plots
from trainplan.report.records import validate_points

UNIT = re.compile(r"\((GiB|s|tokens/s|GB per GPU per step|seconds per step|USD|days|"
                  r"fraction of dense peak)\)$|^(GiB|GB per GPU per step|seconds per step|tokens/s|USD|days)$")


def _all_plots():
    v = plan_view(S.plan_result())
    pts, _ = validate_points(S.validate_result())
    return plan_plots(v) + compare_plots(S.compare_result()) + validate_plots(pts)


@pytest.mark.parametrize("plot", _all_plots(), ids=lambda p: p.key)
def test_every_plot_has_units_on_its_value_axes_and_a_caption(plot):
    layout = plot.figure.layout
    axes = [layout[k] for k in layout if k.startswith(("xaxis", "yaxis")) and layout[k] is not None]
    titled = [a.title.text for a in axes if a.title and a.title.text]
    assert titled, plot.key
    value_axes = [t for t in titled if not t.startswith(("plan", "link tier"))]
    assert value_axes and all(UNIT.search(t) for t in value_axes), value_axes
    assert len(plot.caption) > 150 and plot.caption.endswith(".")


def test_memory_bars_stack_to_the_peak_under_the_gpu_capacity_line():
    v = plan_view(S.plan_result())
    fig = memory_plot(v).figure
    totals = [sum(t.y[i] for t in fig.data) for i in range(5)]
    assert totals == pytest.approx([c.peak_mem_gib for c in (v.chosen, *v.runners_up)])
    (line,) = fig.layout.shapes
    assert line.y0 == line.y1 == pytest.approx(v.capacity_gib)
    assert [t.name for t in fig.data] == ["parameters", "gradients", "optimizer states",
                                          "unsharded_in_flight", "activations", "logits and loss",
                                          "runtime overheads"]


def test_memory_groups_of_the_memory_model_terms():
    # the term names of costs.memory's MemoryBreakdown.to_dict()["gib"]
    terms = {"params": 1, "grads": 2, "master_params": 0, "optimizer_states": 4, "unsharded_params": 1,
             "unsharded_grads": 1, "activations": 5, "recompute_working": 1, "activation_grads": 1,
             "logits": 3, "fp8_weights": 1, "fp8_scales": 0.5, "workspace": 0.1, "fragmentation": 1,
             "nccl_buffers": 0.2, "cuda_context": 0.7, "moe_dispatch": 2}
    g = memory_groups(terms)
    assert g["parameters"] == {"params": 1, "unsharded_params": 1, "fp8_weights": 1, "fp8_scales": 0.5}
    assert g["gradients"] == {"grads": 2, "unsharded_grads": 1}
    assert g["activations"] == {"activations": 5, "recompute_working": 1, "activation_grads": 1}
    assert g["runtime overheads"] == {"workspace": 0.1, "fragmentation": 1, "nccl_buffers": 0.2,
                                      "cuda_context": 0.7}
    assert g["optimizer states"] == {"optimizer_states": 4} and g["logits and loss"] == {"logits": 3}
    assert g["moe_dispatch"] == {"moe_dispatch": 2}  # no rule: its own group, never dropped
    assert sum(sum(v.values()) for v in g.values()) == pytest.approx(sum(terms.values()))


def test_pareto_points_grow_with_inter_node_bytes_and_the_chosen_plan_is_a_star():
    v = plan_view(S.plan_result())
    fig = pareto_plot(v).figure
    pts, star = fig.data
    inter = [c.inter_node_bytes for c in v.pareto]
    order = sorted(range(3), key=lambda i: inter[i])
    assert [pts.marker.size[i] for i in order] == sorted(pts.marker.size)
    assert star.marker.symbol == "star"
    assert star.x[0] == pytest.approx(v.capacity_gib - v.chosen.peak_mem_gib)
    assert star.y[0] == pytest.approx(v.chosen.tokens_per_s)


def test_step_time_segments_sum_to_each_step_time_chosen_on_top():
    v = plan_view(S.plan_result())
    fig = step_time_plot(v).figure
    cands = [v.chosen, *v.runners_up][::-1]
    for i, c in enumerate(cands):
        assert sum(t.x[i] for t in fig.data) == pytest.approx(c.step_time_s)
    assert fig.data[0].y[-1] == "chosen"


def test_comm_ledger_splits_bytes_by_tier_and_time_into_hidden_and_exposed():
    v = plan_view(S.plan_result())
    fig = comm_plot(v).figure
    bytes_traces = [t for t in fig.data if t.xaxis == "x"]
    assert list(bytes_traces[0].x) == ["nvlink", "efa"]  # intra-node first
    efa_gb = sum(t.y[1] for t in bytes_traces)
    assert efa_gb == pytest.approx(17.6)
    hidden, exposed = [t for t in fig.data if t.xaxis == "x2"]
    assert exposed.y[1] == pytest.approx(0.4) and hidden.y[1] == pytest.approx(3.1 - 0.4)


def test_no_comm_plot_for_a_plan_without_a_ledger():
    plan = S.plan_result()["plan"]
    plan = {**plan, "estimate": {**plan["estimate"], "comm": []}}
    assert comm_plot(plan_view(plan)) is None
    assert [p.key for p in plan_plots(plan_view(plan))] == ["memory", "pareto", "step_time"]


def test_compare_bars_say_no_plan_where_there_is_none():
    (p,) = compare_plots(S.compare_result())
    tokens = p.figure.data[0]
    assert list(tokens.x) == ["p6-b200.48xlarge", "p5en.48xlarge", "p5.48xlarge", "p4d.24xlarge"]
    assert tokens.text[3] == "no plan" and tokens.text[0].startswith("18,500<br>2 nodes")
    # bars are coloured by GPU: four instance types, four GPUs (B200, H200, H100, A100)
    assert len(set(tokens.marker.color)) == 4


def test_validate_panels_one_per_metric_with_bands_and_gpu_colours():
    pts, _ = validate_points(S.validate_result())
    (p,) = validate_plots(pts)
    titles = [a.text for a in p.figure.layout.annotations]
    assert titles[0].startswith("tokens/s per GPU: n=4, median |err| ")
    gpus = {t.name for t in p.figure.data if t.mode == "markers"}
    assert gpus == {"a100-sxm-80gb", "h100-sxm-80gb", "b200-180gb"}
    assert p.figure.layout.xaxis.type == "log" and p.figure.layout.xaxis3.type == "linear"
    bands = [t for t in p.figure.data if t.name == "p90 |error|" and t.xaxis == "x"]
    assert len(bands) == 2 and bands[0].y[1] > bands[0].x[1] > bands[1].y[1]


def test_no_validate_plot_without_points():
    assert validate_plots([]) == []
