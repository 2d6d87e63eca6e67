"""Lazy imports of the torch extra, with an error that names the extra to install."""

from __future__ import annotations

from trainplan.errors import TrainplanError

EXTRA_HINT = "install the torch extra: pip install 'trainplan[torch]'"


def require_torch():
    """Import torch and transformers, or raise a one-line TrainplanError naming the extra."""
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as e:
        raise TrainplanError(f"trainplan trace needs torch and transformers ({e.name} is missing); {EXTRA_HINT}") from None
    return torch
