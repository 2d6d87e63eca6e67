"""The reports on the real commands' --json output, so that a change of shape in plan, compare or
validate shows up here (the hand-built samples in report_samples.py cannot catch that)."""

from __future__ import annotations

import json

import pytest

from trainplan.report.pages import compare_html, plan_html, validate_html
from trainplan.report.records import compare_rows, validate_points
from trainplan.report.summary import compare_table, plan_lines, validate_text
from trainplan.report.views import as_plan, plan_view


def _json(cli, *argv) -> dict:
    code, out, err = cli(*argv, "--json")
    assert code == 0, err
    return json.loads(out)


def test_plan_output(cli):
    result = _json(cli, "plan", "--model", "llama-3.1-405b", "--instance", "ml.p6-b200.48xlarge",
                   "--max-nodes", "8")
    v = plan_view(as_plan(result))
    assert len(v.runners_up) == len(result["runners_up"]) and len(v.pareto) == len(result["pareto"])
    for r, flat in zip(v.ranked, [result["chosen"], *result["runners_up"]]):
        e = r.estimate  # every bar has its breakdown, adding up to its total
        assert sum(sum(g.values()) for g in r.memory_gib().values()) == pytest.approx(e.peak_mem_gib)
        assert sum(r.time_s().values()) == pytest.approx(e.step_time_s)
        # the search's flat summary and the plan's estimates are the same numbers
        assert e.tokens_per_s == pytest.approx(flat["tokens_per_s"], rel=1e-12)
        assert r.traffic_per_token()[0] == pytest.approx(flat["inter_node_bytes_per_token"], rel=1e-12)
        assert e.cost.usd_per_million_tokens == pytest.approx(flat["usd_per_million_tokens"], rel=1e-12)
    assert v.chosen.estimate.comm
    page = plan_html(result)
    # the scaling plot needs the chosen family at two node counts or more (search/scaling.py)
    assert page.count('class="plot-box"') == 4 + (len(v.scaling) >= 2)
    assert len(v.scaling) == len(result["plan"].get("scaling", []))
    assert max(len(line) for line in "\n".join(plan_lines(result)).splitlines()) <= 80


def test_compare_output(cli):
    result = _json(cli, "compare", "--model", "llama-3.1-8b", "--instances",
                   "ml.p6-b200.48xlarge,ml.p5.48xlarge", "--tokens", "100B", "--max-nodes", "8")
    rows = compare_rows(result)
    assert [r.gpu for r in rows if r.choice == "cheapest"] == ["b200-180gb", "h100-sxm-80gb"]
    assert all(r.tokens_per_s and r.usd_per_million_tokens and r.hours_to_tokens for r in rows)
    assert max(len(line) for line in compare_table(result).splitlines()) <= 80
    assert compare_html(result).count('class="plot-box"') == 1


def test_validate_output(cli):
    result = _json(cli, "validate")  # the README's command: the packaged dataset, no ../shared needed
    pts, skipped = validate_points(result)
    n = len(result["records"])
    assert len({p.record for p in pts}) + len(skipped) == n  # every record drawn or listed
    for p in pts:  # the error drawn is the one the command reports
        err = next(r for r in result["records"] if r["id"] == p.record)["error"][p.metric]
        assert p.error == pytest.approx(err, rel=1e-6, abs=1e-9)
    assert max(len(line) for line in validate_text(result).splitlines()) <= 80
    assert validate_html(result).count('class="plot-box"') == 1
