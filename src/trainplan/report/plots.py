"""Plot builders for a plan: memory per GPU, Pareto set, step time, communication ledger.

Each builder takes the flat views of `report.inputs` and returns a `Plot`: a plotly figure, its
title and a caption that says what to read from it. Units are in every axis title. Builders are
pure (no I/O); `report.html` puts them on a page. plotly is imported here, so import this module
lazily (the `report` extra).
"""

from __future__ import annotations

from dataclasses import dataclass

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from trainplan.report.inputs import Candidate, PlanView, is_inter_node

GB = 1e9
# One qualitative palette for every report (plotly's "Safe" set: readable by colour-blind people).
PALETTE = ("#88CCEE", "#CC6677", "#DDCC77", "#117733", "#332288", "#AA4499", "#44AA99",
           "#999933", "#882255", "#661100", "#6699CC", "#888888")
TIER_COLORS = {"nvlink": "#117733", "efa": "#CC6677", "ib": "#CC6677", "pcie": "#DDCC77"}


@dataclass(frozen=True)
class Plot:
    key: str  # stable id, used as the div id in the page
    title: str
    figure: go.Figure
    caption: str


def _style(fig: go.Figure, height: int = 420) -> go.Figure:
    fig.update_layout(template="plotly_white", height=height, margin={"l": 70, "r": 30, "t": 30, "b": 60},
                      legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0, "traceorder": "normal"},
                      font={"family": "system-ui, sans-serif", "size": 13})
    return fig


def _candidates(view: PlanView) -> list[Candidate]:
    return [view.chosen, *view.runners_up]


def memory_plot(view: PlanView) -> Plot:
    cands = _candidates(view)
    terms: list[str] = []
    for c in cands:
        terms += [t for t in c.memory_gib if t not in terms]
    fig = go.Figure()
    x = [c.label for c in cands]
    for i, term in enumerate(terms):
        fig.add_bar(name=term.replace("_", " "), x=x, y=[c.memory_gib.get(term, 0.0) for c in cands],
                    marker_color=PALETTE[i % len(PALETTE)],
                    customdata=[c.layout_short for c in cands],
                    hovertemplate=f"{term}: %{{y:.2f}} GiB<br>%{{customdata}}<extra>%{{x}}</extra>")
    if not terms:  # an estimate without a breakdown still has a peak
        fig.add_bar(name="peak (no breakdown)", x=x, y=[c.peak_mem_gib for c in cands],
                    marker_color=PALETTE[0])
    fig.update_layout(barmode="stack", xaxis_title="plan (chosen, then runners-up)",
                      yaxis_title="memory per GPU, worst rank (GiB)")
    cap = view.capacity_gib
    if cap:
        fig.add_hline(y=cap, line_dash="dash", line_color="#CC3311",
                      annotation_text=f"{view.gpu_name} capacity {cap:.0f} GiB",
                      annotation_position="top left")
        fig.update_yaxes(range=[0, max([cap] + [c.peak_mem_gib for c in cands]) * 1.12])
    headroom = f"{cap - view.chosen.peak_mem_gib:.1f} GiB" if cap else "unknown"
    caption = (
        "Memory each GPU needs at its peak (the worst rank), split into what holds it, for the "
        "chosen plan and the runners-up. The dashed line is the GPU's memory; a bar that reaches "
        f"it does not fit. The chosen plan leaves {headroom} free. Read which term dominates: "
        "optimizer states and parameters shrink with sharding (dp_shard, tp, pp); activations "
        "shrink with checkpointing, micro-batch and cp.")
    return Plot("memory", "Memory per GPU", _style(fig), caption)


def pareto_plot(view: PlanView) -> Plot:
    pts = list(view.pareto) or _candidates(view)
    cap = view.capacity_gib

    def x_of(c: Candidate) -> float:
        return (cap - c.peak_mem_gib) if cap else c.peak_mem_gib

    def y_of(c: Candidate) -> float | None:
        return c.tokens_per_s if c.tokens_per_s is not None else c.tokens_per_s_per_gpu

    inter = [c.inter_node_bytes / GB for c in pts]
    top = max(inter) if inter and max(inter) > 0 else 1.0
    fig = go.Figure()
    fig.add_scatter(
        name="Pareto set", mode="markers", x=[x_of(c) for c in pts], y=[y_of(c) for c in pts],
        marker={"size": [10 + 30 * v / top for v in inter], "color": inter, "colorscale": "Viridis",
                    "cmin": 0, "cmax": top, "showscale": True, "line": {"width": 1, "color": "#333"},
                    "colorbar": {"title": "inter-node<br>GB/GPU/step"}},
        customdata=[[c.label, c.layout_short, v] for c, v in zip(pts, inter)],
        hovertemplate=("%{customdata[0]}: %{customdata[1]}<br>tokens/s %{y:,.0f}<br>"
                       "inter-node %{customdata[2]:.2f} GB<extra></extra>"))
    ch = view.chosen
    fig.add_scatter(name="chosen", mode="markers", x=[x_of(ch)], y=[y_of(ch)],
                    marker={"symbol": "star", "size": 22, "color": "#CC3311",
                                "line": {"width": 1, "color": "#000"}},
                    hovertemplate=f"chosen: {ch.layout_short}<br>tokens/s %{{y:,.0f}}<extra></extra>")
    per = "" if ch.tokens_per_s is not None else " per GPU"
    fig.update_layout(
        xaxis_title="memory headroom per GPU (GiB)" if cap else "peak memory per GPU (GiB)",
        yaxis_title=f"throughput{per} (tokens/s)")
    caption = (
        "Each point is a plan no other plan beats on all three of throughput, memory headroom and "
        "inter-node traffic. Up is faster; right leaves more memory free (safer against OOM and "
        "room for longer sequences); larger, brighter points send more bytes over the inter-node "
        "network (EFA) per GPU per step. The star is the plan chosen for the priority asked.")
    return Plot("pareto", "Pareto set: throughput, memory headroom, inter-node bytes",
                _style(fig), caption)


def step_time_plot(view: PlanView) -> Plot:
    cands = _candidates(view)
    parts: list[str] = []
    for c in cands:
        parts += [p for p in c.time_s if p not in parts]
    fig = go.Figure()
    y = [c.label for c in cands][::-1]  # chosen on top
    for i, part in enumerate(parts):
        fig.add_bar(name=part, orientation="h", y=y,
                    x=[c.time_s.get(part, 0.0) for c in cands][::-1],
                    marker_color=PALETTE[i % len(PALETTE)],
                    hovertemplate=f"{part}: %{{x:.3f}} s<extra>%{{y}}</extra>")
    if not parts:
        fig.add_bar(name="step (no breakdown)", orientation="h", y=y,
                    x=[c.step_time_s or 0.0 for c in cands][::-1], marker_color=PALETTE[0])
    fig.update_layout(barmode="stack", xaxis_title="time per optimizer step (s)",
                      yaxis_title="plan")
    ch = view.chosen
    big = max(ch.time_s.items(), key=lambda kv: kv[1])[0] if ch.time_s else "?"
    step = f"{ch.step_time_s:.2f} s" if ch.step_time_s else "?"
    caption = (
        "Where one optimizer step's time goes, per plan: compute, recompute (activation "
        "checkpointing), communication that is not hidden behind compute (per parallel dimension), "
        f"pipeline bubble, optimizer. The chosen plan's step takes {step}, most of it '{big}'. "
        "A long recompute bar says checkpointing costs time; long exposed-communication bars say "
        "the layout waits on the network.")
    return Plot("step_time", "Step-time breakdown", _style(fig, 120 + 60 * len(cands)), caption)


def comm_plot(view: PlanView) -> Plot | None:
    rows = view.chosen.comm
    if not rows:
        return None
    tiers = sorted({r.tier for r in rows}, key=lambda t: (is_inter_node(t), t))
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.14,
                        subplot_titles=("bytes per GPU per step", "time per step"))
    groups: list[str] = []
    for r in rows:
        g = f"{r.collective} ({r.dimension})"
        if g not in groups:
            groups.append(g)
    for i, g in enumerate(groups):
        fig.add_bar(name=g, x=tiers, legendgroup=g, marker_color=PALETTE[i % len(PALETTE)],
                    y=[sum(r.bytes for r in rows if f"{r.collective} ({r.dimension})" == g
                           and r.tier == t) / GB for t in tiers],
                    hovertemplate=f"{g}: %{{y:.3f}} GB<extra>%{{x}}</extra>", row=1, col=1)
    for name, attr, color in (("hidden behind compute", None, "#BBBBBB"),
                              ("exposed", "exposed_s", "#CC3311")):
        ys = []
        for t in tiers:
            tot = sum(r.seconds for r in rows if r.tier == t)
            exp = sum(r.exposed_s for r in rows if r.tier == t)
            ys.append(exp if attr else max(tot - exp, 0.0))
        fig.add_bar(name=name, x=tiers, y=ys, marker_color=color,
                    hovertemplate=f"{name}: %{{y:.3f}} s<extra>%{{x}}</extra>", row=1, col=2)
    fig.update_layout(barmode="stack")
    fig.update_xaxes(title_text="link tier")
    fig.update_yaxes(title_text="GB per GPU per step", row=1, col=1)
    fig.update_yaxes(title_text="seconds per step", row=1, col=2)
    inter = view.chosen.inter_node_bytes / GB
    caption = (
        "The chosen plan's communication ledger by the link it crosses: NVLink inside a node, "
        "EFA/InfiniBand between nodes. Left: gigabytes each GPU sends per step, by collective and "
        "parallel dimension. Right: seconds those collectives take, split into the part hidden "
        f"behind compute and the exposed part that adds to the step. Inter-node: {inter:.2f} GB "
        "per GPU per step; inter-node bytes are the expensive ones.")
    fig = _style(fig, 460)
    fig.update_layout(margin={"t": 90}, legend={"y": 1.14})
    return Plot("comm", "Communication ledger per link tier", fig, caption)


def plan_plots(view: PlanView) -> list[Plot]:
    plots = [memory_plot(view), pareto_plot(view), step_time_plot(view), comm_plot(view)]
    return [p for p in plots if p is not None]
