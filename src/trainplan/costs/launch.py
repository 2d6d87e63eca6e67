"""Kernel launches: the host time a step spends issuing its kernels, and the part the GPU waits for.

The host issues a layer's kernels one by one while the GPU runs the ones already queued; the GPU
only waits when issuing a layer's kernels takes longer than running them (a small batch per GPU:
strong scaling, a small model, tp or cp slicing the tokens thin). Per layer and micro-batch pass

    exposed = max(0, kernels x launch_s - GPU seconds of those kernels)

and with every layer of a stage alike this sums to max(0, host - GPU) over the micro-batch.
CUDA graphs (Layout.execution.cuda_graphs: Megatron-Core's --enable-cuda-graph /
--cuda-graph-impl, Transformer Engine make_graphed_callables, per layer) replay a captured layer
with one graph launch, so the per-kernel issue cost is gone and nothing is exposed.

The launch cost is a cited microbenchmark, not a fitted number. It is the CUDA runtime's own
issue rate; an eager PyTorch op adds Python and dispatcher time on top, which is not priced here,
so this term is a lower bound for eager stacks.
"""

from __future__ import annotations

# Host seconds per kernel launched back to back into one stream: 3.8 us per kernel for a 2.9 us
# kernel launched asynchronously without synchronisation (NVIDIA Technical Blog, A. Gray,
# "Getting Started with CUDA Graphs", 2019-09-05, https://developer.nvidia.com/blog/cuda-graphs/,
# its text: 20 kernels x 1000 steps in 76 ms launched from a stream, 68 ms as one graph of the
# same kernels, i.e. 3.4 us per kernel once the launch cost is gone; quoted, not re-measured here).
LAUNCH_S = 3.8e-6

# Kernels one transformer layer's forward launches (attention block + MLP block), by how the
# element-wise ops run. The counts follow the op classes of costs/compute.EAGER_PASSES:
#   fused (Transformer Engine, torch.compile): norm 2, QKV GEMM 1, RoPE 1, attention 1, output
#     GEMM 1, residual add 2, MLP GEMMs 2 (fc1 = gate and up fused, fc2), activation 1  = 11
#   eager PyTorch: norm 2 x 6 (upcast, pow, mean, rsqrt-mul, weight-mul, downcast), QKV 1,
#     RoPE 2 x 3 (q and k: upcast, complex mul, downcast), attention 1, output GEMM 1,
#     residual 2, MLP GEMMs 3 (gate, up, down), activation 2 (silu, mul)                 = 28
FORWARD_KERNELS = {True: 11, False: 28}
# A backward launches about two kernels per forward kernel: each GEMM has a data- and a
# weight-gradient GEMM, each element-wise op its gradient kernel plus a gradient accumulation.
BACKWARD_PER_FORWARD = 2.0


def layer_kernels(fused: bool, recompute_frac: float, tp_collectives: int) -> float:
    """Kernels one layer launches in one micro-batch: forward, backward, the recomputed forward
    share, and its tensor-parallel collectives (each a kernel)."""
    fwd = FORWARD_KERNELS[fused]
    return fwd * (1.0 + BACKWARD_PER_FORWARD + recompute_frac) + tp_collectives


def exposed_launch(layers: int, kernels_per_layer: float, gpu_s: float, cuda_graphs: bool) -> float:
    """Seconds one micro-batch waits on its kernels' launches: issuing `layers` x
    `kernels_per_layer` kernels against `gpu_s` seconds of their GPU work (module doc)."""
    if cuda_graphs:
        return 0.0
    return max(0.0, layers * kernels_per_layer * LAUNCH_S - gpu_s)
