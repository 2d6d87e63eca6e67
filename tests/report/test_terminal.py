"""Terminal helpers: colour only on a terminal (NO_COLOR wins), tables within 80 columns."""

from __future__ import annotations

import io
import re

import pytest

from trainplan.report.terminal import (
    fmt_count,
    fmt_gib,
    fmt_pct,
    fmt_seconds,
    format_table,
    paint,
    print_table,
    use_color,
)

ANSI = re.compile(r"\x1b\[[0-9;]*m")


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def clean_env(monkeypatch):
    for k in ("NO_COLOR", "FORCE_COLOR", "TERM"):
        monkeypatch.delenv(k, raising=False)
    return monkeypatch


def test_colour_only_on_a_terminal(clean_env):
    assert use_color(Tty()) is True
    assert use_color(io.StringIO()) is False


def test_no_color_wins_over_a_terminal(clean_env):
    clean_env.setenv("NO_COLOR", "1")
    assert use_color(Tty()) is False
    clean_env.setenv("FORCE_COLOR", "1")
    assert use_color(Tty()) is False


def test_empty_no_color_does_not_count_and_dumb_terminals_get_none(clean_env):
    clean_env.setenv("NO_COLOR", "")
    assert use_color(Tty()) is True
    clean_env.setenv("TERM", "dumb")
    assert use_color(Tty()) is False


def test_force_color_for_a_pipe(clean_env):
    clean_env.setenv("FORCE_COLOR", "1")
    assert use_color(io.StringIO()) is True


def test_paint():
    assert paint("x", "bold", "green", color=True) == "\x1b[1;32mx\x1b[0m"
    assert paint("x", "bold", color=False) == "x"


def test_print_table_has_no_escape_codes_in_a_pipe(clean_env):
    out = io.StringIO()
    print_table(["a", "b"], [["x", 1]], stream=out, row_styles={0: ("green",)})
    assert "\x1b" not in out.getvalue()
    tty = Tty()
    print_table(["a", "b"], [["x", 1]], stream=tty, row_styles={0: ("green",)})
    assert "\x1b[32m" in tty.getvalue()


LONG = "bf16 ac=selective mb=1 ga=8 dp=2x8(fsdp) tp=2 pp=4 interleaved/v2 cp=2 ep=8 chunked-loss"


def test_a_wide_table_wraps_its_text_column_within_80_columns_and_keeps_every_word():
    rows = [["chosen", LONG, "18.5k", "29.8 s", "156.1"], ["#2", LONG[:30], "123456789", "1.0 s", "7.0"]]
    text = format_table(["plan", "layout", "tokens/s", "step", "GiB"], rows)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "…" not in text
    # the chosen row's layout runs over its continuation lines (blank label), every word whole
    continued = [line for line in lines[3:] if line.startswith(" ")]
    assert continued and lines[-1].startswith("#2")
    assert set(LONG.split()) <= set(text.split())  # no word of the layout cut or dropped
    assert "123456789" in lines[-1] and "156.1" in lines[2]  # ... the numbers whole, on the row's line


def test_two_layouts_that_differ_only_at_their_end_read_differently():
    a, b = LONG + " fp8_allgather=true", LONG + " fp8_allgather=false"
    text = format_table(["plan", "layout", "tokens/s"], [["#2", a, "1k"], ["#3", b, "1k"]], width=60)
    assert "fp8_allgather=true" in text and "fp8_allgather=false" in text


def test_numbers_are_right_aligned_text_left():
    text = format_table(["name", "value"], [["a", "1.5"], ["long name", "100.25"]])
    lines = text.splitlines()
    assert lines[2] == "a             1.5"
    assert lines[3] == "long name  100.25"


def test_colour_does_not_count_towards_the_width():
    rows = [["x" * 70, "1"]]
    plain = format_table(["a", "b"], rows)
    coloured = format_table(["a", "b"], rows, color=True, row_styles={0: ("red",)})
    assert ANSI.sub("", coloured) == plain


def test_too_many_number_columns_fall_back_to_one_block_per_row():
    headers = [f"metric_{i}" for i in range(12)]
    text = format_table(headers, [[f"{1e6 * i:.0f}" for i in range(12)]])
    assert max(len(line) for line in text.splitlines()) <= 80
    assert text.splitlines()[1].startswith("metric_1 ")  # header: value lines


def test_formatters():
    assert fmt_gib(1024**3 * 1.5) == "1.5 GiB" and fmt_gib(None) == "-"
    assert fmt_count(18_512) == "18.5k" and fmt_count(2.5e12) == "2.5T" and fmt_count(None) == "-"
    assert fmt_seconds(0.25) == "250 ms" and fmt_seconds(29.8) == "29.8 s"
    assert fmt_seconds(3 * 86400) == "3.0 days" and fmt_seconds(5 * 3600) == "5.0 h"
    assert fmt_pct(0.123) == "12.3%" and fmt_pct(-0.05, signed=True) == "-5.0%"
