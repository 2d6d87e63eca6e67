"""Progress bars for long loops (searches, traces, training), on stderr and only on a terminal.

    from trainplan.report.progress import Progress, track

    for layout in track(candidates, label="search"):      # an iterable with a len()
        ...
    with Progress(total=steps, label="train", unit="step") as bar:   # a loop you drive
        for step in range(steps):
            ...
            bar.update(1, note=f"loss {loss:.3f}")

Nothing is drawn when stderr is not a terminal (CI logs, pipes, `--json` consumers), nor before
`delay_s` has passed: a search that ends in 0.3 s should not flash a bar (issue 5: searches over
about a second show progress). Redraws are throttled to `interval_s` so that a loop of a million
cheap iterations does not spend its time writing to the terminal. Pure standard library.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from typing import Self, TypeVar

from trainplan.report.terminal import WIDTH, fmt_seconds

T = TypeVar("T")


class Progress:
    """A bar drawn in place with carriage returns: label, bar, percent, count, rate, ETA."""

    def __init__(self, total: int | None = None, label: str = "", unit: str = "it", *,
                 stream=None, enabled: bool | None = None, delay_s: float = 1.0,
                 interval_s: float = 0.1, width: int = WIDTH, clock=time.monotonic):
        self.total, self.label, self.unit = total, label, unit
        self.stream = sys.stderr if stream is None else stream
        if enabled is None:
            isatty = getattr(self.stream, "isatty", None)
            enabled = bool(isatty and isatty())
        self.enabled = enabled
        self.delay_s, self.interval_s, self.width = delay_s, interval_s, width
        self._clock = clock
        self._start = clock()
        self._last_draw = None  # time of the last redraw; None until the first one
        self.count = 0
        self.note = ""

    def update(self, n: int = 1, note: str | None = None) -> None:
        self.count += n
        if note is not None:
            self.note = note
        if not self.enabled:
            return
        now = self._clock()
        if now - self._start < self.delay_s:
            return
        if self._last_draw is not None and now - self._last_draw < self.interval_s:
            return
        self._last_draw = now
        self.stream.write("\r" + self.render(now) + "\x1b[K")
        self.stream.flush()

    def render(self, now: float | None = None) -> str:
        """The bar as one line of at most `width` characters (without control codes)."""
        elapsed = max((self._clock() if now is None else now) - self._start, 1e-9)
        rate = self.count / elapsed
        head = f"{self.label} " if self.label else ""
        if self.total:
            frac = min(self.count / self.total, 1.0)
            eta = (self.total - self.count) / rate if rate > 0 else None
            tail = f" {frac * 100:3.0f}% {self.count}/{self.total} {_rate(rate, self.unit)}"
            if eta is not None and frac < 1:
                tail += f" eta {fmt_seconds(eta)}"
        else:
            frac = None
            tail = f" {self.count} {self.unit} {_rate(rate, self.unit)} {fmt_seconds(elapsed)}"
        if self.note:
            tail += f" {self.note}"
        room = self.width - 1 - len(head) - len(tail) - 2  # -1: never touch the last column
        if frac is not None and room >= 10:
            bar_w = min(room, 30)
            filled = int(bar_w * frac)
            line = head + "[" + "#" * filled + "." * (bar_w - filled) + "]" + tail
        else:
            line = head + tail.lstrip()
        return line[: self.width - 1]

    def close(self) -> None:
        """Clear the bar's line, if one was drawn, so that the next output starts clean."""
        if self.enabled and self._last_draw is not None:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._last_draw = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _rate(per_s: float, unit: str) -> str:
    if per_s >= 1:
        from trainplan.report.terminal import fmt_count

        return f"{fmt_count(per_s)} {unit}/s"
    return f"{1 / per_s:.1f} s/{unit}" if per_s > 0 else f"- {unit}/s"


def track(items: Iterable[T], label: str = "", total: int | None = None, unit: str = "it",
          **kw) -> Iterator[T]:
    """Yield from `items`, drawing a Progress bar on stderr when it is a terminal."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    bar = Progress(total=total, label=label, unit=unit, **kw)
    try:
        for item in items:
            yield item
            bar.update(1)
    finally:
        bar.close()
