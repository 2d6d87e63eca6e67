"""Context parallelism: ring attention over SDPA with torch.distributed.tensor.experimental.context_parallel.

Each of the cp ranks of a group holds 1/cp of every sequence (tokens, labels and their absolute
positions) and all of the weights; attention passes key/value shards around the ring (Liu et al.
2023, Ring Attention; torch's `_templated_ring_attention`). With causal attention a plain split
gives the last rank all the work, so the sequence is cut into 2*cp chunks and rank r holds
chunks r and 2*cp-1-r (torch's head-tail load balancer, the planner's assumption: seq divisible
by 2*cp). Gradients are averaged over dp_shard*cp by FSDP (parallel.fsdp_mesh): every cp rank's
loss is the mean over the same number of tokens, so that average is the global mean's gradient.

Runs on CUDA only: torch 2.13's CP dispatcher (`_context_parallel/_attention.py`, `custom_ops`)
rewrites the CUDA SDPA kernels (flash, memory-efficient, cuDNN) into ring attention; on CPU SDPA
runs `aten._scaled_dot_product_flash_attention_for_cpu`, which has neither a CP handler nor a
DTensor sharding strategy, so the first attention call fails (checked: 2 gloo ranks, torch 2.13).
"""

from __future__ import annotations

import contextlib

import torch

from trainplan.errors import TrainplanError


def check_context_parallel(layout, seq_len: int, device_type: str, use_hf: bool) -> None:
    """Refuse a cp > 1 run of this model and sequence, with what to change (what any cp > 1 run
    needs, CUDA, is supports.py's)."""
    if layout.cp == 1:
        return
    if use_hf:
        raise TrainplanError("cp > 1 is implemented for trainplan's own model, not for --hf models; use cp=1")
    if seq_len % (2 * layout.cp):
        raise TrainplanError(
            f"cp={layout.cp} needs the sequence length ({seq_len}) divisible by 2*cp = {2 * layout.cp} "
            "(load-balanced causal sharding: each rank holds one chunk from each end); change seq_len or cp"
        )


def sequence_shard(cp_mesh, tokens: torch.Tensor, labels: torch.Tensor):
    """A context manager for one micro-batch's forward AND backward (the ring attention's backward
    runs under the same dispatcher): shards tokens and labels in place along the sequence and
    yields {"positions": this rank's absolute positions} for the model. None: no-op, yields {}."""
    if cp_mesh is None:
        return contextlib.nullcontext({})
    return _sharded(cp_mesh, tokens, labels)


@contextlib.contextmanager
def _sharded(cp_mesh, tokens: torch.Tensor, labels: torch.Tensor):
    from torch.distributed.tensor.experimental import context_parallel

    positions = torch.arange(tokens.shape[1], device=tokens.device)
    buffers = [tokens, labels, positions]
    # The buffers are this micro-batch's alone: no need to restore them afterwards.
    with context_parallel(cp_mesh, buffers=buffers, buffer_seq_dims=[1, 1, 0], no_restore_buffers=set(buffers)):
        yield {"positions": positions}
