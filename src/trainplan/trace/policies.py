"""Activation checkpointing policies applied to the decoder layers of a Hugging Face model.

Each layer's `forward` is replaced by a call through `torch.utils.checkpoint.checkpoint`
(non-reentrant, as torchtitan and FSDP2 use it):

- full: keep only the layer input, recompute the whole layer in backward;
- selective: per-op selective checkpointing (`create_selective_checkpoint_contexts`) with
  torchtitan's op-level policy (torchtitan/distributed/activation_checkpoint.py): keep the outputs
  of attention and of every second matmul of the layer (q, v, MLP gate, down: the 1st, 3rd, ...),
  recompute the other matmuls, element-wise ops, norms and activation functions;
- partial: full checkpointing on some layers, none on the others (the caller picks which).
"""

from __future__ import annotations

import functools

# Ops whose outputs selective checkpointing keeps (matmuls and fused attention).
_SAVE_OPS = (
    "mm", "addmm", "bmm", "baddbmm", "_scaled_mm", "_grouped_mm",
    "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
)


def _selective_context():
    import torch
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    save = set()
    for name in _SAVE_OPS:
        packet = getattr(torch.ops.aten, name, None)
        if packet is not None:
            save.update(getattr(packet, o) for o in packet.overloads())

    mm = set(torch.ops.aten.mm.overloads() and [torch.ops.aten.mm.default])
    count = {"forward": 0, "recompute": 0}  # fresh per checkpointed call: context_fn is called each time

    def policy(ctx, op, *args, **kwargs):
        mode = "recompute" if ctx.is_recompute else "forward"
        if op in mm:
            count[mode] += 1
            if count[mode] % 2 == 0:  # every second matmul is recomputed (torchtitan)
                return CheckpointPolicy.PREFER_RECOMPUTE
        return CheckpointPolicy.MUST_SAVE if op in save else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def checkpoint_layer(layer, selective: bool) -> None:
    """Route `layer.forward` through torch.utils.checkpoint (hooks on the layer still fire)."""
    from torch.utils.checkpoint import checkpoint

    inner = layer.forward
    kw = {"context_fn": _selective_context} if selective else {}

    @functools.wraps(inner)
    def forward(*args, **kwargs):
        # preserve_rng_state=False: no dropout in these models, and the fake RNG has no state to keep.
        return checkpoint(inner, *args, use_reentrant=False, preserve_rng_state=False, **kw, **kwargs)

    layer.forward = forward


def apply_ac(layers, policy: str, partial_layers: int = 0) -> list[str]:
    """Apply `policy` to the traced layers; returns the per-layer policy actually applied."""
    applied = []
    for i, layer in enumerate(layers):
        p = policy
        if policy == "partial":
            p = "full" if i < partial_layers else "none"
        if p in ("full", "selective"):
            checkpoint_layer(layer, selective=(p == "selective"))
        applied.append(p)
    return applied
