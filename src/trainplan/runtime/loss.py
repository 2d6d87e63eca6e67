"""Next-token cross-entropy, optionally over sequence chunks so full fp32 logits never exist.

Logits for a whole micro-batch are batch x seq x vocab values: at seq 8192 and a 128k vocabulary
that is 4 GiB per sequence in fp32, more than a layer's activations. Chunking computes the head
and the loss per chunk of positions under activation checkpointing, so backward recomputes one
chunk's logits at a time (the planner's `chunked_loss` option counts exactly this saving).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def _ce_sum(h: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    logits = F.linear(h, weight).float()
    return F.cross_entropy(logits.flatten(0, -2), labels.flatten(), reduction="sum")


def lm_loss(h: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, chunks: int = 1) -> torch.Tensor:
    """Mean cross-entropy of `labels` under logits h @ weight.T; h: (batch, seq, hidden)."""
    n = labels.numel()
    if chunks <= 1:
        return _ce_sum(h, weight, labels) / n
    total = h.new_zeros((), dtype=torch.float32)
    for hc, lc in zip(h.chunk(chunks, dim=1), labels.chunk(chunks, dim=1)):
        total = total + checkpoint(_ce_sum, hc, weight, lc, use_reentrant=False)
    return total / n
