"""Plot builders: the right numbers in the right traces, units on every axis, a caption each,
one colour per category on every page."""

from __future__ import annotations

import re

import pytest
import report_samples as S

from trainplan.costs.comm import network_seconds
from trainplan.report.plots import (
    comm_plot,
    memory_plot,
    pareto_degenerate,
    pareto_plot,
    plan_plots,
    step_time_plot,
)
from trainplan.report.plots_compare import compare_plots
from trainplan.report.plots_validate import validate_plots
from trainplan.report.records import validate_points
from trainplan.report.views import plan_view

UNIT = re.compile(r"\((GiB|s|tokens/s|GB per GPU per step|seconds per step|USD|days|%|nodes|"
                  r"fraction of dense peak)\)$|^(GiB|GB per GPU per step|seconds per step|tokens/s|USD|days)$")


def _all_plots():
    v = plan_view(S.plan())
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
    v = plan_view(S.plan())
    fig = memory_plot(v).figure
    totals = [sum(t.y[i] for t in fig.data) for i in range(5)]
    assert totals == pytest.approx([r.estimate.peak_mem_gib for r in v.ranked])
    (line,) = fig.layout.shapes
    assert line.y0 == line.y1 == pytest.approx(v.chosen.capacity_gib)


def test_captions_name_runners_up_only_when_the_plan_holds_them():
    bare = plan_view(S.plan(runners_up=False))
    for plot in plan_plots(bare):
        assert "runner" not in plot.caption, plot.key
        assert "runner" not in (plot.figure.layout.xaxis.title.text or "")
    full = plan_view(S.plan())
    assert "the chosen plan and its 4 runners-up" in memory_plot(full).caption
    assert "the chosen plan and its 4 runners-up" in step_time_plot(full).caption


def test_pareto_points_grow_with_inter_node_bytes_and_the_chosen_plan_is_a_star():
    v = plan_view(S.plan())
    fig = pareto_plot(v).figure
    pts, star = fig.data
    inter = [r.traffic_per_token()[0] for r in v.pareto]
    order = sorted(range(3), key=lambda i: inter[i])
    assert [pts.marker.size[i] for i in order] == sorted(pts.marker.size)
    assert star.marker.symbol == "star"
    assert star.x[0] == pytest.approx(v.chosen.headroom_gib)
    assert star.y[0] == pytest.approx(v.chosen.estimate.tokens_per_s)


@pytest.mark.parametrize("pareto, why", [
    ((), "plan.json holds no Pareto set"),
    ((0,), "the Pareto set holds one plan"),
    ((0, 0), "the Pareto set holds one plan"),
    ((2, 3), None),
])
def test_a_degenerate_pareto_set_is_not_plotted(pareto, why):
    v = plan_view(S.plan(pareto=pareto))
    if pareto == (0, 0):  # two entries, one plan: the same point twice is still one point
        assert pareto_degenerate(v).startswith("every plan of the Pareto set has the same")
        return
    got = pareto_degenerate(v)
    assert (got is None) if why is None else got.startswith(why)
    assert (pareto_plot(v) is None) == (why is not None)


def test_step_time_segments_sum_to_each_step_time_chosen_on_top():
    v = plan_view(S.plan())
    fig = step_time_plot(v).figure
    rows = list(v.ranked)[::-1]
    for i, r in enumerate(rows):
        assert sum(t.x[i] for t in fig.data) == pytest.approx(r.estimate.step_time_s)
    assert fig.data[0].y[-1] == "chosen"


def test_comm_ledger_shows_the_network_part_of_a_collective_on_the_network_tier():
    v = plan_view(S.plan())
    fig = comm_plot(v).figure
    est = v.chosen.estimate
    bytes_traces = [t for t in fig.data if t.xaxis == "x"]
    tiers = list(bytes_traces[0].x)
    assert tiers == ["nvlink", "efa"]  # intra-node first
    efa = sum(t.y[1] for t in bytes_traces) * 1e9
    nvlink = sum(t.y[0] for t in bytes_traces) * 1e9
    assert efa == pytest.approx(sum(e.network_bytes for e in est.comm))
    assert nvlink + efa == pytest.approx(sum(e.bytes for e in est.comm))  # nothing lost in the split
    _hidden, exposed = [t for t in fig.data if t.xaxis == "x2"]
    efa_entries = [e for e in est.comm if e.tier == "efa"]
    assert exposed.y[-1] == pytest.approx(sum(e.exposed_seconds for e in efa_entries))


def test_inter_node_bytes_are_timed_at_the_per_gpu_share_and_fit_in_the_step():
    """The page's inter-node GB per GPU, at this GPU's share of the node's EFA bandwidth, take no
    longer than the collectives that carry them, and so no longer than the step (timed with the
    whole node's bandwidth, or counted with the NVLink part of a hierarchical collective, they
    would not add up)."""
    v = plan_view(S.plan())
    for r in v.ranked:
        node = r.job.cluster.node
        nbytes = r.network_bytes_per_gpu()
        secs = network_seconds(nbytes, node)
        assert nbytes > 0, r.label  # every sample layout crosses nodes
        assert secs <= sum(e.seconds for e in r.estimate.comm if e.network_bytes) + 1e-9
        assert secs < r.estimate.step_time_s
        assert secs == pytest.approx(nbytes / (node.inter_node_bandwidth_per_gpu * 0.73))
    cap = comm_plot(v).caption
    ch = v.chosen
    assert (f"Inter-node: {ch.network_bytes_per_gpu() / 1e9:.2f} GB per GPU per step, "
            f"{network_seconds(ch.network_bytes_per_gpu(), ch.job.cluster.node):.2f} s at this GPU's "
            "share of the node's network bandwidth (50.0 GB/s x 73% achieved)") in cap


def test_one_colour_per_category_on_every_page():
    def colours(fig):
        return {t.name: t.marker.color for t in fig.data if t.name}

    a = colours(memory_plot(plan_view(S.plan())).figure)
    b = colours(memory_plot(plan_view(S.plan(runners_up=False))).figure)  # other set of groups
    assert a["activations"] == b["activations"] and a["parameters"] == b["parameters"]
    sa = colours(step_time_plot(plan_view(S.plan())).figure)
    sb = colours(step_time_plot(plan_view(S.plan(runners_up=False))).figure)
    assert all(sa[k] == sb[k] for k in sb)
    (cmp,) = compare_plots(S.compare_result())
    by_gpu = dict(zip(cmp.figure.data[0].customdata, cmp.figure.data[0].marker.color))
    pts, _ = validate_points(S.validate_result())
    (val,) = validate_plots(pts)
    for t in val.figure.data:
        if t.mode == "markers" and t.name in by_gpu:
            assert t.marker.color == by_gpu[t.name], t.name
    assert "b200-180gb" in by_gpu and any(t.name == "b200-180gb" for t in val.figure.data)


def test_no_comm_plot_for_a_plan_without_a_ledger():
    from dataclasses import replace

    p = S.plan()
    p = replace(p, estimate=replace(p.estimate, comm=()))
    assert comm_plot(plan_view(p)) is None
    assert [x.key for x in plan_plots(plan_view(p))] == ["memory", "pareto", "step_time", "scaling"]


def test_compare_bars_say_no_plan_where_there_is_none():
    (p,) = compare_plots(S.compare_result())
    tokens = p.figure.data[0]
    assert list(tokens.x) == ["p6-b200.48xlarge", "p5en.48xlarge", "p5.48xlarge", "p4d.24xlarge"]
    assert tokens.text[3] == "no plan" and tokens.text[0].startswith("18,500<br>2 nodes")
    usd = p.figure.data[1]
    assert usd.y[0] == pytest.approx(3421.0)  # per billion on the page, per million in the data
    assert len(set(tokens.marker.color)) == 4  # four GPUs, four colours


def test_validate_panels_one_per_metric_with_bands_and_gpu_colours():
    pts, _ = validate_points(S.validate_points_sample())
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


def test_scaling_plot_draws_the_family_by_node_count_with_the_chosen_count_a_star():
    from trainplan.report.plots_scaling import scaling_plot

    v = plan_view(S.plan())
    p = scaling_plot(v)
    lines = [t for t in p.figure.data if t.mode == "lines+markers"]
    assert [t.yaxis for t in lines] == ["y", "y2", "y3"]  # throughput, goodput, cost
    nodes = [r.nodes for r in v.scaling]
    assert list(lines[0].x) == nodes and len(nodes) >= 3 and v.chosen.nodes in nodes
    assert list(lines[0].y) == [r.estimate.tokens_per_s_per_gpu for r in v.scaling]
    # a larger job fails more often: goodput falls with the node count
    assert list(lines[1].y) == sorted(lines[1].y, reverse=True)
    stars = [t for t in p.figure.data if t.name == "chosen"]
    assert len(stars) == 3 and all(list(t.x) == [v.chosen.nodes] for t in stars)
    # no series, no plot; an instance without a price draws no cost panel
    assert scaling_plot(plan_view(S.plan(scaling=False))) is None
