"""Terminal summaries of plan, compare and validate results (what `trainplan report FILE` prints).

80 columns, colour only on a terminal. One renderer per result kind: `trainplan plan` prints
`plan_lines` too. No plotly here.
"""

from __future__ import annotations

import sys
import textwrap

from trainplan.report.terminal import (
    WIDTH,
    days,
    fmt_count,
    fmt_pct,
    fmt_seconds,
    format_table,
    paint,
    per_billion,
    use_color,
)


def plan_lines(plan, color: bool = False, priority: str | None = None) -> list[str]:
    """The one terminal rendering of a plan (`trainplan plan` and `trainplan report plan.json`):
    a typed Plan, or a plan.json dict, or `trainplan plan --json` output. Numbers are those the
    plan holds; money per million tokens and hours are converted only here, for reading."""
    from trainplan.profile import band_basis
    from trainplan.report.views import as_plan, plan_view

    v = plan_view(as_plan(plan))
    ch, p = v.chosen, v.plan
    w, e = p.job.workload, ch.estimate
    head = f"{v.title}, {p.job.cluster.num_gpus} GPUs" + (f", priority {priority}" if priority else "")
    lines = [paint(head, "bold", color=color), f"chosen: {ch.layout.short()}"]
    if e is not None:
        inter = ch.traffic_per_token()[0]
        lines += [
            (f"  seq {w.seq_len}, global batch {w.global_batch}; {fmt_count(e.tokens_per_s)} tokens/s "
             f"({fmt_count(e.tokens_per_s_per_gpu)}/GPU), MFU {fmt_pct(e.mfu)} of bf16 peak, step {fmt_seconds(e.step_time_s)}"),
            (f"  {fmt_count(e.cluster_band[0])}-{fmt_count(e.cluster_band[1])} "
             f"tokens/s at {e.band_basis or band_basis(e.profile)} (x/{e.band[1] / e.tokens_per_s_per_gpu:.2f})"),
            *(f"  {d}" for d in e.derived),  # the band above carries the ratio's error
            (f"  memory {e.peak_mem_gib:.1f} of {ch.capacity_gib:.1f} GiB per GPU; inter-node "
             f"{fmt_count(inter)}B per token"),
        ]
        c = e.cost
        if c.cost_per_hour is not None:
            money = f"  ${c.cost_per_hour:,.2f}/h, ${c.usd_per_million_tokens:,.4f} per million tokens"
            if c.hours_to_tokens is not None:
                money += (f"; {fmt_count(w.tokens)} tokens: {fmt_seconds(c.hours_to_tokens * 3600)}, "
                          f"${c.usd_to_tokens:,.0f}")
            lines.append(money)
        lines.append(f"  binding: {e.binding}")
    if p.reasons:
        lines.append("why:")
        for r in p.reasons:
            lines += textwrap.wrap(r, WIDTH, initial_indent="  - ", subsequent_indent="    ")
    varies = _varying_columns((*v.ranked, *v.pareto))
    if v.runners_up:
        lines += ["runners-up:", _rows_table(v.ranked, varies, color)]
    if v.pareto:
        lines += ["Pareto set (tokens/s, memory headroom, inter-node bytes per token):",
                  _rows_table(v.pareto, varies, color)]
    return fit_lines(lines)


def fit_lines(lines: list[str]) -> list[str]:
    """Lines wrapped to WIDTH columns (continuations indented); a table, already fitted by
    format_table, passes through, and so does the chosen layout: it is the text
    `trainplan estimate --layout` reads back, printed whole on one line."""
    out = []
    for line in lines:
        if "\n" in line or len(line) <= WIDTH or line.startswith("chosen: "):
            out.append(line)
        else:
            indent = " " * (len(line) - len(line.lstrip()) + 2)
            out += textwrap.wrap(line, WIDTH, subsequent_indent=indent)
    return out


# Columns a plan table adds when the plans it lists differ in them (the layout says the rest):
# header -> the row's value. 80 columns leave the layout little room, so only where they vary.
_VARYING = {"nodes": lambda r: r.nodes, "seq": lambda r: r.job.workload.seq_len}


def _varying_columns(rows) -> tuple[str, ...]:
    """The _VARYING columns whose value is not the same for every plan of the report (the chosen
    plan, runners-up and Pareto set together, so both tables show the same columns)."""
    return tuple(h for h, value in _VARYING.items() if len({value(r) for r in rows}) > 1)


def _rows_table(rows, varies: tuple[str, ...], color: bool) -> str:
    """Plans side by side, each layout whole (wrapped, never cut), with the `varies` columns."""
    def cells(r):
        e = r.estimate
        vals = ["-"] * 3 if e is None else [fmt_count(e.tokens_per_s), f"{e.peak_mem_gib:.1f}",
                                            fmt_count(r.traffic_per_token()[0]) + "B"]
        return [r.label, *(_VARYING[h](r) for h in varies), r.layout.short(), *vals]

    return format_table(["plan", *varies, "layout", "tokens/s", "GiB", "net/tok"],
                        [cells(r) for r in rows],
                        row_styles={i: ("green",) for i, r in enumerate(rows) if r.label == "chosen"},
                        color=color)


def _pick(r) -> str:
    return {True: "meets", False: "misses"}.get(r.meets, r.choice if r.choice != "chosen" else "")


def compare_table(result: dict, color: bool = False) -> str:
    """The one terminal rendering of `trainplan compare` output (the command prints it too)."""
    from trainplan.report.records import compare_rows

    rows = compare_rows(result)
    best = min((i for i, r in enumerate(rows) if r.usd_per_million_tokens is not None),
               key=lambda i: rows[i].usd_per_million_tokens, default=None)
    seq, tokens = result.get("seq_len"), result.get("tokens")
    head = f"{result.get('model', 'model')}" + (f", sequence {seq}" if seq else "") + (
        f", {fmt_count(tokens)} tokens" if tokens else "")
    table = format_table(
        ["instance", "pick", "nodes", "max seq", "tok/s", "tok/s/GPU", "$/B tok", "days"],
        [[r.instance.removeprefix("ml."), _pick(r), r.nodes, fmt_count(r.longest_seq_len),
          fmt_count(r.tokens_per_s), fmt_count(r.tokens_per_s_per_gpu),
          "-" if r.usd_per_million_tokens is None else f"{per_billion(r.usd_per_million_tokens):,.0f}",
          "-" if r.hours_to_tokens is None else f"{days(r.hours_to_tokens):,.1f}"] for r in rows],
        row_styles={} if best is None else {best: ("green",)}, color=color)
    lines = [head, table]
    for r in rows:
        for note in (r.note, r.miss and f"misses by {r.miss}"):
            if note:
                lines += textwrap.wrap(f"{r.instance.removeprefix('ml.')}: {note}", WIDTH,
                                       subsequent_indent="    ")
    rule = result.get("rule") or "per instance: the plan the search chose"
    lines += textwrap.wrap(f"nodes and layout {rule}, up to {result.get('max_nodes', '?')} nodes; max seq: "
                           "the mesh with full checkpointing at micro-batch 1. Prices: `trainplan hardware`.", WIDTH)
    if any(r.cloud or r.goodput is not None for r in rows):
        lines += ["", *_where_lines(rows, color)]
    return "\n".join(lines)


def _where_lines(rows, color: bool) -> list[str]:
    """Where each instance is rented: its cloud, price per node-hour and the price's date, the
    goodput of each row's plan; then per instance the price's kind and source and the checkpoint
    storage the goodput saves to."""
    def price(r) -> str:
        return "-" if r.price_usd_per_hour is None else f"{r.price_usd_per_hour:,.2f}"

    out = [format_table(
        ["instance", "pick", "cloud", "$/node-h", "priced", "goodput"],
        [[r.instance.removeprefix("ml."), _pick(r), r.cloud or "-", price(r), r.price_date or "-",
          fmt_pct(r.goodput)] for r in rows], color=color)]
    seen = set()
    for r in rows:
        if r.instance in seen:
            continue
        seen.add(r.instance)
        what = "; ".join(x for x in (r.price_kind, r.price_source,
                                     r.checkpoint_storage and f"checkpoints to {r.checkpoint_storage}") if x)
        if what:
            out += textwrap.wrap(f"{r.instance.removeprefix('ml.')}: {what}", WIDTH, subsequent_indent="    ")
    return out


def validate_text(result: dict, color: bool = False) -> str:
    """The one terminal rendering of `trainplan validate` output (the command prints it, and
    `trainplan report validate.json`): each record's errors, the skipped ones with their reason,
    then the summary per metric and group as the command computed it."""
    def pct(v):
        return "-" if v is None else f"{v * 100:+.1f}%"

    rows, skipped = [], []
    for r in result["records"]:
        if r.get("skipped_reason"):
            skipped.append(f"{r['id']}: {r['skipped_reason']}")
            continue
        p, m, e = r["predicted"], r.get("measured") or {}, r["error"]
        rows.append([r["id"], r.get("gpu"), r.get("precision"), fmt_count(p["tokens_per_s_per_gpu"]),
                     fmt_count(m.get("tokens_per_s_per_gpu")), pct(e["tokens_per_s_per_gpu"]),
                     pct(e["step_time_s"]), pct(e["peak_mem_gib"])])
    # no MFU column: per record its error is the tokens/s error (the records' own convention)
    out = [format_table(["id", "gpu", "precision", "tok/s/GPU", "meas", "tok err", "step err", "mem err"],
                        rows, color=color)]
    for line in skipped:
        out += textwrap.wrap(f"skipped {line}", WIDTH, subsequent_indent="    ")
    s = result["summary"]
    cv = "cross-validated (leave one source out)" if s["cross_validated"] else "in-sample"
    out += [""] + textwrap.wrap(
        f"{s['predicted']} of {s['records']} records predicted ({s['skipped']} skipped, "
        f"{s['with_assumptions']} with assumed values), profile {s['profile']}, errors {cv}:", WIDTH)
    stats = []
    for metric in ("tokens_per_s_per_gpu", "step_time_s", "peak_mem_gib", "mfu"):
        entry = s[metric]
        groups = [("all", entry["all"])]
        # large runs first, under their own name ('gpus>=256'), then the other groupings
        for g in ("by_scale", "by_model", "by_quality", "by_gpu", "by_precision", "by_framework"):
            groups += [(k if g == "by_scale" else f"{g[3:]}={k}", v) for k, v in entry.get(g, {}).items()]
        stats += [[metric, name, st["count"], f"{st['median_abs']:.1%}", f"{st['p90_abs']:.1%}",
                   f"{st['max_abs']:.1%}", f"{st['mean_signed']:+.1%}"] for name, st in groups if st["count"]]
    out.append(format_table(["metric", "group", "n", "median", "p90", "max", "mean"], stats, color=color))
    if result.get("out_of_sample"):
        from trainplan.report import oos

        o = result["out_of_sample"]
        out += [""] + [w for line in oos.header(o) for w in textwrap.wrap(line, WIDTH, subsequent_indent="  ")]
        out.append(format_table(oos.ERROR_HEAD, oos.split_rows(o), color=color))
        if rows := oos.coverage_rows(o):
            out.append(format_table(oos.COVERAGE_HEAD, rows, color=color))
    return "\n".join(out)


def print_summary(kind: str, data: dict, dataset: dict | None = None, stream=None) -> None:
    stream = sys.stdout if stream is None else stream
    color = use_color(stream)
    if kind == "plan":
        text = "\n".join(plan_lines(data, color))
    elif kind == "compare":
        text = compare_table(data, color)
    else:
        text = validate_text(data, color)
    print(text, file=stream)


def as_json(kind: str, data, dataset: dict | None = None) -> dict:
    """What the report shows, as JSON (`trainplan report FILE --json`): for a plan, each plan's
    numbers as plan.json holds them; for compare and validate, the rows and points drawn."""
    from dataclasses import asdict

    if kind == "plan":
        from trainplan.report.views import plan_view

        v = plan_view(data)
        return {"kind": "plan", "title": v.title, "reasons": list(v.plan.reasons),
                "chosen": v.chosen.summary(), "runners_up": [r.summary() for r in v.runners_up],
                "pareto": [r.summary() for r in v.pareto]}
    if kind == "compare":
        from trainplan.report.records import compare_rows

        return {"kind": "compare", "rows": [asdict(r) for r in compare_rows(data)]}
    from trainplan.report.records import validate_points

    pts, skipped = validate_points(data, dataset)
    return {"kind": "validate", "points": [asdict(p) for p in pts],
            "not_compared": [{"id": i, "reason": r} for i, r in skipped]}
