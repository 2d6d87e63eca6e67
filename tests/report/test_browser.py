"""Each HTML report opened in headless Chromium: plots drawn, no console errors, no network.

Chromium comes from Debian's `chromium` package; CI installs it with
tests/report/ensure_chromium.sh before the tests. Without it these tests skip and say so.
"""

from __future__ import annotations

import re

import pytest
import report_samples as S
from browser import find_chromium, ink, png_size, render, screenshot

from trainplan.report import write_compare_report, write_plan_report, write_validate_report

CHROMIUM = find_chromium()
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None,
                       reason="chromium is not installed; run tests/report/ensure_chromium.sh (CI does)"),
    pytest.mark.slow,  # a browser start is a few seconds
]

REPORTS = {
    "plan": (write_plan_report, S.plan, 5),  # memory, Pareto, step time, comm ledger, scaling
    "compare": (write_compare_report, S.compare_result, 1),
    "compare-clouds": (write_compare_report, S.compare_clouds_result, 1),  # issue #26: priced and unpriced rows
    "validate": (write_validate_report, S.validate_result, 1),
}


@pytest.mark.parametrize("kind", list(REPORTS))
def test_report_renders_every_plot_with_no_console_message(kind, tmp_path):
    write, sample, expected = REPORTS[kind]
    path = write(tmp_path / f"{kind}.html", sample())
    page = render(CHROMIUM, path)
    assert page.console == []
    assert page.attr("data-plots-expected") == str(expected)
    assert page.attr("data-plots-rendered") == str(expected)
    assert '<div id="report-errors"></div>' in page.dom
    # plotly drew an SVG with traces into every plot div
    assert len(re.findall(r'<div id="plot-[a-z_]+"', page.dom)) == expected
    assert page.dom.count('class="main-svg"') >= expected
    assert len(re.findall(r'class="[^"]*\btrace\b', page.dom)) >= expected

    height = int(page.attr("data-page-height") or 2000)
    png = tmp_path / f"{kind}.png"
    screenshot(CHROMIUM, path, png, height)
    assert png_size(png) == (1280, height)
    pytest.importorskip("PIL", reason="pillow (torch extra) reads the screenshot pixels")
    inked, colours = ink(png)
    assert inked > 0.03, f"{kind}: the screenshot is nearly blank ({inked:.1%} ink)"
    assert colours > 30, f"{kind}: only {colours} colours; plots did not draw"


def test_a_script_error_is_caught(tmp_path):
    """The checks above can fail: a page with a broken script shows it in the console and the box."""
    path = tmp_path / "broken.html"
    write_compare_report(path, S.compare_result())
    path.write_text(path.read_text().replace("</body>", "<script>notDefined()</script></body>"))
    page = render(CHROMIUM, path)
    assert any("notDefined" in m for m in page.console)
    assert "Error: Uncaught ReferenceError: notDefined is not defined" in page.dom


def test_a_page_without_plotly_reports_no_plots_drawn(tmp_path):
    path = tmp_path / "noplotly.html"
    write_compare_report(path, S.compare_result())
    text = path.read_text()
    start = text.index('<script type="text/javascript">')
    end = text.index("</script>", start)
    path.write_text(text[:start] + text[end + len("</script>"):])
    page = render(CHROMIUM, path)
    assert page.attr("data-plots-expected") == "1"
    assert page.attr("data-plots-rendered") == "0"
    assert any("Plotly is not defined" in m for m in page.console)


def test_a_plan_with_a_one_point_pareto_set_draws_no_pareto_plot(tmp_path):
    """`report plan.json --html` of a plan whose Pareto set is the chosen plan alone: a table and
    the reason instead of a scatter of one point on an axis stretched around a single value."""
    path = write_plan_report(tmp_path / "one.html", S.plan(runners_up=False, pareto=(0,)))
    page = render(CHROMIUM, path)
    assert page.console == []
    assert page.attr("data-plots-expected") == page.attr("data-plots-rendered") == "4"
    assert 'id="plot-pareto"' not in page.dom
    assert "No Pareto plot: the Pareto set holds one plan" in page.dom
    png = tmp_path / "one.png"
    screenshot(CHROMIUM, path, png, int(page.attr("data-page-height") or 2000))
    assert png_size(png)[0] == 1280


@pytest.mark.parametrize("width", [1280, 1400, 1920])
def test_the_toolbar_covers_no_legend_entry(tmp_path, width):
    path = write_plan_report(tmp_path / "plan.html", S.plan())
    page = render(CHROMIUM, path, width_px=width)
    assert page.attr("data-plots-rendered") == "5"
    assert page.attr("data-legend-under-toolbar") == "0"
