"""Next-token cross-entropy, optionally over token chunks so full fp32 logits never exist.

Logits for a whole micro-batch are batch x seq x vocab values: at seq 8192 and a 128k vocabulary
that is 4 GiB per sequence in fp32, more than a layer's activations. Chunking computes the head
and the loss per chunk of the micro-batch's tokens under activation checkpointing, so backward
recomputes one chunk's logits at a time. The chunk count is the planner's
(costs/overheads.loss_chunks: ceil(vocab / hidden)), so one chunk holds the tokens it priced.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from trainplan.costs.overheads import loss_chunks
from trainplan.errors import TrainplanError


def chunks_for(layout, vocab: int, hidden: int) -> int:
    """Chunks of the loss the layout was costed with: 1 for 'plain', the priced count for
    'chunked' (the head is not vocabulary-parallel in the trainer: every rank has all of it)."""
    kind = layout.loss_kind
    if kind == "plain":
        return 1
    if kind == "chunked":
        return loss_chunks(vocab, hidden)
    raise TrainplanError(f"cross_entropy={kind} is not implemented in the trainer; use plain or chunked")


def _ce_sum(h: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    logits = F.linear(h, weight).float()
    return F.cross_entropy(logits.flatten(0, -2), labels.flatten(), reduction="sum")


def lm_loss(h: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, chunks: int = 1) -> torch.Tensor:
    """Mean cross-entropy of `labels` under logits h @ weight.T; h: (batch, seq, hidden).
    chunks > 1: over `chunks` chunks of the batch's tokens (torch.chunk: ceil(tokens / chunks)
    tokens each, as the planner counts)."""
    n = labels.numel()
    if chunks <= 1:
        return _ce_sum(h, weight, labels) / n
    total = h.new_zeros((), dtype=torch.float32)
    for hc, lc in zip(h.flatten(0, 1).chunk(chunks), labels.flatten().chunk(chunks)):
        total = total + checkpoint(_ce_sum, hc, weight, lc, use_reentrant=False)
    return total / n
