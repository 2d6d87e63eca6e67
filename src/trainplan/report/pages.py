"""The three reports: plan, compare, validate. Each `*_html(result) -> str` is pure; each
`write_*_report(path, result)` writes the page atomically (complete or absent).

The results are the dicts the commands print with `--json` (shapes in `report.inputs`,
`report.plots_compare`, `report.plots_validate`).
"""

from __future__ import annotations

from pathlib import Path

from trainplan.report import html as H
from trainplan.report.terminal import fmt_count, fmt_pct, fmt_seconds


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


def plan_html(result: dict) -> str:
    from trainplan.report.inputs import plan_view
    from trainplan.report.plots import plan_plots

    v = plan_view(result)
    ch = v.chosen
    plan = v.plan
    wl = plan.get("workload") or {}
    cap = f" of {v.capacity_gib:.0f} GiB" if v.capacity_gib else ""
    rows = [
        ("layout", ch.layout_short),
        ("sequence length x global batch", f"{wl.get('seq_len', '?')} x {wl.get('global_batch', '?')}"),
        ("throughput (cluster)", f"{fmt_count(ch.tokens_per_s)} tokens/s"),
        ("throughput per GPU", f"{fmt_count(ch.tokens_per_s_per_gpu)} tokens/s"),
        ("MFU", fmt_pct(ch.mfu)),
        ("step time", fmt_seconds(ch.step_time_s)),
        ("peak memory per GPU", f"{ch.peak_mem_gib:.1f} GiB{cap}"),
        ("dollars per million tokens", _money(ch.usd_per_million_tokens, 4)),
    ]
    extra = ch.extra
    if extra.get("cost_per_hour") is not None:
        rows.append(("cluster cost", f"{_money(extra['cost_per_hour'])} per hour"))
    if extra.get("hours_to_tokens") is not None:
        rows.append((f"time to {fmt_count(wl.get('tokens'))} tokens",
                     fmt_seconds(float(extra["hours_to_tokens"]) * 3600)))
    if extra.get("usd_to_tokens") is not None:
        rows.append((f"cost of {fmt_count(wl.get('tokens'))} tokens", _money(extra["usd_to_tokens"], 0)))
    if extra.get("binding"):
        rows.append(("binding constraint", extra["binding"]))
    sections = ["<h2>Chosen plan</h2>", H.kv_table(rows)]
    if v.reasons:
        sections += ["<h2>Why</h2>", H.bullet_list(v.reasons)]
    if v.runners_up:
        cands = [ch, *v.runners_up]
        def inter(c) -> str:
            b = c.inter_node_bytes_per_token
            return "-" if b is None else f"{b / 1e6:.3g}"

        sections += ["<h2>Runners-up</h2>", H.table(
            ["plan", "layout", "nodes", "tokens/s", "MFU", "step", "peak GiB",
             "inter-node MB per token"],
            [[c.label, c.layout_short, c.extra.get("nodes", plan.get("cluster", {}).get("nodes", "-")),
              fmt_count(c.tokens_per_s), fmt_pct(c.mfu), fmt_seconds(c.step_time_s),
              f"{c.peak_mem_gib:.1f}", inter(c)] for c in cands],
            numeric=[False, False, True, True, True, True, True, True])]
    return H.page(f"trainplan plan: {v.title}",
                  f"{plan.get('created_by', 'trainplan')}; schema {plan.get('schema', '?')}",
                  sections, plan_plots(v))


def write_plan_report(path: str | Path, plan_result: dict) -> Path:
    """HTML report of `trainplan plan --json` output (or a bare plan.json) at `path`."""
    return _write(path, plan_html(plan_result))


# ---------------------------------------------------------------------------------------------
# compare


def compare_html(result: dict) -> str:
    from trainplan.report.plots_compare import compare_plots
    from trainplan.report.records import compare_rows

    rows = compare_rows(result)
    table_rows = [[r.instance, r.gpu, "-" if r.nodes is None else r.nodes, r.layout or r.note,
                   "-" if r.micro_batch is None else r.micro_batch,
                   "-" if r.longest_seq_len is None else f"{r.longest_seq_len:,}",
                   fmt_count(r.tokens_per_s), fmt_pct(r.mfu), _money(r.usd_per_billion_tokens, 0),
                   "-" if r.days is None else f"{r.days:,.1f}"] for r in rows]
    sections = ["<h2>Instance types</h2>", H.table(
        ["instance", "GPU", "nodes", "best layout", "micro-batch", "longest sequence", "tokens/s",
         "MFU", "$ per billion tokens", "days to budget"], table_rows,
        numeric=[False, False, True, False, True, True, True, True, True, True])]
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
