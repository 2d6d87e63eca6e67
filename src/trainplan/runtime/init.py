"""Layout-independent weight initialisation.

Each parameter's values are drawn whole, from a generator seeded by (seed, parameter name), and
then each rank keeps its own shard. So the same seed gives the same model under FSDP, HSDP, tensor
parallel, any world size, with or without checkpoint wrappers or torch.compile: layouts can be
compared step by step, and a test can check that they agree. (Drawing per shard through the
DTensor RNG would make the values depend on the mesh.) Only one full parameter exists at a time.
"""

from __future__ import annotations

import zlib

import torch

# Wrapper prefixes that activation checkpointing, torch.compile and FSDP insert into names.
_WRAPPERS = ("_checkpoint_wrapped_module.", "_orig_mod.", "_fsdp_wrapped_module.")


def canonical_name(name: str) -> str:
    for w in _WRAPPERS:
        name = name.replace(w, "")
    return name


@torch.no_grad()
def fill(param: torch.Tensor, name: str, seed: int, kind: str, std: float = 0.02) -> None:
    """kind: "ones", "zeros" or "normal" (clipped to +-3 std, the support of torchtitan's truncated normal)."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    shape, device = param.shape, param.device
    if kind in ("ones", "zeros"):
        (param.fill_(1.0) if kind == "ones" else param.zero_())
        return
    g = torch.Generator(device=device)
    g.manual_seed((seed * 1_000_003 + zlib.crc32(canonical_name(name).encode())) % 2**63)
    full = torch.empty(shape, device=device, dtype=torch.float32)
    full.normal_(0.0, std, generator=g).clamp_(-3 * std, 3 * std)
    if isinstance(param, DTensor):
        local = distribute_tensor(full.to(param.dtype), param.device_mesh, param.placements,
                                  src_data_rank=None)
        param.to_local().copy_(local.to_local())
    else:
        param.copy_(full)
