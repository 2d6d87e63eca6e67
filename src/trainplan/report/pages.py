"""The three reports: plan, compare, validate. Each `*_html(result) -> str` is pure; each
`write_*_report(path, result)` writes the page atomically (complete or absent).

A plan page draws a typed `trainplan.plan.Plan` (report.views); compare and validate pages draw
the dicts those commands print with `--json` (report.records).
"""

from __future__ import annotations

from pathlib import Path

from trainplan.report import html as H
from trainplan.report.terminal import days, fmt_count, fmt_pct, fmt_seconds, per_billion


def _write(path: str | Path, text: str) -> Path:
    import os

    from trainplan.fileio import write_atomic

    write_atomic(path, text)
    # write_atomic's temporary file is private (0600); a report is for sharing: honour the umask.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)
    return Path(path)


def _money(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"${x:,.{digits}f}"


# ---------------------------------------------------------------------------------------------
# plan


def plan_html(plan) -> str:
    """The plan page of a typed Plan (or a plan.json dict, or `trainplan plan --json` output):
    exactly the numbers plan.json holds, never a new estimate."""
    from trainplan.report.plots import pareto_degenerate, plan_plots
    from trainplan.report.views import as_plan, plan_view

    v = plan_view(as_plan(plan))
    ch, p = v.chosen, v.plan
    w = p.job.workload
    e = ch.estimate
    rows = [("layout", ch.layout.short()),
            ("sequence length x global batch", f"{w.seq_len} x {w.global_batch}")]
    if e is not None:
        c = e.cost
        rows += [
            ("throughput (cluster)", f"{fmt_count(e.tokens_per_s)} tokens/s"),
            ("throughput per GPU", f"{fmt_count(e.tokens_per_s_per_gpu)} tokens/s"),
            ("MFU (bf16 dense peak)", fmt_pct(e.mfu)),
            ("step time", fmt_seconds(e.step_time_s)),
            ("peak memory per GPU", f"{e.peak_mem_gib:.1f} GiB of {ch.capacity_gib:.0f} GiB"),
            ("dollars per million tokens", _money(c.usd_per_million_tokens, 4)),
        ]
        if c.cost_per_hour is not None:
            rows.append(("cluster cost", f"{_money(c.cost_per_hour)} per hour"))
        if c.hours_to_tokens is not None:
            rows.append((f"time to {fmt_count(w.tokens)} tokens", fmt_seconds(c.hours_to_tokens * 3600)))
        if c.usd_to_tokens is not None:
            rows.append((f"cost of {fmt_count(w.tokens)} tokens", _money(c.usd_to_tokens, 0)))
        rows.append(("binding constraint", e.binding))
    sections = ["<h2>Chosen plan</h2>", H.kv_table(rows)]
    if p.reasons:
        sections += ["<h2>Why</h2>", H.bullet_list(p.reasons)]
    if v.runners_up:
        sections += ["<h2>Runners-up</h2>", _plans_table(v.ranked)]
    why = pareto_degenerate(v)
    if why:
        # a scatter of one point (or of points on one line) draws an axis stretched around a
        # single value: a table says the same without pretending there is a trade-off
        sections += ["<h2>Pareto set</h2>", f"<p>No Pareto plot: {H.esc(why)}.</p>"]
        if v.pareto:
            sections.append(_plans_table(v.pareto))
    from trainplan.plan import SCHEMA

    return H.page(f"trainplan plan: {v.title}", f"{p.created_by}; schema {SCHEMA}",
                  sections, plan_plots(v))


def _plans_table(rows) -> str:
    def inter(r) -> str:
        t = r.traffic_per_token()
        return "-" if t is None else f"{t[0] / 1e6:.3g}"

    def num(r, f):
        return "-" if r.estimate is None else f(r.estimate)

    return H.table(
        ["plan", "layout", "nodes", "tokens/s", "MFU (bf16 peak)", "step", "peak GiB", "inter-node MB per token"],
        [[r.label, r.layout.short(), r.nodes, num(r, lambda e: fmt_count(e.tokens_per_s)),
          num(r, lambda e: fmt_pct(e.mfu)), num(r, lambda e: fmt_seconds(e.step_time_s)),
          num(r, lambda e: f"{e.peak_mem_gib:.1f}"), inter(r)] for r in rows],
        numeric=[False, False, True, True, True, True, True, True])


def write_plan_report(path: str | Path, plan) -> Path:
    """HTML report of a Plan, a plan.json dict or `trainplan plan --json` output at `path`."""
    return _write(path, plan_html(plan))


# ---------------------------------------------------------------------------------------------
# compare


def compare_html(result: dict) -> str:
    from trainplan.report.plots_compare import compare_plots
    from trainplan.report.records import compare_rows

    rows = compare_rows(result)
    table_rows = [[r.label, r.cloud or "-", r.gpu, "-" if r.nodes is None else r.nodes, r.layout or r.note,
                   "-" if r.micro_batch is None else r.micro_batch,
                   "-" if r.longest_seq_len is None else f"{r.longest_seq_len:,}",
                   fmt_count(r.tokens_per_s), fmt_pct(r.mfu), fmt_pct(r.goodput),
                   _money(per_billion(r.usd_per_million_tokens), 0),
                   "-" if r.hours_to_tokens is None else f"{days(r.hours_to_tokens):,.1f}"] for r in rows]
    sections = ["<h2>Instance types</h2>", H.table(
        ["instance", "cloud", "GPU", "nodes", "best layout", "micro-batch", "longest sequence", "tokens/s",
         "MFU (bf16 peak)", "goodput", "$ per billion tokens", "days to budget"], table_rows,
        numeric=[False, False, False, True, False, True, True, True, True, True, True, True])]
    prices = {r.instance: r for r in rows}
    sections += ["<h2>Prices and where they come from</h2>", H.table(
        ["instance", "cloud", "$ per node-hour", "price", "read on", "source", "checkpoints saved to"],
        [[name, r.cloud or "-", _money(r.price_usd_per_hour), r.price_kind or "-", r.price_date or "-",
          r.price_source or "-", r.checkpoint_storage or "-"] for name, r in prices.items()],
        numeric=[False, False, True, False, False, False, False])]
    model = result.get("model") or "model"
    tokens = result.get("tokens")
    sub = f"token budget {fmt_count(tokens)}" if tokens else "no token budget given"
    return H.page(f"trainplan compare: {model}", sub, sections, compare_plots(result))


def write_compare_report(path: str | Path, compare_result: dict) -> Path:
    """HTML report of `trainplan compare --json` output at `path`."""
    return _write(path, compare_html(compare_result))


# ---------------------------------------------------------------------------------------------
# validate


def validate_html(result: dict, dataset: dict | None = None) -> str:
    from trainplan.report.plots_validate import validate_plots
    from trainplan.report.records import METRICS, quantile, validate_points

    pts, skipped = validate_points(result, dataset)
    summary_rows = []
    for m in METRICS:
        errs = sorted(abs(p.error) for p in pts if p.metric == m.key)
        if errs:
            summary_rows.append([m.label, len(errs), fmt_pct(quantile(errs, 0.5)), fmt_pct(quantile(errs, 0.9)),
                                 fmt_pct(errs[-1])])
    sections = ["<h2>Error per metric</h2>", H.table(
        ["metric", "records", "median |error|", "p90 |error|", "max |error|"], summary_rows,
        numeric=[False, True, True, True, True]),
        "<p>error = predicted / measured - 1, over the records that have both.</p>",
        "<h2>Median |error| by GPU</h2>", _by_gpu_table(pts, METRICS)]
    if result.get("out_of_sample"):
        from trainplan.report import oos

        o = result["out_of_sample"]
        sections += ["<h2>Out of sample: tokens/s error per split</h2>", *(f"<p>{H.esc(x)}</p>" for x in oos.header(o)),
                     H.table(oos.ERROR_HEAD, oos.split_rows(o), numeric=[False, False] + [True] * 5)]
        if rows := oos.coverage_rows(o):
            sections += ["<h2>Band coverage</h2>", H.table(oos.COVERAGE_HEAD, rows, numeric=[False, True, True, True])]
    if skipped:
        sections += [f"<h2>Records not compared ({len(skipped)})</h2>",
                     H.table(["id", "reason"], skipped)]
    n = len({p.record for p in pts})
    return H.page("trainplan validate: predicted vs measured",
                  f"{n} records compared with their measurements, {len(skipped)} not (listed below)",
                  sections,
                  validate_plots(pts))


def _by_gpu_table(pts, metrics) -> str:
    from trainplan.report.records import quantile

    rows = []
    for gpu in sorted({p.gpu for p in pts}):
        row: list[object] = [gpu, len({p.record for p in pts if p.gpu == gpu})]
        for m in metrics:
            errs = [abs(p.error) for p in pts if p.gpu == gpu and p.metric == m.key]
            row.append(f"{fmt_pct(quantile(errs, 0.5))} (n={len(errs)})" if errs else "-")
        rows.append(row)
    return H.table(["GPU", "records", *(m.label for m in metrics)], rows,
                   numeric=[False] + [True] * (len(metrics) + 1))


def write_validate_report(path: str | Path, validate_result: dict, dataset: dict | None = None) -> Path:
    """HTML report of `trainplan validate --json` output at `path`. `dataset` (the
    trainplan-validation/1 file, optional) fills in the GPU and measured values by record id when
    the result does not carry them."""
    return _write(path, validate_html(validate_result, dataset))
