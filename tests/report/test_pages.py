"""HTML pages: self-contained, escaped, written atomically, one per result kind."""

from __future__ import annotations

import os
import re

import pytest
import report_samples as S

from trainplan.errors import TrainplanError
from trainplan.report import write_compare_report, write_plan_report, write_validate_report
from trainplan.report.pages import compare_html, plan_html, validate_html


@pytest.fixture(scope="module")
def plan_page() -> str:
    return plan_html(S.plan_result())


def test_self_contained_no_external_resources(plan_page):
    assert not re.search(r"<script[^>]+src=", plan_page)
    assert not re.search(r"<link\b", plan_page)
    assert not re.search(r"""<(img|iframe)[^>]+src=["']https?:""", plan_page)
    assert "@import" not in plan_page


def test_plotly_js_inlined_exactly_once_and_every_plot_placed(plan_page):
    from plotly.offline import get_plotlyjs

    bundle = get_plotlyjs()
    assert plan_page.count(bundle[:200]) == 1
    assert len(re.findall(r'class="plot-box"', plan_page)) == 5
    for key in ("memory", "pareto", "step_time", "comm", "scaling"):
        assert f'id="plot-{key}"' in plan_page
    assert plan_page.count("<figcaption>") == 5


def test_plan_page_shows_the_summary_reasons_and_runners_up(plan_page):
    assert "<title>trainplan plan: llama-3.1-70b on 2 x ml.p6-b200.48xlarge</title>" in plan_page
    assert "HSDP (2 x 8): FSDP traffic stays on NVLink" in plan_page
    assert "<h2>Runners-up</h2>" in plan_page and "bf16 ac=full mb=2 ga=4 dp=1x16(fsdp)" in plan_page
    assert "No Pareto plot" not in plan_page


def test_a_degenerate_pareto_set_is_a_table_that_says_why():
    page = plan_html(S.plan(runners_up=False, pareto=(0,)))
    assert 'id="plot-pareto"' not in page and page.count('class="plot-box"') == 4
    assert ("<h2>Pareto set</h2><p>No Pareto plot: the Pareto set holds one plan: no other plan is "
            "better on throughput, memory headroom or inter-node traffic") in page
    assert "<td>chosen</td><td>fp8_rowwise ac=full mb=1 ga=8 dp=2x8(fsdp)</td>" in page
    assert "runner" not in page.lower()  # nothing names runners-up the plan does not hold


def test_text_from_the_input_is_escaped():
    from dataclasses import replace

    page = plan_html(replace(S.plan(), reasons=("<script>alert(1)</script> & more",)))
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in page


def test_compare_and_validate_pages():
    c = compare_html(S.compare_result())
    assert "<title>trainplan compare: llama-3.1-70b</title>" in c
    assert '<td class="n">$3,421</td><td class="n">625.6</td>' in c  # per billion tokens and days, converted to print
    v = validate_html(S.validate_result())
    assert "5 records compared with their measurements, 1 not (listed below)" in v
    assert "<td>M009</td><td>global batch not published</td>" in v


def test_writers_write_complete_readable_files(tmp_path):
    old = os.umask(0o022)
    try:
        for write, sample, name in ((write_plan_report, S.plan_result, "p.html"),
                                    (write_compare_report, S.compare_result, "c.html"),
                                    (write_validate_report, S.validate_result, "v.html")):
            path = write(tmp_path / "out" / name, sample())
            text = path.read_text()
            assert text.startswith("<!DOCTYPE html>") and text.endswith("</html>\n")
            assert path.stat().st_mode & 0o777 == 0o644
    finally:
        os.umask(old)


def test_bad_input_leaves_no_file(tmp_path):
    path = tmp_path / "plan.html"
    with pytest.raises(TrainplanError, match="no plan found"):
        write_plan_report(path, {"nothing": True})
    assert list(tmp_path.iterdir()) == []


def test_compare_page_across_clouds_names_each_price_with_its_date_and_source():
    # report_samples.compare_clouds_result: one priced AWS row, a GCP and an Azure row without a price
    c = compare_html(S.compare_clouds_result())
    assert "Prices and where they come from" in c
    for text in ("aws", "gcp", "azure", "2026-01-21", "a price table", "quote only", "azure-managed-lustre-500",
                 "$113.93", "99.3%"):
        assert text in c, text
