"""Terminal output: tables that fit 80 columns, colour only on a terminal, number formatting.

Pure standard library, no third-party import: the planner commands (`plan`, `compare`, `fit`,
`estimate`, `validate`) print through these helpers and must start in milliseconds.

Colour follows the conventions scripts rely on: none when the stream is not a terminal (pipes,
files, CI logs), none when `NO_COLOR` is set to anything non-empty (https://no-color.org), none
on `TERM=dumb`; `FORCE_COLOR` (non-empty) turns it on for terminals that do not say they are one.
"""

from __future__ import annotations

import math
import os
import sys
import textwrap
from collections.abc import Sequence

WIDTH = 80  # the width every table fits: the smallest terminal people still use
_CONTINUED = "  "  # indent of a wrapped cell's continuation lines, so they read as one cell

# SGR codes (ECMA-48). Only a few, with meanings: good/bad/notice/emphasis/quiet.
_SGR = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "blue": "34",
        "cyan": "36"}


def use_color(stream=None) -> bool:
    """True when `stream` (default stdout) is a terminal that should get colour."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    stream = sys.stdout if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and os.environ.get("TERM") != "dumb"


def paint(text: str, *styles: str, color: bool) -> str:
    """`text` wrapped in SGR codes for `styles` ("bold", "green", ...) when `color` is true."""
    if not color or not styles:
        return text
    codes = ";".join(_SGR[s] for s in styles)
    return f"\x1b[{codes}m{text}\x1b[0m"


# ---------------------------------------------------------------------------------------------
# Numbers as people read them. Inputs are SI (bytes, seconds, FLOP/s); outputs carry the unit.


def fmt_gib(nbytes: float | None, digits: int = 1) -> str:
    return "-" if nbytes is None else f"{nbytes / 1024**3:.{digits}f} GiB"


def fmt_count(x: float | None, digits: int = 3) -> str:
    """12345678 -> '12.3M': k/M/B/T with `digits` significant figures."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.{digits}g}{suffix}"
    return f"{x:.{digits}g}"


def fmt_seconds(s: float | None) -> str:
    """A duration in the unit that keeps it short: 850 ms, 12.3 s, 4.2 h, 9.8 days."""
    if s is None:
        return "-"
    if s < 1:
        return f"{s * 1e3:.0f} ms" if s >= 1e-3 else f"{s * 1e6:.0f} us"
    for scale, unit in ((86400, "days"), (3600, "h"), (60, "min")):
        if s >= 2 * scale:
            return f"{s / scale:.1f} {unit}"
    return f"{s:.1f} s"


def fmt_pct(x: float | None, digits: int = 1, signed: bool = False) -> str:
    """0.123 -> '12.3%'."""
    if x is None:
        return "-"
    return f"{x * 100:+.{digits}f}%" if signed else f"{x * 100:.{digits}f}%"


def per_billion(usd_per_million_tokens: float | None) -> float | None:
    """Display unit of cost per token: costs/cost.py keeps dollars per million tokens."""
    return None if usd_per_million_tokens is None else usd_per_million_tokens * 1e3


def days(hours: float | None) -> float | None:
    """Display unit of a training run's length: costs/cost.py keeps hours."""
    return None if hours is None else hours / 24


# ---------------------------------------------------------------------------------------------
# Tables


def _is_number(text: str) -> bool:
    t = text.strip().rstrip("%").split(" ")[0].lstrip("+-$").replace(",", "")
    t = t.rstrip("kMBT")
    try:
        float(t)
    except ValueError:
        return False
    return True


def _wrap(text: str, width: int) -> list[str]:
    """`text` in lines of at most `width` characters, broken at spaces (a word longer than a line
    is split, never dropped), continuation lines indented: nothing of the text is lost."""
    if len(text) <= width:
        return [text]
    return textwrap.wrap(text, width, subsequent_indent=_CONTINUED[: max(width - 1, 0)],
                         break_on_hyphens=False) or [""]


def _min_width(text: str, floor: int) -> int:
    """The narrowest a text column may wrap to without splitting a word of `text` (the words of a
    layout, `dp=1x8(fsdp)`, are what a person reads), and never below `floor`."""
    words = text.split()
    if len(words) <= 1:
        return max(min(len(text), floor), 1)
    return max(floor, len(words[0]), *(len(_CONTINUED) + len(w) for w in words[1:]))


def format_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[object]],
    *,
    width: int = WIDTH,
    align: str | None = None,
    row_styles: dict[int, Sequence[str]] | None = None,
    color: bool = False,
    gap: int = 2,
) -> str:
    """Rows under headers, every line at most `width` characters, nothing cut.

    `align` is one character per column, "l" or "r"; by default a column whose cells all read as
    numbers is right-aligned. When the natural widths do not fit, the widest text column is
    narrowed and its cells wrap over several lines (at spaces; continuation lines indented) until
    they do; number columns are never narrowed. A cell is never cut: two layouts that differ
    only at their end must not read the same. If even wrapping cannot fit, each row is printed as
    `header: value` lines. `row_styles` maps a row index to styles for `paint` (applied after
    fitting, so colour codes never count towards the width).
    """
    cells = [[("-" if c is None else str(c)) for c in r] for r in rows]
    n = len(headers)
    assert all(len(r) == n for r in cells), "every row needs one cell per header"
    numeric = [bool(cells) and all(_is_number(r[i]) or r[i] == "-" for r in cells) for i in range(n)]
    if align is None:
        align = "".join("r" if numeric[i] else "l" for i in range(n))
    widths = [max([len(headers[i])] + [len(r[i]) for r in cells]) for i in range(n)]
    budget = width - gap * (n - 1)
    floor = [0 if numeric[i] else max([len(headers[i])] + [_min_width(r[i], 6) for r in cells])
             for i in range(n)]
    while sum(widths) > budget:
        narrowable = [i for i in range(n) if not numeric[i] and widths[i] > floor[i]]
        if not narrowable:
            return _records(headers, cells, width, row_styles, color)
        i = max(narrowable, key=lambda j: widths[j])
        widths[i] -= 1

    def lines(values: Sequence[str]) -> list[str]:
        wrapped = [_wrap(v, widths[i]) for i, v in enumerate(values)]
        out = []
        for k in range(max(len(w) for w in wrapped)):
            parts = []
            for i, w in enumerate(wrapped):
                v = w[k] if k < len(w) else ""
                parts.append(v.rjust(widths[i]) if align[i] == "r" else v.ljust(widths[i]))
            out.append((" " * gap).join(parts).rstrip())
        return out

    out = [paint(lines(headers)[0], "bold", color=color),
           lines(["-" * w for w in widths])[0]]
    for k, r in enumerate(cells):
        out += [paint(line, *(row_styles or {}).get(k, ()), color=color) for line in lines(r)]
    return "\n".join(out)


def _records(headers, cells, width, row_styles, color) -> str:
    """Fallback for tables too wide even when wrapped: one block of `header: value` lines per
    row, a long value wrapped under itself."""
    key_w = min(max(len(h) for h in headers), width // 3)
    blocks = []
    for k, r in enumerate(cells):
        lines = []
        for h, v in zip(headers, r):
            head, *rest = _wrap(v, width - key_w - 2)
            lines += [f"{h[:key_w]:<{key_w}}  {head}", *(f"{'':<{key_w}}  {x}" for x in rest)]
        blocks.append(paint("\n".join(lines), *(row_styles or {}).get(k, ()), color=color))
    return "\n\n".join(blocks)


def print_table(headers, rows, *, stream=None, **kw) -> None:
    """`format_table` to `stream` (stdout), coloured only when that stream is a terminal."""
    stream = sys.stdout if stream is None else stream
    kw.setdefault("color", use_color(stream))
    print(format_table(headers, rows, **kw), file=stream)
