"""AdamW and a linear-warmup + cosine-decay learning-rate schedule that survives a change of --steps.

Resuming with a different --steps (a run extended, or cut short) never raises the learning rate:
from the step it resumes at, the schedule continues from the lr that step had and decays on a new
cosine to the floor (lr * min_lr_ratio) at the new last step. A run resumed during warmup keeps
warming up and then decays to the new last step, as if it had been started with that --steps. A run
already at the floor stays there. Same --steps: the schedule is unchanged (exact resume).
"""

from __future__ import annotations

import math

import torch

from trainplan.runtime.parallel import adamw


def lr_factor(step: int, warmup: int, total: int, min_ratio: float, start: int | None = None,
              peak: float = 1.0) -> float:
    """Multiplier of the peak lr before optimizer step `step` (0-based): linear warmup from
    1/warmup to 1 over `warmup` steps, then cosine from `peak` at `start` (default: the end of
    warmup) down to `min_ratio` at `total` (Loshchilov & Hutter 2017, SGDR, eq. 5, one cycle)."""
    start = warmup if start is None else start
    if warmup > 0 and step < warmup and step < start:
        return (step + 1) / warmup
    span = max(total - start, 1)
    progress = min(max(step - start, 0) / span, 1.0)
    return min_ratio + (peak - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


class WarmupCosine:
    """The schedule as a callable object: LambdaLR saves a callable object's attributes in its
    state_dict (not a function's), so a checkpoint carries the total the run was decaying to."""

    def __init__(self, warmup: int, total: int, min_ratio: float):
        self.warmup, self.total, self.min_ratio = warmup, total, min_ratio
        self.start, self.peak = warmup, 1.0

    def __call__(self, step: int) -> float:
        return lr_factor(step, self.warmup, self.total, self.min_ratio, self.start, self.peak)

    def retarget(self, at_step: int, total: int) -> None:
        """Decay to `total` from `at_step` on, continuing from this schedule's value there."""
        if total == self.total or total <= at_step:
            return
        if at_step > self.start:  # decay has begun: continue from where it is
            self.peak, self.start = self(at_step), at_step
        self.total = total


def make_optimizer(model, train, total_steps: int):
    """AdamW with decoupled weight decay on matrices only (norms, biases and 1-D params are not
    decayed, as in GPT-2/Llama training), and its LambdaLR schedule; the model's converters
    (runtime/converters.py) hook it."""
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (decay if p.ndim >= 2 else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": train.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    # foreach=True: one fused kernel launch per group; works on DTensor (FSDP2) parameters.
    # parallel.adamw: sharded by ZeroRedundancyOptimizer when the model runs zero1.
    opt = adamw(model, groups, lr=train.lr, betas=tuple(train.betas), eps=1e-8, foreach=True)
    for converter in getattr(model, "converters", ()):  # build.build_model's: the recipe's converter
        converter.hook_optimizer(opt, model)
    warmup = min(train.warmup_steps, total_steps)  # a warmup longer than the run ends with it
    sched = torch.optim.lr_scheduler.LambdaLR(opt, WarmupCosine(warmup, total_steps, train.min_lr_ratio))
    return opt, sched


def retarget(scheduler, at_step: int, total_steps: int) -> None:
    """After a restore: decay to this run's `total_steps` (see the module docstring)."""
    for fn in {id(f): f for f in scheduler.lr_lambdas}.values():
        if isinstance(fn, WarmupCosine):
            fn.retarget(at_step, total_steps)
