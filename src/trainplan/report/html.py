"""One self-contained HTML page per report: summary tables, then plots with captions.

Self-contained means it opens with no network: plotly.js is inlined once in <head> (the same
bundle `include_plotlyjs=True` would inline, but once per page instead of once per figure), no
web fonts, no external stylesheets. Two small inline scripts make a broken page visible instead of
silently blank: JavaScript errors are collected and shown in a red box at the top, and after load
the page records how many plots drew (`<body data-plots-expected=N data-plots-rendered=M>`), its
height in pixels (`data-page-height`) and how many legend entries plotly's toolbar covers
(`data-legend-under-toolbar`), which is what the browser test in tests/report reads.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import UTC, datetime

from trainplan import __version__

_CSS = """
body{font-family:system-ui,sans-serif;margin:24px auto;max-width:1180px;padding:0 16px;color:#222}
h1{font-size:1.5em;margin-bottom:.2em} h2{font-size:1.2em;margin-top:1.6em}
.sub{color:#555;margin-top:0} table{border-collapse:collapse;margin:.5em 0;font-size:.92em}
td,th{padding:3px 10px;border-bottom:1px solid #ddd;text-align:left;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
figure{margin:1.2em 0 2em 0;border:1px solid #e4e4e4;border-radius:6px;padding:8px}
figcaption{color:#333;font-size:.93em;line-height:1.4;margin:6px 8px}
#report-errors{display:none;background:#fde8e8;border:1px solid #c33;padding:8px;color:#900}
footer{color:#777;font-size:.85em;margin-top:2em}
"""

# Runs before plotly.js so that an error while loading it is caught too.
_ERRORS_JS = """
window.__reportErrors = [];
window.addEventListener('error', function (e) {
  window.__reportErrors.push(String(e.message || e.type));
  var box = document.getElementById('report-errors');
  if (box) { box.style.display = 'block'; box.textContent = 'Error: ' + window.__reportErrors.join(' | '); }
});
"""

# After load: count the plots whose SVG holds at least one drawn trace.
_CHECK_JS = """
window.addEventListener('load', function () {
  var boxes = document.querySelectorAll('.plot-box');
  var drawn = 0;
  boxes.forEach(function (b) {
    var svg = b.querySelector('svg.main-svg');
    if (svg && b.querySelectorAll('g.trace, g.point, path.point').length > 0) { drawn += 1; }
  });
  document.body.setAttribute('data-plots-expected', String(boxes.length));
  document.body.setAttribute('data-plots-rendered', String(drawn));
  document.body.setAttribute('data-page-height', String(document.documentElement.scrollHeight));
  // legend entries whose box meets the toolbar's (the toolbar shows on hover, over the plot's top)
  var covered = 0;
  boxes.forEach(function (b) {
    var bar = b.querySelector('.modebar');
    if (!bar) { return; }
    var m = bar.getBoundingClientRect();
    b.querySelectorAll('.legend .traces').forEach(function (t) {
      var r = t.getBoundingClientRect();
      if (r.left < m.right && m.left < r.right && r.top < m.bottom && m.top < r.bottom) { covered += 1; }
    });
  });
  document.body.setAttribute('data-legend-under-toolbar', String(covered));
  var box = document.getElementById('report-errors');
  if (window.__reportErrors.length && box) {
    box.style.display = 'block'; box.textContent = 'Error: ' + window.__reportErrors.join(' | ');
  }
});
"""

_CONFIG = {"displaylogo": False, "responsive": True}


def esc(x) -> str:
    return html.escape(str(x), quote=True)


def kv_table(rows: Sequence[tuple[str, object]]) -> str:
    """A two-column table of label -> value (values are escaped)."""
    body = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in rows)
    return f"<table>{body}</table>"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], numeric: Sequence[bool] = ()) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for r in rows:
        cells = "".join(
            f'<td class="n">{esc(c)}</td>' if (i < len(numeric) and numeric[i]) else f"<td>{esc(c)}</td>"
            for i, c in enumerate(r))
        body.append(f"<tr>{cells}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def bullet_list(items: Sequence[str]) -> str:
    return "<ul>" + "".join(f"<li>{esc(i)}</li>" for i in items) + "</ul>"


def figure_html(plot) -> str:
    """A `plots.Plot` as <figure>: heading, the plotly div (no script bundle), the caption."""
    div = plot.figure.to_html(full_html=False, include_plotlyjs=False, div_id=f"plot-{plot.key}",
                              config=_CONFIG)
    return (f'<figure id="fig-{esc(plot.key)}"><h2>{esc(plot.title)}</h2>'
            f'<div class="plot-box">{div}</div><figcaption>{esc(plot.caption)}</figcaption></figure>')


def page(title: str, subtitle: str, sections: Sequence[str], plots: Sequence) -> str:
    """The whole document. `sections` are HTML fragments placed before the plots."""
    from plotly.offline import get_plotlyjs

    made = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return "".join([
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
        f"<title>{esc(title)}</title><style>{_CSS}</style>",
        f"<script>{_ERRORS_JS}</script>",
        f"<script type=\"text/javascript\">{get_plotlyjs()}</script></head>\n<body>",
        f"<h1>{esc(title)}</h1><p class=\"sub\">{esc(subtitle)}</p>",
        "<div id=\"report-errors\"></div>",
        *sections,
        *(figure_html(p) for p in plots),
        (f"<footer>trainplan {esc(__version__)}, {made}. Numbers are predictions of the trainplan "
         "model unless marked measured.</footer>"),
        f"<script>{_CHECK_JS}</script></body></html>\n",
    ])
