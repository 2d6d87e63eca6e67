"""Memory that is not model states or layer activations: logits and loss, fp8 extras, runtime overheads.

The runtime terms are documented judgement constants, not fitted to any data set; a calibrated
profile (issue on calibration) may replace them. Which of them a measured peak contains depends on
how it was measured:

  torch.cuda.max_memory_allocated  tensors only                       -> MemoryBreakdown.total_allocated
  torch.cuda.max_memory_reserved   + caching-allocator fragmentation  -> MemoryBreakdown.total_reserved
  nvidia-smi / DCGM "used"         + CUDA context + NCCL buffers      -> MemoryBreakdown.total
"""

from __future__ import annotations

import math

from trainplan.units import GiB

MiB = 1024**2

# CUDA context (driver state, module images, kernels of the loaded libraries). Lives outside
# PyTorch's allocator, so it shows in nvidia-smi but not in torch's counters. PyTorch's CUDA
# semantics notes put it at "hundreds of MiB"; with CUDA 12 lazy loading of cuBLAS/cuDNN/NCCL
# kernels it is typically 0.5-1 GiB per process; we take the middle.
CUDA_CONTEXT_BYTES = int(0.75 * GiB)

# NCCL communicator buffers, allocated by NCCL with cudaMalloc (outside torch's allocator).
# NCCL_BUFFSIZE defaults to 4 MiB per channel per peer for the Simple protocol, plus LL128
# (~4.6 MiB) and LL (~0.25 MiB) buffers (NCCL environment-variable docs); a ring or tree connects
# a rank to ~2 peers per channel and an NVSwitch node runs ~16 channels:
# 16 channels * 2 peers * ~4.5 MiB ~ 150 MiB per communicator. One per parallel group of size > 1.
NCCL_BYTES_PER_GROUP = 150 * MiB

# cuBLAS + cuBLASLt workspaces on the compute stream. PyTorch's default CUBLAS_WORKSPACE_CONFIG on
# Hopper and newer is ":4096:8" (8 x 4 MiB = 32 MiB) and the cuBLASLt workspace defaults to the
# same size (TORCH_CUBLASLT_WORKSPACE_SIZE); both come from the caching allocator.
CUBLAS_WORKSPACE_BYTES = 64 * MiB

# Allocator fragmentation: reserved minus allocated, as a fraction of the memory that is freed and
# re-allocated every step (activations, logits, all-gather and reduce-scatter buffers). PyTorch's
# caching allocator rounds requests and splits cached blocks; torchtitan logs print both
# max_active and max_reserved, and their gap is commonly 5-15% of the dynamic memory without
# expandable_segments. Judgement, not fitted; calibration may replace it.
FRAGMENTATION = 0.10

# Loss on the full vocabulary in eager PyTorch, bytes per token per vocabulary entry on the last
# stage, at the peak, which is the start of backward (every saved activation is still alive then):
# cross_entropy = log_softmax (keeps its fp32 output, 4) + nll_loss. The training loop drops its
# reference to the logits before backward (torchtitan `del pred`), so the bf16 logits and their fp32
# upcast are gone; nll_loss's backward writes a dense fp32 gradient of the log-probabilities (4) and
# log_softmax's backward the fp32 gradient of the logits (4) while both are alive: 4 + 4 + 4.
# (The forward holds bf16 logits 2 + upcast 4 + log-probs 4 = 10, with one activation fewer.)
LOGIT_BYTES = 4 + 4 + 4
# A compiled loss (torchtitan components/loss.py build_cross_entropy_loss wraps
# cross_entropy(pred.float()) in torch.compile when training.compile is on; releases of 2025 on,
# not the Dec 2024 one) fuses the upcast into the log-softmax: the bf16 logits are kept (with one
# fp32 log-sum-exp per token) and backward writes their bf16 gradient directly: 2 + 2 bytes.
COMPILED_LOGIT_BYTES = 2 + 2
# Eager cross_entropy straight on bf16 logits, the loop keeping its `logits` variable through
# backward (KempnerForge scripts/train.py @01b461a: F.cross_entropy(logits.view(...)) then
# backward inside the same block): log_softmax returns bf16 log-probs; at the backward peak the
# bf16 logits, log-probs, their gradient and the logits' gradient are alive: 2 + 2 + 2 + 2.
BF16_LOGIT_BYTES = 2 + 2 + 2 + 2


def loss_chunks(vocab_per_rank: float, hidden: int) -> int:
    """Chunks of the chunked loss (the trainer's runtime/loss.py uses the same count).
    Chunk rule of Liger-Kernel's fused linear cross-entropy (ops/fused_linear_cross_entropy.py):
    ceil(V / H) chunks, so one chunk of logits is about as large as the hidden states."""
    return max(1, math.ceil(vocab_per_rank / hidden))


def logits_bytes(tokens: float, vocab_per_rank: float, hidden: int, chunked: bool, compiled: bool = False,
                 bf16: bool = False) -> float:
    """Logits, cross-entropy and its gradient for one micro-batch on the last stage.

    Chunked loss (fused linear + cross-entropy over token chunks) keeps one chunk of logits
    alive: `loss_chunks` chunks of the micro-batch's tokens.
    """
    if chunked:
        tokens = math.ceil(tokens / loss_chunks(vocab_per_rank, hidden))
    per = COMPILED_LOGIT_BYTES if compiled else BF16_LOGIT_BYTES if bf16 else LOGIT_BYTES
    return tokens * vocab_per_rank * per


def fp8_weight_copies(per_use: bool, unit_linear: float, stage_linear: float, allgather: bool,
                      elem: float) -> float:
    """fp8 copies of weights (and their transposes for the backward GEMMs).

    per_use (the stack's lowp_weight_copies convention, stacks.toml), torchao: the block in flight and the prefetched one are cast per use (the casts of
    earlier blocks are recomputed in backward, torchtitan force_recompute_fp8_weight_in_bwd);
    each needs an fp8 weight and its transpose, or only the transpose when the all-gather already
    moved fp8 weights. cached, Transformer Engine: fp8 weight and transpose are cached for every
    local layer across the micro-batches of a step.
    """
    if per_use:
        return 2 * unit_linear * elem * (1 if allgather else 2)
    # with fp8 parameters (--fp8-param-gather) the weight itself is the fp8 copy: only the
    # transpose (Hopper) / column-wise copy (MXFP8) is extra
    return stage_linear * elem * (1 if allgather else 2)


def fp8_scale_bytes(amax_history: int, linears: int) -> float:
    """Scales and amax history (the recipe's, recipes.toml): input, weight and gradient of every
    low-precision linear, fp32 each (small, but named). Block scales are in the weight bytes."""
    return linears * 3 * amax_history * 4


def nccl_bytes(degrees: tuple[int, ...]) -> float:
    """NCCL buffers: one communicator per parallel dimension larger than 1."""
    return NCCL_BYTES_PER_GROUP * sum(1 for d in degrees if d > 1)
