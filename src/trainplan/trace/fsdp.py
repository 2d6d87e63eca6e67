"""FSDP2 on fake tensors: a fake process group, a CPU device mesh, and FSDPMemTracker.

What works on CPU with torch 2.13 (found here, see the report of issue 3):
- `dist.init_process_group("fake", store=FakeStore())` gives any world size in one process;
- the DeviceMesh must be built *outside* FakeTensorMode (DeviceMesh reads its rank tensor with
  .tolist(), which a fake tensor refuses: DataDependentOutputException);
- `fully_shard` per decoder layer and on the root, with MixedPrecisionPolicy(param_dtype=bf16,
  reduce_dtype=fp32), then forward, backward and AdamW, all under FakeTensorMode;
- `FSDPMemTracker` then reports sharded and unsharded parameters, gradients, all-gather and
  reduce-scatter buffers, activations and optimizer states of rank 0.
What does not: AdamW with foreach=True on the sharded DTensor parameters inflates the optimizer
bytes at the peak about 13x in our runs (the foreach path's temporaries are tracked as optimizer
state), so the trace uses foreach=False.
"""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def fake_world(world_size: int):
    """A fake process group of `world_size` ranks and a 1-D CPU mesh (created outside fake mode)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from trainplan.errors import TrainplanError

    own = not dist.is_initialized()
    if own:
        dist.init_process_group("fake", rank=0, world_size=world_size, store=FakeStore())
    elif dist.get_world_size() != world_size:
        raise TrainplanError(
            f"a process group of {dist.get_world_size()} ranks is already initialised; cannot trace fsdp={world_size}"
        )
    try:
        yield init_device_mesh("cpu", (world_size,))
    finally:
        if own:
            dist.destroy_process_group()


def shard(model, layers, mesh, compute_dtype, mixed: bool) -> None:
    """fully_shard each decoder layer, then the root (torchtitan's order)."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32) if mixed else MixedPrecisionPolicy()
    for layer in layers:
        fully_shard(layer, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)


def local_bytes(t) -> int:
    """Bytes of this rank's shard (a DTensor's local tensor) or of a plain tensor."""
    return (t.to_local() if hasattr(t, "to_local") else t).nbytes
