"""Progress bars: only on a terminal, only after the delay, throttled, within 80 columns."""

from __future__ import annotations

import io

from trainplan.report.progress import Progress, track


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_nothing_is_written_when_stderr_is_not_a_terminal():
    out = io.StringIO()
    assert list(track(range(5), label="search", stream=out, delay_s=0)) == [0, 1, 2, 3, 4]
    assert out.getvalue() == ""


def test_no_bar_before_the_delay_then_a_bar_then_cleared():
    out, clock = Tty(), Clock()
    bar = Progress(total=100, label="search", stream=out, clock=clock, delay_s=1.0)
    clock.t = 0.5
    bar.update(10)
    assert out.getvalue() == ""  # a loop that ends in half a second draws nothing
    clock.t = 2.0
    bar.update(40)
    drawn = out.getvalue()
    assert drawn.startswith("\rsearch [") and " 50% 50/100 " in drawn and "eta 2.0 s" in drawn
    bar.close()
    assert out.getvalue().endswith("\r\x1b[K")


def test_redraws_are_throttled():
    out, clock = Tty(), Clock()
    bar = Progress(total=10_000, stream=out, clock=clock, delay_s=0, interval_s=0.1)
    clock.t = 1.0
    for _ in range(1000):  # same instant: one draw
        bar.update()
    assert out.getvalue().count("\r") == 1
    clock.t = 1.2
    bar.update()
    assert out.getvalue().count("\r") == 2


def test_render_fits_80_columns_with_a_long_note_and_without_a_total():
    clock = Clock()
    bar = Progress(total=3, label="trace llama-3.1-405b", unit="layer", clock=clock, enabled=False)
    clock.t = 10
    bar.update(1, note="x" * 200)
    assert len(bar.render()) <= 79
    open_ended = Progress(label="train", unit="step", clock=clock, enabled=False)
    clock.t = 20
    open_ended.update(7)
    assert open_ended.render().startswith("train 7 step ")


def test_track_closes_the_bar_when_the_loop_breaks():
    out, clock = Tty(), Clock()
    clock.t = 5.0
    for i in track(range(100), stream=out, clock=clock, delay_s=0):
        clock.t += 1
        if i == 3:
            break
    assert out.getvalue().endswith("\r\x1b[K")
