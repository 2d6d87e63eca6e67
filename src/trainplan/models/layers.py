"""What each decoder layer is, derived once from the spec (as Megatron's layer specs).

Every consumer that treats layers differently asks here: the parameter counts (models/params.py),
the memory model (costs/activations.py, costs/memory.py), the FLOPs (costs/flops.py through
ModelSpec.num_moe_layers), the reference trainer (runtime/model.py) and the tracer's layer kinds
(trace/config.py). Two copies of the rule once disagreed: Qwen3-MoE's `mlp_only_layers` made 46
MoE layers in the parameter count and 48 in the memory model.

The spec says how many layers use a sliding attention window, not which ones, and no cost term
needs more than that count; a layer's attention kind is not part of this answer.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from trainplan.memo import memoised

if TYPE_CHECKING:
    from trainplan.models.spec import ModelSpec, MoESpec

DENSE = "dense"
MOE = "moe"


def is_moe_layer(moe: MoESpec | None, index: int) -> bool:
    """Whether decoder layer `index` (0-based) has the routed-expert FFN, as HF builds it.

    Dense below `first_dense_layers` (DeepSeek first_k_dense_replace), then every
    `moe_layer_freq`-th layer (Qwen decoder_sparse_step: (index + 1) % step == 0), except the
    explicit dense layers (Qwen mlp_only_layers)."""
    return (
        moe is not None
        and index >= moe.first_dense_layers
        and (index + 1) % moe.moe_layer_freq == 0
        and index not in moe.dense_layers
    )


@functools.lru_cache(maxsize=256)
def ffn_kinds(moe: MoESpec | None, num_layers: int) -> tuple[str, ...]:
    """DENSE or MOE for each decoder layer, in order (before a ModelSpec exists: the adapters)."""
    return tuple(MOE if is_moe_layer(moe, i) else DENSE for i in range(num_layers))


@memoised()  # the cost model asks per layout; the answer is the model's
def layer_kinds(m: ModelSpec) -> tuple[str, ...]:
    """DENSE or MOE for each decoder layer of `m`, in order."""
    return ffn_kinds(m.moe, m.num_layers)


@memoised()
def moe_flags(m: ModelSpec) -> tuple[bool, ...]:
    """True for each MoE layer of `m`, in order (the memory model's per-layer switch)."""
    return tuple(k == MOE for k in layer_kinds(m))


@memoised()
def model_features(m: ModelSpec) -> tuple[str, ...]:
    """The architecture features a plan's band asks were ever measured (band.py): the FFN kind and
    each departure from plain (grouped-query or multi-head) attention that the cost model prices."""
    out = [MOE if m.moe is not None else DENSE]
    out += ["mla"] * (m.mla is not None) + ["sliding-window"] * (m.sliding_window_layers > 0)
    out += ["mtp"] * (m.mtp_layers > 0)
    return tuple(out)
