"""Terminal summaries of plan, compare and validate results (what `trainplan report FILE` prints).

80 columns, colour only on a terminal; the commands that print their own tables can reuse
`plan_lines`, `compare_table` and `validate_table`. No plotly here.
"""

from __future__ import annotations

import sys
import textwrap

from trainplan.report.terminal import (
    WIDTH,
    fmt_count,
    fmt_pct,
    fmt_seconds,
    format_table,
    paint,
    use_color,
)


def plan_lines(result: dict, color: bool = False) -> list[str]:
    from trainplan.report.inputs import plan_view

    v = plan_view(result)
    ch = v.chosen
    cap = f" / {v.capacity_gib:.0f}" if v.capacity_gib else ""
    # the layout string carries every non-default option (it round-trips): wrap, never cut
    layout = textwrap.wrap(ch.layout_short, WIDTH, initial_indent="  layout      ", subsequent_indent=" " * 14)
    lines = [paint(v.title, "bold", color=color), *layout,
             (f"  throughput  {fmt_count(ch.tokens_per_s)} tokens/s "
              f"({fmt_count(ch.tokens_per_s_per_gpu)} per GPU), MFU {fmt_pct(ch.mfu)}"),
             f"  step time   {fmt_seconds(ch.step_time_s)}",
             f"  memory      {ch.peak_mem_gib:.1f}{cap} GiB per GPU"]
    if ch.usd_per_million_tokens is not None:
        lines.append(f"  cost        ${ch.usd_per_million_tokens:.4f} per million tokens")
    for r in v.reasons:
        lines += textwrap.wrap(r, WIDTH, initial_indent="  - ", subsequent_indent="    ")
    if v.runners_up:
        lines += ["", format_table(
            ["plan", "layout", "tokens/s", "step", "GiB"],
            [[c.label, c.layout_short, fmt_count(c.tokens_per_s), fmt_seconds(c.step_time_s),
              f"{c.peak_mem_gib:.1f}"] for c in (ch, *v.runners_up)],
            row_styles={0: ("green",)}, color=color)]
    return lines


def compare_table(result: dict, color: bool = False) -> str:
    from trainplan.report.records import compare_rows

    rows = compare_rows(result)
    best = min((i for i, r in enumerate(rows) if r.usd_per_billion_tokens is not None),
               key=lambda i: rows[i].usd_per_billion_tokens, default=None)
    return format_table(
        ["instance", "nodes", "tokens/s", "$/B tok", "days", "note"],
        [[r.instance, r.nodes, fmt_count(r.tokens_per_s),
          "-" if r.usd_per_billion_tokens is None else f"{r.usd_per_billion_tokens:,.0f}",
          "-" if r.days is None else f"{r.days:.1f}", r.note] for r in rows],
        row_styles={} if best is None else {best: ("green",)}, color=color)


def validate_table(result: dict, dataset: dict | None = None, color: bool = False) -> str:
    from trainplan.report.records import METRICS, quantile, validate_points

    pts, skipped = validate_points(result, dataset)
    rows = []
    for m in METRICS:
        errs = [abs(p.error) for p in pts if p.metric == m.key]
        signed = [p.error for p in pts if p.metric == m.key]
        if errs:
            rows.append([m.label, len(errs), fmt_pct(quantile(errs, .5)), fmt_pct(quantile(errs, .9)),
                         fmt_pct(max(errs)), fmt_pct(sum(signed) / len(signed), signed=True)])
    table = format_table(["metric", "n", "median |err|", "p90 |err|", "max |err|", "mean err"],
                         rows, color=color)
    return table + f"\n{len(skipped)} records not compared (the HTML report lists them with reasons)"


def print_summary(kind: str, data: dict, dataset: dict | None = None, stream=None) -> None:
    stream = sys.stdout if stream is None else stream
    color = use_color(stream)
    if kind == "plan":
        text = "\n".join(plan_lines(data, color))
    elif kind == "compare":
        text = compare_table(data, color)
    else:
        text = validate_table(data, dataset, color)
    print(text, file=stream)
