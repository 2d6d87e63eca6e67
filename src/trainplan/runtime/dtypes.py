"""The torch dtype of a recipe's compute dtype, for every torch-side user (trainer, kernel probe).

The names live in the recipe registry (precision.TORCH_DTYPE_NAMES), which stays torch-free."""

from __future__ import annotations

import torch

from trainplan.precision import torch_dtype_name


def torch_dtype(compute_dtype: str) -> torch.dtype:
    """torch.bfloat16 for "bf16", torch.float16 for "fp16" (a TrainplanError for others)."""
    return getattr(torch, torch_dtype_name(compute_dtype))
