"""Plot builders for a plan: memory per GPU, Pareto set, step time, communication ledger.

Each builder takes the flat views of `report.inputs` and returns a `Plot`: a plotly figure, its
title and a caption that says what to read from it. Units are in every axis title. Builders are
pure (no I/O); `report.html` puts them on a page. plotly is imported here, so import this module
lazily (the `report` extra).
"""

from __future__ import annotations

import math
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


# Memory terms grouped for the stacked bars (first matching rule wins; the order matters:
# "activation_grads" are activations, not gradients). Hover lists the terms inside each group.
_MEMORY_GROUPS = (
    ("optimizer states", ("optimizer",)),
    ("activations", ("activation", "recompute", "act_")),
    ("logits and loss", ("logit", "loss")),
    ("gradients", ("grad",)),
    ("parameters", ("param", "weight", "master", "fp8_scale", "embedding")),
    ("runtime overheads", ("workspace", "fragment", "nccl", "cuda", "context", "overhead", "buffer")),
)


def memory_groups(terms: dict[str, float]) -> dict[str, dict[str, float]]:
    """{group: {term: GiB}} for the non-zero terms; a term no rule matches is its own group."""
    out: dict[str, dict[str, float]] = {}
    for term, gib in terms.items():
        if not gib:
            continue
        group = next((g for g, keys in _MEMORY_GROUPS if any(k in term.lower() for k in keys)), term)
        out.setdefault(group, {})[term] = gib
    return out


def _stack(fig: go.Figure, cands: list[Candidate], parts_of, total_of, horizontal: bool,
           unit: str, fmt: str) -> None:
    """Stacked bars, one trace per part; a candidate without a breakdown gets one grey
    'total (no breakdown)' bar so that it is not drawn empty."""
    parts_per = [parts_of(c) for c in cands]
    names: list[str] = []
    for p in parts_per:
        names += [n for n in p if n not in names]
    labels = [c.label for c in cands]
    for i, name in enumerate(names):
        vals = [sum(p.get(name, {}).values()) if isinstance(p.get(name), dict) else p.get(name, 0.0)
                for p in parts_per]
        detail = ["<br>".join(f"{k}: {v:{fmt}} {unit}" for k, v in p[name].items())
                  if isinstance(p.get(name), dict) else "" for p in parts_per]
        xy = {"y": labels, "x": vals} if horizontal else {"x": labels, "y": vals}
        val = "%{x" if horizontal else "%{y"
        fig.add_bar(name=name, orientation="h" if horizontal else "v", **xy,
                    marker_color=PALETTE[i % len(PALETTE)], customdata=detail,
                    hovertemplate=f"{name}: {val}:{fmt}}} {unit}<br>%{{customdata}}<extra>%{{{'y' if horizontal else 'x'}}}</extra>")
    bare = [total_of(c) if not p else 0.0 for c, p in zip(cands, parts_per)]
    if any(bare):
        xy = {"y": labels, "x": bare} if horizontal else {"x": labels, "y": bare}
        fig.add_bar(name="total (no breakdown)", orientation="h" if horizontal else "v", **xy,
                    marker_color="#BBBBBB")


def memory_plot(view: PlanView) -> Plot:
    cands = _candidates(view)
    fig = go.Figure()
    _stack(fig, cands, lambda c: memory_groups(c.memory_gib), lambda c: c.peak_mem_gib,
           horizontal=False, unit="GiB", fmt=".2f")
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
        "chosen plan and the runners-up (hover a segment for the terms inside it). The dashed line "
        "is the GPU's memory; a bar that reaches it does not fit. The chosen plan leaves "
        f"{headroom} free. Read which part dominates: parameters, gradients and optimizer states "
        "shrink with sharding (dp_shard, tp, pp); activations shrink with checkpointing, "
        "micro-batch and cp. Runners-up come from the search with totals only; their breakdown "
        "is recomputed with the same cost model, or shown grey when it cannot be.")
    return Plot("memory", "Memory per GPU", _style(fig), caption)


def _headroom(view: PlanView, c: Candidate) -> float | None:
    if c.extra.get("headroom_gib") is not None:
        return float(c.extra["headroom_gib"])
    cap = c.extra.get("capacity_gib") or view.capacity_gib
    return cap - c.peak_mem_gib if cap else None


def pareto_plot(view: PlanView) -> Plot:
    pts = list(view.pareto) or _candidates(view)
    has_headroom = all(_headroom(view, c) is not None for c in [*pts, view.chosen])

    def x_of(c: Candidate) -> float:
        return _headroom(view, c) if has_headroom else c.peak_mem_gib

    def y_of(c: Candidate) -> float | None:
        return c.tokens_per_s if c.tokens_per_s is not None else c.tokens_per_s_per_gpu

    inter = [(c.inter_node_bytes_per_token or 0.0) / 1e6 for c in pts]
    top = max(inter) if inter and max(inter) > 0 else 1.0
    # Inter-node bytes span decades (a pipeline's activations vs an FSDP all-gather across
    # nodes): marker area grows with the bytes, colour with their logarithm.
    floor = max(min([v for v in inter if v > 0] or [top]) / 10, 1e-6)
    logs = [math.log10(max(v, floor)) for v in inter]
    lo, hi = min(logs), max(max(logs), min(logs) + 1)
    ticks = list(range(math.floor(lo), math.ceil(hi) + 1))
    fig = go.Figure()
    fig.add_scatter(
        name="Pareto set", mode="markers", x=[x_of(c) for c in pts], y=[y_of(c) for c in pts],
        marker={"size": [10 + 30 * math.sqrt(v / top) for v in inter], "color": logs,
                "colorscale": "Viridis", "cmin": lo, "cmax": hi, "showscale": True,
                "line": {"width": 1, "color": "#333"},
                "colorbar": {"title": "inter-node<br>MB per token", "tickvals": ticks,
                             "ticktext": [f"{10.0 ** t:g}" for t in ticks]}},
        customdata=[[c.label, c.layout_short, v] for c, v in zip(pts, inter)],
        hovertemplate=("%{customdata[0]}: %{customdata[1]}<br>%{y:,.0f} tokens/s<br>"
                       "inter-node %{customdata[2]:.3f} MB per token<extra></extra>"))
    ch = view.chosen
    fig.add_scatter(name="chosen", mode="markers", x=[x_of(ch)], y=[y_of(ch)],
                    marker={"symbol": "star", "size": 22, "color": "#CC3311",
                            "line": {"width": 1, "color": "#000"}},
                    hovertemplate=f"chosen: {ch.layout_short}<br>%{{y:,.0f}} tokens/s<extra></extra>")
    per = "" if ch.tokens_per_s is not None else " per GPU"
    fig.update_layout(
        xaxis_title="memory headroom per GPU (GiB)" if has_headroom else "peak memory per GPU (GiB)",
        yaxis_title=f"throughput{per} (tokens/s)")
    none = " Here no plan sends anything between nodes." if not any(inter) else ""
    caption = (
        "Each point is a plan that no other plan beats on all three of throughput, memory headroom "
        "and inter-node traffic. Up is faster; right leaves more memory free (safer against OOM, "
        "room for longer sequences); larger, brighter points send more bytes over the inter-node "
        "network (EFA) per trained token, all GPUs together. The star is the plan chosen for the "
        f"priority asked.{none}")
    return Plot("pareto", "Pareto set: throughput, memory headroom, inter-node bytes",
                _style(fig), caption)


def step_time_plot(view: PlanView) -> Plot:
    cands = _candidates(view)[::-1]  # chosen on top
    fig = go.Figure()
    _stack(fig, cands, lambda c: c.time_s, lambda c: c.step_time_s or 0.0, horizontal=True,
           unit="s", fmt=".3f")
    fig.update_layout(barmode="stack", xaxis_title="time per optimizer step (s)",
                      yaxis_title="plan")
    ch = view.chosen
    big = max(ch.time_s.items(), key=lambda kv: kv[1])[0] if ch.time_s else "?"
    step = f"{ch.step_time_s:.2f} s" if ch.step_time_s else "?"
    caption = (
        "Where one optimizer step's time goes, per plan: compute, recompute (activation "
        "checkpointing), communication not hidden behind compute (per parallel dimension), "
        f"pipeline bubble, optimizer, non-GEMM work. The chosen plan's step takes {step}, most "
        f"of it '{big}'. A long recompute bar says checkpointing costs time; long exposed-"
        "communication bars say the layout waits on the network.")
    return Plot("step_time", "Step-time breakdown", _style(fig, 140 + 60 * len(cands)), caption)


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
