"""AdamW and a linear-warmup + cosine-decay learning-rate schedule."""

from __future__ import annotations

import math

import torch

from trainplan.runtime.parallel import adamw


def lr_factor(step: int, warmup: int, total: int, min_ratio: float) -> float:
    """Multiplier of the peak lr before optimizer step `step` (0-based): linear warmup from
    1/warmup to 1 over `warmup` steps, then cosine down to `min_ratio` at `total`
    (Loshchilov & Hutter 2017, SGDR, eq. 5, one cycle)."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    span = max(total - warmup, 1)
    progress = min(max(step - warmup, 0) / span, 1.0)
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def make_optimizer(model, train, total_steps: int):
    """AdamW with decoupled weight decay on matrices only (norms, biases and 1-D params are not
    decayed, as in GPT-2/Llama training), and its LambdaLR schedule."""
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (decay if p.ndim >= 2 else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": train.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    # foreach=True: one fused kernel launch per group; works on DTensor (FSDP2) parameters.
    # parallel.adamw: sharded by ZeroRedundancyOptimizer when the model runs zero1.
    opt = adamw(model, groups, lr=train.lr, betas=tuple(train.betas), eps=1e-8, foreach=True)
    warmup = min(train.warmup_steps, total_steps)  # a warmup longer than the run ends with it
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_factor(s, warmup, total_steps, train.min_lr_ratio))
    return opt, sched
