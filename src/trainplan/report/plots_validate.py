"""Plot for `trainplan validate`: predicted vs measured, one panel per metric, coloured by GPU
(input shape: report.records)."""

from __future__ import annotations

from plotly.subplots import make_subplots

from trainplan.report.colors import gpu_color
from trainplan.report.plots import Plot, _style
from trainplan.report.records import METRICS, Point
from trainplan.report.records import quantile as _quantile


def validate_plots(pts: list[Point]) -> list[Plot]:
    metrics = [m for m in METRICS if any(p.metric == m.key for p in pts)]
    if not metrics:
        return []
    gpus = sorted({p.gpu for p in pts})
    color = {g: gpu_color(g) for g in gpus}
    cols = 2 if len(metrics) > 1 else 1
    nrows = -(-len(metrics) // cols)
    titles = []
    for m in metrics:
        errs = [abs(p.error) for p in pts if p.metric == m.key]
        titles.append(f"{m.label}: n={len(errs)}, median |err| {_quantile(errs, .5):.0%}, "
                      f"p90 {_quantile(errs, .9):.0%}")
    fig = make_subplots(rows=nrows, cols=cols, subplot_titles=titles, horizontal_spacing=0.1,
                        vertical_spacing=0.14)
    shown: set[str] = set()
    for i, m in enumerate(metrics):
        row, col = i // cols + 1, i % cols + 1
        mp = [p for p in pts if p.metric == m.key]
        lo = min(min(p.measured, p.predicted) for p in mp) * 0.8
        hi = max(max(p.measured, p.predicted) for p in mp) * 1.2
        errs = [abs(p.error) for p in mp]
        for q, name, dash in ((_quantile(errs, .9), "p90 |error|", "dot"),
                              (_quantile(errs, .5), "median |error|", "dash")):
            for sign in (1, -1):
                k = 1 + sign * q
                fig.add_scatter(x=[lo, hi], y=[lo * k, hi * k], mode="lines", name=name,
                                line={"color": "#999", "dash": dash, "width": 1}, legendgroup=name,
                                showlegend=(i == 0 and sign == 1), hoverinfo="skip", row=row, col=col)
        fig.add_scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="predicted = measured",
                        line={"color": "#333", "width": 1}, legendgroup="ideal",
                        showlegend=(i == 0), hoverinfo="skip", row=row, col=col)
        for g in gpus:
            gp = [p for p in mp if p.gpu == g]
            if not gp:
                continue
            fig.add_scatter(
                x=[p.measured for p in gp], y=[p.predicted for p in gp], mode="markers", name=g,
                legendgroup=g, showlegend=g not in shown,
                marker={"color": color[g], "size": 9, "line": {"width": 0.5, "color": "#333"}},
                customdata=[[p.record, p.source, p.error * 100] for p in gp],
                hovertemplate=(f"%{{customdata[0]}} ({g}, %{{customdata[1]}})<br>measured %{{x:.4g}} "
                               f"{m.unit}<br>predicted %{{y:.4g}} {m.unit}<br>error "
                               "%{customdata[2]:+.1f}%<extra></extra>"),
                row=row, col=col)
            shown.add(g)
        # log axes: one tick per decade (plotly's default also labels 2 and 5 of each decade)
        axis = {"type": "log", "dtick": 1} if m.log else {"type": "linear"}
        fig.update_xaxes(title_text=f"measured {m.label} ({m.unit})", row=row, col=col, **axis)
        fig.update_yaxes(title_text=f"predicted ({m.unit})", row=row, col=col, **axis)
    fig.update_annotations(font_size=13)
    fig = _style(fig, 430 * nrows)
    fig.update_layout(legend={"orientation": "v", "y": 1, "x": 1.02, "yanchor": "top"},
                      margin={"r": 180})
    caption = (
        "Each point is one published training run: the measured value across, trainplan's "
        "prediction up, coloured by GPU. On the solid diagonal the prediction is exact; points "
        "above it are over-predicted. Dashed lines bound the median |error| and dotted lines the "
        "90th percentile, so the band between the dotted lines holds 9 runs in 10. Look for a GPU "
        "whose points sit on one side of the diagonal: a bias the model has on that hardware. "
        "Throughput and step time are on log axes.")
    return [Plot("validate", "Predicted vs measured", fig, caption)]
