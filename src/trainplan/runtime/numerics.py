"""Non-finite steps: skip the update, count it, stop after too many in a row.

A NaN or infinite loss or gradient norm would write NaN into the weights and the AdamW moments,
and every later step (and every later checkpoint) would carry it. One such step is usually one bad
batch or a transient overflow: skipping its update, as a dynamic loss scaler does for fp16
(Micikevicius et al. 2018, section 3.2), loses one batch. Several in a row mean the model state or
the data is broken: continuing only burns GPU hours and, through keep-last-N pruning, deletes
the checkpoints from before the problem, so the run stops instead (and the last checkpoint
before the first non-finite step is pinned: retention.pin).
"""

from __future__ import annotations

import math

DEFAULT_MAX_IN_ROW = 3  # --max-nonfinite: a streak this long stops the run


class NonFiniteGuard:
    def __init__(self, max_in_row: int = DEFAULT_MAX_IN_ROW, check_grad_norm: bool = True):
        # fp16: an infinite gradient norm is the loss scaler's business (it skips and backs off),
        # so only the loss counts.
        self.max_in_row = max_in_row
        self.check_grad_norm = check_grad_norm
        self.skipped = 0  # this run
        self.in_row = 0
        self.first_step: int | None = None  # of the current streak

    def skip(self, step: int, loss: float, grad_norm: float) -> bool:
        """Whether to skip the update of `step` (1-based). Same answer on every rank: loss and
        grad norm are global (all-reduced) values."""
        bad = not math.isfinite(loss) or (self.check_grad_norm and not math.isfinite(grad_norm))
        if not bad:
            self.in_row = 0
            return False
        self.skipped += 1
        self.in_row += 1
        if self.in_row == 1:
            self.first_step = step
        return True

    @property
    def exhausted(self) -> bool:
        return self.in_row >= self.max_in_row

    def message(self, step: int, kept: str | None) -> str:
        where = f"the last checkpoint before it, {kept}, is kept" if kept else "no checkpoint was written before it"
        return (f"loss or gradient norm not finite for {self.in_row} steps in a row (steps {self.first_step}-{step}, "
                f"--max-nonfinite {self.max_in_row}); stopped without saving; {where}: lower the learning rate, "
                "check the data at those steps, or resume from that checkpoint")
