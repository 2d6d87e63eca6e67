"""Plot for `trainplan compare`: instance types side by side (input shape: report.records)."""

from __future__ import annotations

from plotly.subplots import make_subplots

from trainplan.report.colors import gpu_color
from trainplan.report.plots import Plot, _style
from trainplan.report.records import compare_rows
from trainplan.report.terminal import days, per_billion


def compare_plots(result: dict) -> list[Plot]:
    rows = compare_rows(result)
    names = [r.label for r in rows]
    colors = [gpu_color(r.gpu) for r in rows]
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.09, subplot_titles=(
        "throughput (tokens/s, higher is better)", "$ per billion tokens (lower is better)",
        "days to the token budget (lower is better)"))
    panels = ((lambda r: r.tokens_per_s, "tokens/s", "{:,.0f}"),
              (lambda r: per_billion(r.usd_per_million_tokens), "USD", "${:,.0f}"),
              (lambda r: days(r.hours_to_tokens), "days", "{:.1f}"))
    for col, (value, unit, fmt) in enumerate(panels, start=1):
        ys = [value(r) for r in rows]
        text = [("no plan" if y is None else fmt.format(y)) +
                (f"<br>{r.nodes} node{'s' if r.nodes != 1 else ''}" if r.nodes else "")
                for r, y in zip(rows, ys)]
        fig.add_bar(x=names, y=[y or 0 for y in ys], marker_color=colors, text=text,
                    textposition="outside", cliponaxis=False, showlegend=False,
                    customdata=[r.gpu for r in rows],
                    hovertemplate=f"%{{x}} (%{{customdata}}): %{{y:,.4g}} {unit}<extra></extra>",
                    row=1, col=col)
        fig.update_yaxes(title_text=unit, row=1, col=col, rangemode="tozero")
        top = max([y for y in ys if y] or [1])
        fig.update_yaxes(range=[0, top * 1.25], row=1, col=col)
    fig.update_xaxes(tickangle=-30)
    near = f"{result['tolerance']:.0%}" if isinstance(result.get("tolerance"), float) else "a tolerance"
    caption = (
        "The plans of the sizing rule on each instance type (without a deadline or budget: the "
        f"cheapest and the fastest within {near} of its cost), side by side, with the nodes each "
        "uses under its bar. Left: tokens per second for the whole cluster. Middle: dollars per "
        "billion training tokens at the catalog price. Right: days to train the token budget. Bars "
        "are coloured by GPU, so a Blackwell vs Hopper vs Ampere difference reads at a glance; "
        "'no plan' means the model does not fit within the node limit.")
    if not result.get("tokens"):
        caption += " No token budget was given, so days are empty."
    fig = _style(fig, 500)
    fig.update_layout(margin={"t": 70})  # room for the panel titles above plotly's toolbar
    return [Plot("compare", "Instance types side by side", fig, caption)]
