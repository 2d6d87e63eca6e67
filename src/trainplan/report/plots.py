"""Plot builders for a plan: memory per GPU, Pareto set, step time, communication ledger.

Each builder takes the `report.views.PlanView` of a typed plan and returns a `Plot`: a plotly
figure, its title and a caption that says what to read from it. Units are in every axis title;
captions speak only of what the plan holds (no runners-up named when plan.json has none).
Colours come from report/colors.py, one per category on every page. Legends sit to the right of
the plot area, below plotly's toolbar, so that the toolbar never covers an entry. Builders are
pure (no I/O); `report.html` puts them on a page. plotly is imported here, so import this module
lazily (the `report` extra).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from trainplan.costs.comm import EFF_NET, network_seconds
from trainplan.report.colors import CHOSEN, GREY, PATTERNS, color
from trainplan.report.views import PlanView, Row

GB = 1e9
LEGEND_RIGHT = {"orientation": "v", "x": 1.02, "xanchor": "left", "y": 1, "yanchor": "top",
                "traceorder": "normal"}


@dataclass(frozen=True)
class Plot:
    key: str  # stable id, used as the div id in the page
    title: str
    figure: go.Figure
    caption: str


def _style(fig: go.Figure, height: int = 420, legend: dict | None = None) -> go.Figure:
    """Common look. The legend goes right of the plot area, top-aligned with it: plotly's toolbar
    sits in the top margin above, so no legend entry can fall under it at any width."""
    fig.update_layout(template="plotly_white", height=height,
                      margin={"l": 70, "r": 30, "t": 40, "b": 60},
                      legend=legend or LEGEND_RIGHT,
                      font={"family": "system-ui, sans-serif", "size": 13})
    return fig


def _who(view: PlanView) -> str:
    n = len(view.runners_up)
    return "the chosen plan" if not n else f"the chosen plan and its {n} runner{'s' if n > 1 else ''}-up"


def _stack(fig: go.Figure, rows: list[Row], parts_of, kind: str, horizontal: bool, unit: str,
           fmt: str) -> None:
    """Stacked bars, one trace per part, coloured by the part's category."""
    parts_per = [parts_of(r) for r in rows]
    names: list[str] = []
    for p in parts_per:
        names += [n for n in p if n not in names]
    labels = [r.label for r in rows]
    for name in names:
        vals = [sum(p[name].values()) if isinstance(p.get(name), dict) else p.get(name, 0.0)
                for p in parts_per]
        detail = ["<br>".join(f"{k}: {v:{fmt}} {unit}" for k, v in p[name].items())
                  if isinstance(p.get(name), dict) else "" for p in parts_per]
        xy = {"y": labels, "x": vals} if horizontal else {"x": labels, "y": vals}
        val = "%{x" if horizontal else "%{y"
        fig.add_bar(name=name, orientation="h" if horizontal else "v", **xy,
                    marker_color=color(kind, name), customdata=detail,
                    hovertemplate=(f"{name}: {val}:{fmt}}} {unit}<br>%{{customdata}}"
                                   f"<extra>%{{{'y' if horizontal else 'x'}}}</extra>"))


def memory_plot(view: PlanView) -> Plot:
    rows = list(view.ranked)
    fig = go.Figure()
    _stack(fig, rows, lambda r: r.memory_gib(), "memory", horizontal=False, unit="GiB", fmt=".2f")
    fig.update_layout(barmode="stack", xaxis_title="plan",
                      yaxis_title="memory per GPU, worst rank (GiB)")
    ch = view.chosen
    cap = ch.capacity_gib
    fig.add_hline(y=cap, line_dash="dash", line_color=CHOSEN,
                  annotation_text=f"{ch.job.cluster.gpu.name} capacity {cap:.0f} GiB",
                  annotation_position="top left")
    fig.update_yaxes(range=[0, max([cap] + [r.peak_mem_gib or 0 for r in rows]) * 1.12])
    headroom = "unknown" if ch.headroom_gib is None else f"{ch.headroom_gib:.1f} GiB"
    caption = (
        f"Memory each GPU needs at its peak (the worst rank), split into what holds it, for {_who(view)} "
        "(hover a segment for the terms inside it). The dashed line is the GPU's memory; a bar that "
        f"reaches it does not fit. The chosen plan leaves {headroom} free. Read which part dominates: "
        "parameters, gradients and optimizer states shrink with sharding (dp_shard, tp, pp); "
        "activations shrink with checkpointing, micro-batch and cp.")
    return Plot("memory", "Memory per GPU", _style(fig), caption)


def pareto_degenerate(view: PlanView) -> str | None:
    """Why the Pareto set cannot be drawn as a scatter, or None when it can: a set of one plan,
    or one whose points share their throughput or their headroom, has no trade-off to show and
    would be drawn on an axis stretched around a single value."""
    pts = [r for r in view.pareto if r.estimate is not None]
    if not pts:
        return "plan.json holds no Pareto set (it was written without a search)"
    if len(pts) == 1:
        return ("the Pareto set holds one plan: no other plan is better on throughput, memory "
                "headroom or inter-node traffic without being worse on another")
    xs = {round(r.headroom_gib, 6) for r in pts}
    ys = {round(r.estimate.tokens_per_s, 6) for r in pts}
    if len(xs) == 1 or len(ys) == 1:
        axis = "memory headroom" if len(xs) == 1 else "throughput"
        return f"every plan of the Pareto set has the same {axis}: there is no trade-off to draw"
    return None


def pareto_plot(view: PlanView) -> Plot | None:
    """None when the set is degenerate (pareto_degenerate): the page shows a table instead."""
    if pareto_degenerate(view):
        return None
    pts = [r for r in view.pareto if r.estimate is not None]
    inter = [r.traffic_per_token()[0] / 1e6 for r in pts]
    top = max(inter) if max(inter) > 0 else 1.0
    # Inter-node bytes span decades (a pipeline's activations vs an FSDP all-gather across
    # nodes): marker area grows with the bytes, colour with their logarithm.
    floor = max(min([v for v in inter if v > 0] or [top]) / 10, 1e-6)
    logs = [math.log10(max(v, floor)) for v in inter]
    lo, hi = min(logs), max(max(logs), min(logs) + 1)
    ticks = list(range(math.floor(lo), math.ceil(hi) + 1))
    fig = go.Figure()
    fig.add_scatter(
        name="Pareto set", mode="markers", x=[r.headroom_gib for r in pts],
        y=[r.estimate.tokens_per_s for r in pts],
        marker={"size": [10 + 30 * math.sqrt(v / top) for v in inter], "color": logs,
                "colorscale": "Viridis", "cmin": lo, "cmax": hi, "showscale": True,
                "line": {"width": 1, "color": "#333"},
                "colorbar": {"title": {"text": "inter-node<br>MB per token"}, "tickvals": ticks,
                             "ticktext": [f"{10.0 ** t:g}" for t in ticks], "y": 0.45, "len": 0.9}},
        customdata=[[r.label, r.layout.short(), v] for r, v in zip(pts, inter)],
        hovertemplate=("%{customdata[0]}: %{customdata[1]}<br>%{y:,.0f} tokens/s<br>"
                       "inter-node %{customdata[2]:.3f} MB per token<extra></extra>"))
    ch = view.chosen
    fig.add_scatter(name="chosen", mode="markers", x=[ch.headroom_gib], y=[ch.estimate.tokens_per_s],
                    marker={"symbol": "star", "size": 22, "color": CHOSEN, "line": {"width": 1, "color": "#000"}},
                    hovertemplate=f"chosen: {ch.layout.short()}<br>%{{y:,.0f}} tokens/s<extra></extra>")
    fig.update_layout(xaxis_title="memory headroom per GPU (GiB)", yaxis_title="throughput (tokens/s)")
    none = " Here no plan sends anything between nodes." if not any(inter) else ""
    caption = (
        f"Each of the {len(pts)} points is a plan that no other plan beats on all three of throughput, "
        "memory headroom and inter-node traffic. Up is faster; right leaves more memory free (safer "
        "against OOM, room for longer sequences); larger, brighter points send more bytes over the "
        "inter-node network (EFA) per trained token, all GPUs together. The star is the plan chosen "
        f"for the priority asked.{none}")
    # two legend entries only: kept above the plot on the left, clear of the toolbar on the right
    legend = {"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom"}
    return Plot("pareto", "Pareto set: throughput, memory headroom, inter-node bytes",
                _style(fig, legend=legend), caption)


def step_time_plot(view: PlanView) -> Plot:
    rows = list(view.ranked)[::-1]  # chosen on top
    fig = go.Figure()
    _stack(fig, rows, lambda r: r.time_s(), "step_time", horizontal=True, unit="s", fmt=".3f")
    fig.update_layout(barmode="stack", xaxis_title="time per optimizer step (s)", yaxis_title="plan")
    ch = view.chosen
    parts = ch.time_s()
    big = max(parts.items(), key=lambda kv: kv[1])[0] if parts else "?"
    step = "?" if ch.estimate is None else f"{ch.estimate.step_time_s:.2f} s"
    caption = (
        f"Where one optimizer step's time goes, for {_who(view)}: compute, recompute (activation "
        "checkpointing), communication not hidden behind compute (per parallel dimension), "
        f"pipeline bubble, optimizer, non-GEMM work. The chosen plan's step takes {step}, most "
        f"of it '{big}'. A long recompute bar says checkpointing costs time; long exposed-"
        "communication bars say the layout waits on the network.")
    return Plot("step_time", "Step-time breakdown", _style(fig, 160 + 60 * len(rows)), caption)


def _tiers(view: PlanView) -> tuple[list[tuple[str, str, str, float]], str]:
    """(collective, dimension, tier, bytes per GPU per step) of the chosen plan's ledger, each
    collective that spans nodes split into its NVLink part and the part that crosses the network
    (CommEntry.network_bytes, as the step-time model times it); and the node's local tier."""
    node = view.chosen.job.cluster.node
    local = "nvlink" if node.intra_node == "nvswitch" else "pcie"
    out = []
    for e in view.chosen.estimate.comm:
        if e.network_bytes:
            out.append((e.collective, e.dimension, e.tier, e.network_bytes))
            if e.bytes > e.network_bytes:
                out.append((e.collective, e.dimension, local, e.bytes - e.network_bytes))
        else:
            out.append((e.collective, e.dimension, e.tier, e.bytes))
    return out, local


def comm_plot(view: PlanView) -> Plot | None:
    est = view.chosen.estimate
    if est is None or not est.comm:
        return None
    parts, _ = _tiers(view)
    net_tiers = {e.tier for e in est.comm if e.network_bytes}
    tiers = sorted({t for *_, t, _ in parts} | {e.tier for e in est.comm}, key=lambda t: (t in net_tiers, t))
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.14,
                        subplot_titles=("bytes per GPU per step", "time per step"))
    groups = list(dict.fromkeys((c, d) for c, d, _, _ in parts))
    for c, d in groups:
        g = f"{c} ({d})"
        fig.add_bar(name=g, x=tiers, legendgroup=g, marker_color=color("dimension", d),
                    marker_pattern_shape=PATTERNS.get(c, ""),
                    y=[sum(b for c2, d2, t2, b in parts if (c2, d2, t2) == (c, d, t)) / GB for t in tiers],
                    hovertemplate=f"{g}: %{{y:.3f}} GB<extra>%{{x}}</extra>", row=1, col=1)
    # a collective's time belongs to the tier of its slowest phase: the network for one that spans nodes
    time_tiers = [t for t in tiers if any(e.tier == t for e in est.comm)]
    for name, exposed, col in (("hidden behind compute", False, GREY), ("exposed", True, CHOSEN)):
        ys = []
        for t in time_tiers:
            tot = sum(e.seconds for e in est.comm if e.tier == t)
            exp = sum(e.exposed_seconds for e in est.comm if e.tier == t)
            ys.append(exp if exposed else max(tot - exp, 0.0))
        fig.add_bar(name=name, x=time_tiers, y=ys, marker_color=col,
                    hovertemplate=f"{name}: %{{y:.3f}} s<extra>%{{x}}</extra>", row=1, col=2)
    fig.update_layout(barmode="stack")
    fig.update_xaxes(title_text="link tier")
    fig.update_yaxes(title_text="GB per GPU per step", row=1, col=1)
    fig.update_yaxes(title_text="seconds per step", row=1, col=2)
    caption = (
        "The chosen plan's communication ledger by the link it crosses: NVLink inside a node, "
        "EFA/InfiniBand between nodes, PCIe to host memory. Left: gigabytes each GPU sends per step, "
        "by collective (pattern) and parallel dimension (colour); a collective that spans nodes runs "
        "hierarchically, so only part of its bytes cross the network and the rest stay on NVLink. "
        "Right: seconds those collectives take, split into the part hidden behind compute and the "
        f"exposed part that adds to the step. {_network_sentence(view)}")
    return Plot("comm", "Communication ledger per link tier", _style(fig, 460), caption)


def _network_sentence(view: PlanView) -> str:
    """Inter-node bytes per GPU and the time they take at this GPU's share of the node's network
    bandwidth (costs/comm.network_seconds, the rule the step-time model uses)."""
    node = view.chosen.job.cluster.node
    nbytes = view.chosen.network_bytes_per_gpu()
    if not nbytes:
        return "Nothing crosses the inter-node network."
    share = node.inter_node_bandwidth_per_gpu
    secs = network_seconds(nbytes, node)
    step = view.chosen.estimate.step_time_s
    return (f"Inter-node: {nbytes / GB:.2f} GB per GPU per step, {secs:.2f} s at this GPU's share of "
            f"the node's network bandwidth ({share / GB:.1f} GB/s x {EFF_NET:.0%} achieved), within "
            f"the step of {step:.2f} s.")


def plan_plots(view: PlanView) -> list[Plot]:
    from trainplan.report.plots_scaling import scaling_plot

    plots = [memory_plot(view), pareto_plot(view), step_time_plot(view), comm_plot(view), scaling_plot(view)]
    return [p for p in plots if p is not None]
