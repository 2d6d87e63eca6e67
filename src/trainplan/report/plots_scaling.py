"""The scaling plot of a plan: the chosen layout's family (search/scaling.py) against node count.

Three panels share the node axis (logarithmic, one tick per count plan.json holds): tokens/s per
GPU, goodput (costs/goodput.py: the share of wall time that trains once failures and checkpoint
saves are paid) and dollars per billion trained tokens, with failures and saves paid (the price
per token divided by the goodput). The chosen count is a star. Like every plan plot it draws only
what plan.json holds.
"""

from __future__ import annotations

from plotly.subplots import make_subplots

from trainplan.report.colors import CHOSEN, PALETTE
from trainplan.report.plots import Plot, _style
from trainplan.report.views import PlanView


def _usd_per_billion(e) -> float | None:
    usd = e.cost.usd_per_million_tokens
    if usd is None:
        return None
    g = e.goodput.goodput if e.goodput is not None and e.goodput.goodput > 0 else 1.0
    return usd * 1e3 / g


def _goodput_pct(e) -> float | None:
    return None if e.goodput is None else 100 * e.goodput.goodput


def scaling_plot(view: PlanView) -> Plot | None:
    """None when plan.json holds fewer than two node counts of the family."""
    rows = sorted((r for r in view.scaling if r.estimate is not None), key=lambda r: r.nodes)
    if len(rows) < 2:
        return None
    panels = (("throughput per GPU (tokens/s)", lambda e: e.tokens_per_s_per_gpu, ",.0f"),
              ("goodput (%)", _goodput_pct, ".1f"),
              ("cost per billion tokens (USD)", _usd_per_billion, ",.0f"))
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.09)
    ch = view.chosen
    nodes = [r.nodes for r in rows]
    drawn = []
    for i, (name, get, fmt) in enumerate(panels, start=1):
        ys = [get(r.estimate) for r in rows]
        if all(y is None for y in ys):
            continue
        drawn.append(name)
        fig.add_scatter(row=1, col=i, name=name, mode="lines+markers", x=nodes, y=ys, showlegend=False,
                        line={"color": PALETTE[i - 1], "width": 2}, marker={"size": 8},
                        customdata=[r.layout.short() for r in rows],
                        hovertemplate=f"%{{x}} nodes: %{{y:{fmt}}}<br>%{{customdata}}<extra>{name}</extra>")
        mine = next((r for r in rows if r.nodes == ch.nodes), None)
        if mine is not None and get(mine.estimate) is not None:
            fig.add_scatter(row=1, col=i, name="chosen", mode="markers", x=[mine.nodes], y=[get(mine.estimate)],
                            showlegend=i == 1, marker={"symbol": "star", "size": 18, "color": CHOSEN,
                                                      "line": {"width": 1, "color": "#000"}},
                            hovertemplate=f"chosen: %{{x}} nodes, %{{y:{fmt}}}<extra></extra>")
        fig.update_xaxes(type="log", tickvals=nodes, ticktext=[str(n) for n in nodes],
                         title_text="cluster size (nodes)", row=1, col=i)
        fig.update_yaxes(title_text=name, row=1, col=i)
    lay = ch.layout
    family = (f"tp={lay.tp} pp={lay.pp} cp={lay.cp}" + (f" ep={lay.ep}" if lay.ep > 1 else "")
              + f", {lay.precision}, ac={lay.ac}, micro-batch {lay.micro_batch}")
    missing = "" if len(drawn) == 3 else (" The instance has no price, so there is no cost panel."
                                          if panels[2][0] not in drawn else "")
    caption = (
        f"The chosen layout's family ({family}, sharding {lay.sharding}) on {nodes[0]} to {nodes[-1]} nodes "
        f"of {ch.instance}, the global batch of {ch.job.workload.global_batch} sequences held fixed: more "
        "nodes mean more data-parallel replicas and less gradient accumulation. Tokens/s per GPU falls as "
        "communication and the pipeline bubble stop hiding behind fewer micro-batches; goodput falls "
        "because a larger job fails more often (a published failure rate per GPU-hour); the cost per "
        "billion tokens pays for both. Counts where the layout does not divide the batch or does not "
        f"fit are left out. The star is the chosen count.{missing}")
    legend = {"orientation": "h", "x": 0, "y": 1.12, "yanchor": "bottom"}
    return Plot("scaling", "Scaling: throughput, goodput and cost by node count", _style(fig, 420, legend),
                caption)
