"""A precision recipe's runtime behaviour: the converter its recipes.toml row names.

The registry is the plain dict trainplan/converter_names.py declares (converter name -> the
"module:attr" of its class, plus what the planner needs to know without torch); this module
imports a converter's class on first use and builds it. As torchtitan's ModelConverter, a
converter is built from its configuration (here the recipe row: its converter_recipe, and the
layout's options), rewrites the model's modules, and hooks the optimizer where its format needs a
step after each update. The trainer (runtime/build.py, optim.py) and the tracer (trace/run.py)
ask `for_recipe` and never name a recipe or a converter; a recipe without low-precision linears
has none.

Where in the build order (parallel.py): right after the model is built on the meta device and
before tensor parallelism, as torchtitan converts before it parallelises: tensor-parallel styles
shard the converted modules (`tp_styles`), and FSDP2 shards what they hold.
"""

from __future__ import annotations

import functools
import importlib
from typing import TYPE_CHECKING, Protocol

from trainplan.converter_names import CONVERTERS
from trainplan.precision import Recipe, check_runnable

if TYPE_CHECKING:
    from torch import nn
    from torch.optim import Optimizer


class Converter(Protocol):
    """What every converter class (converter_names.CONVERTERS) implements."""

    def __init__(self, recipe: Recipe, *, fsdp_allgather: bool = False) -> None:
        """Build from the recipe row (its low_precision fields) and the layout's fp8_allgather
        (all-gather the weights in the low-precision format under FSDP2); refuse, in one line, a
        combination it cannot run."""

    def convert(self, model: nn.Module) -> int:
        """Swap the model's modules in place (before any parallelism); returns how many."""

    def tp_styles(self) -> tuple[type, type]:
        """(column-wise, row-wise) tensor-parallel styles for the modules `convert` made."""

    def hook_optimizer(self, optimizer: Optimizer, model: nn.Module) -> None:
        """Register what must run after each optimizer step on `model` (nothing: a no-op)."""


@functools.cache
def _load(name: str) -> type[Converter]:
    module, _, attr = CONVERTERS[name].implementation.partition(":")
    return getattr(importlib.import_module(module), attr)


def for_recipe(r: Recipe, *, fsdp_allgather: bool = False) -> Converter | None:
    """The converter of recipe `r`, built; None when its linears run in the compute dtype. A recipe
    without a converter is refused here (precision.check_runnable's one line)."""
    check_runnable(r)
    if r.low_precision is None:
        return None
    return _load(r.low_precision.converter)(r, fsdp_allgather=fsdp_allgather)


def for_layout(layout) -> Converter | None:
    """The converter a Layout's precision and options ask for."""
    return for_recipe(layout.recipe, fsdp_allgather=layout.fp8_allgather)
