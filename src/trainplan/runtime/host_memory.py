"""Host-memory preflight: refuse a run whose ranks on this machine cannot hold what they allocate.

What a rank puts in this machine's RAM (runtime/build.py, runtime/init.py, runtime/data.py):

- on CPU (`--device cpu`, gloo) everything: build.py builds the model on the meta device, shards it
  (tp, FSDP, ep) and only then materialises each rank's own shard (`to_empty`), so a rank holds its
  shard, never a full copy; the optimizer step adds gradients and AdamW's two moments for it, and
  the forward adds activations and FSDP's all-gathered layers. These are the planner's own memory
  terms (costs/memory.py, FSDP2 convention) less the GPU-only ones (CUDA context, NCCL buffers,
  cuBLAS workspace, the caching allocator's fragmentation). runtime/init.fill draws each parameter
  whole in fp32 before keeping the rank's shard: one full parameter, the largest, is added;
- on GPUs the model, its states and activations are on the device: the host holds the token
  stream (below) and the process itself (torch, the CUDA context's host side), which is not counted.

Both ways every rank reads its own token stream (load_tokens: int64, until the steps' tokens are
read or the data ends), with the list and the concatenation it is built from: 16 bytes a token.
"""

from __future__ import annotations

import os
from pathlib import Path

from trainplan.errors import TrainplanError

# Terms of costs/memory.MemoryBreakdown that exist only on a GPU.
_GPU_ONLY = ("workspace", "fragmentation", "nccl_buffers", "cuda_context")
STREAM_BYTES_PER_TOKEN = 16  # int64 stream + the parts it is concatenated from
FP32 = 4  # runtime/init.fill draws the full parameter in float32


def available_bytes(meminfo: Path = Path("/proc/meminfo"), cgroup: Path = Path("/sys/fs/cgroup")) -> int | None:
    """Memory a new process can have without swapping: MemAvailable (the kernel's estimate, which
    counts reclaimable page cache), lowered to the cgroup's limit less its use inside a container
    (cgroup v2 memory.max); None where neither can be read."""
    avail = None
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    if avail is None:
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            pass
    try:
        limit = (cgroup / "memory.max").read_text().strip()
        if limit != "max":
            room = int(limit) - int((cgroup / "memory.current").read_text())
            avail = room if avail is None else min(avail, room)
    except (OSError, ValueError):
        pass
    return avail


def largest_parameter(m) -> int:
    """Elements of the model's largest single parameter (the one runtime/init.fill draws whole):
    the embedding or LM head, or a layer's stacked routed experts (runtime/moe.py: one (E, f, h)
    tensor per projection)."""
    big = m.vocab_size * m.hidden_size
    if m.moe is not None:
        big = max(big, m.moe.num_experts * m.moe.expert_ffn_size * m.hidden_size)
    return big


def model_bytes_per_rank(plan) -> float:
    """Bytes one CPU rank of `plan` allocates for the model (module doc)."""
    from trainplan.costs.memory import memory_breakdown

    b = memory_breakdown(plan.job, plan.layout)
    return sum(v for k, v in b.terms().items() if k not in _GPU_ONLY) + FP32 * largest_parameter(plan.job.model)


def stream_bytes_per_rank(plan, steps: int, data_tokens: int) -> float:
    from trainplan.runtime.data import tokens_needed

    L, w = plan.layout, plan.job.workload
    return STREAM_BYTES_PER_TOKEN * min(tokens_needed(steps, L.micro_batch, L.grad_accum, L.dp, w.seq_len),
                                        data_tokens)


def check_host_memory(plan, local_ranks: int, device: str, steps: int, data_tokens: int,
                      available: int | None = None) -> None:
    """Raise a one-line TrainplanError when `local_ranks` ranks of `plan` on this machine need more
    than its available memory, naming the largest catalog model that would fit the same way."""
    from trainplan.runtime.preflight import gib

    available = available_bytes() if available is None else available
    if available is None:
        return  # nothing to compare with (no /proc, no sysconf): the ranks find out themselves
    stream = stream_bytes_per_rank(plan, steps, data_tokens)
    model = model_bytes_per_rank(plan) if device == "cpu" else 0.0
    need = local_ranks * (model + stream)
    if need <= available:
        return
    what = (f"the shard of parameters, gradients and AdamW states, activations and one full parameter while "
            f"initialising: {gib(model)} a rank; " if device == "cpu" else "")
    if device == "cpu":
        from trainplan.models.params import count_params

        fits = _largest_fitting(plan, local_ranks, available, stream)
        about = count_params(plan.job.model).total * max(available - local_ranks * stream, 0) / (need - local_ranks * stream)
        tail = (f"about {about / 1e9:.2g}B parameters fit this way"
                + (f": the largest catalog model that fits is {fits}" if fits else ", fewer than any catalog model"))
    else:
        tail = "use less data per rank, or fewer ranks on this machine"
    raise TrainplanError(
        f"{plan.job.model.name} needs ~{gib(need)} of host memory for {local_ranks} rank(s) on this machine "
        f"({what}the token stream: {gib(stream)} a rank), {gib(available)} available; {tail} "
        "(or run on more machines or GPUs)")


def _largest_fitting(plan, local_ranks: int, available: int, stream: float) -> str | None:
    """The catalog model with the most parameters that `local_ranks` CPU ranks of the same layout
    hold in `available` bytes, or None."""
    from dataclasses import replace

    from trainplan.job import Job
    from trainplan.layout import check_layout
    from trainplan.models.checks import check_context
    from trainplan.models.library import catalog
    from trainplan.models.params import count_params

    for m in sorted(catalog().values(), key=lambda m: -count_params(m).total):
        other = replace(plan, job=Job(m, plan.job.cluster, plan.job.workload))
        try:
            check_context(m, plan.job.workload.seq_len, plan.job.workload.long_context)
            check_layout(other.job, other.layout)
        except TrainplanError:
            continue  # its positions, heads or experts do not take this layout
        if local_ranks * (model_bytes_per_rank(other) + stream) <= available:
            return m.name
    return None
