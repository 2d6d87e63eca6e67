"""Progress within a long step (runtime/progress.py): with many micro-batches rank 0 says where the
step is, at a bounded rate, so a run whose first step takes minutes is seen to be alive (issue 27:
a small plan with the default 4M-token batch printed nothing for minutes). A fake clock, no
processes."""

import io

from trainplan.runtime.progress import StepProgress, duration


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_progress_lines_come_at_most_every_period_and_estimate_the_step():
    clock, out, synced = Clock(), io.StringIO(), []
    p = StepProgress(True, every_s=10, sync=lambda: synced.append(clock.t), clock=clock, out=out)
    p.start(1, 512)
    for k in range(1, 512):
        clock.t += 2.5  # a micro-batch every 2.5 s: a line every 4 of them
        p.done(k)
    lines = out.getvalue().splitlines()
    assert lines[0] == "step 1: micro-batch 4/512, 10 s, ~21 min per step"
    assert len(lines) == len(synced) == 511 // 4  # the device is waited for only before a line
    p.done(512)  # the step's own line (metrics.Recorder) says the last one
    assert len(out.getvalue().splitlines()) == len(lines)


def test_no_progress_when_disabled_or_the_step_is_short():
    clock, out = Clock(), io.StringIO()
    p = StepProgress(False, every_s=10, clock=clock, out=out)
    p.start(1, 8)
    clock.t = 100
    p.done(4)
    fast = StepProgress(True, every_s=10, clock=clock, out=out)
    fast.start(2, 8)
    for k in range(1, 8):
        clock.t += 1
        fast.done(k)
    assert out.getvalue() == ""


def test_durations_read_as_a_person_says_them():
    assert [duration(s) for s in (41, 1320, 12600)] == ["41 s", "22 min", "3.5 h"]
