"""Memory per GPU for one layout: a named breakdown for the worst pipeline stage.

Every stage is estimated and the largest total wins: stage 0 usually holds the most in-flight
micro-batches plus the embedding, the last stage the LM head and the logits. The terms come from
states.py (parameters, gradients, optimizer), activations.py (saved tensors per layer and the
pipeline micro-batches in flight) and overheads.py (logits, fp8 extras, runtime overheads).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields

from trainplan.costs import overheads as ov
from trainplan.costs.activations import (
    ActivationContext, LayerActivations, layer_activations, layer_backward_grads, layer_kinds,
    microbatches_in_flight,
)
from trainplan.costs.states import StageParams, state_bytes, stage_params
from trainplan.layout import Layout
from trainplan.precision import recipe
from trainplan.units import GiB

# Terms that are tensors (torch.cuda.memory_allocated counts them).
ALLOCATED = ("params", "grads", "master_params", "optimizer_states", "unsharded_params", "unsharded_grads",
             "activations", "recompute_working", "activation_grads", "logits", "fp8_weights", "fp8_scales", "workspace")


@dataclass(frozen=True, slots=True)
class MemoryBreakdown:
    """Bytes per GPU on the worst pipeline stage, by named term."""

    params: float  # weights kept between steps (Megatron bf16; FSDP2 fp32 shards = master copy)
    grads: float  # gradients kept until the optimizer step
    master_params: float  # Megatron mixed precision: fp32 master weights
    optimizer_states: float  # AdamW m and v
    unsharded_params: float  # FSDP: all-gathered weights in flight
    unsharded_grads: float  # FSDP: unsharded gradients + reduce-scatter input; zero2: a bucket
    activations: float  # saved for backward, all micro-batches in flight on this stage
    recompute_working: float  # one layer's recomputed activations during backward (AC) / offload prefetch
    activation_grads: float  # activation gradients alive inside one layer's backward
    logits: float  # last stage: logits, fp32 loss and its gradient, final-norm and head inputs
    fp8_weights: float  # fp8 copies (and transposes) of weights
    fp8_scales: float  # fp8 scales and amax history
    workspace: float  # cuBLAS / cuBLASLt workspaces
    fragmentation: float  # reserved - allocated in PyTorch's caching allocator
    nccl_buffers: float  # NCCL communicator buffers (outside torch's allocator)
    cuda_context: float  # CUDA context (outside torch's allocator)
    worst_stage: int = 0
    convention: str = "fsdp2"  # "fsdp2" | "megatron", see costs/states.py
    microbatches_in_flight: float = 1.0
    activation_groups: dict = field(default_factory=dict)  # activations by tensor group, bytes

    @property
    def total_allocated(self) -> float:
        """What torch.cuda.max_memory_allocated would report."""
        return sum(getattr(self, k) for k in ALLOCATED)

    @property
    def total_reserved(self) -> float:
        """What torch.cuda.max_memory_reserved would report (allocated + fragmentation)."""
        return self.total_allocated + self.fragmentation

    @property
    def total(self) -> float:
        """Device memory in use, as nvidia-smi shows it: reserved + NCCL buffers + CUDA context."""
        return self.total_reserved + self.nccl_buffers + self.cuda_context

    def terms(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)
                if isinstance(getattr(self, f.name), float) and f.name != "microbatches_in_flight"}

    def to_dict(self) -> dict:
        t = self.terms()
        totals = {"total_allocated": self.total_allocated, "total_reserved": self.total_reserved,
                  "total": self.total}
        return {
            "bytes": {**t, **totals},
            "gib": {k: round(v / GiB, 3) for k, v in {**t, **totals}.items()},
            "activation_groups_gib": {k: round(v / GiB, 3) for k, v in self.activation_groups.items()},
            "worst_stage": self.worst_stage,
            "convention": self.convention,
            "microbatches_in_flight": self.microbatches_in_flight,
        }


def memory_breakdown(job, layout: Layout) -> MemoryBreakdown:
    """Memory of the worst GPU (max total over pipeline stages) for `layout` running `job`.

    Assumes `check_layout(job, layout)` passed; pure arithmetic, no I/O.
    """
    L = layout
    m = job.model
    stages = stage_params(m, L.tp, L.ep, L.pp)
    best = None
    for i, sp in enumerate(stages):
        b = _stage(job, L, i, sp)
        if best is None or b.total > best.total:
            best = b
    return best


def _stage(job, L: Layout, i: int, sp: StageParams) -> MemoryBreakdown:
    m, w = job.model, job.workload
    r = recipe(L.precision)
    fp8_elem = ov.FP8_ELEM_BYTES.get(r.name, 1.0)
    st = state_bytes(sp, sharding=L.sharding, pure=r.pure, dp_shard=L.dp_shard, cp=L.cp, ep=L.ep, pp=L.pp,
                     optimizer_offload=L.optimizer_offload, fp8_allgather=L.fp8_allgather,
                     fp8_elem_bytes=fp8_elem)
    tokens = L.micro_batch * w.seq_len / L.cp  # tokens of one micro-batch on this GPU
    ctx = _context(w.seq_len, L.tp, L.sequence_parallel, L.cp, L.flash_attention, L.torch_compile,
                   L.sharding == "fsdp")
    per_mb, working, grads, groups = _stage_activations(m, ctx, L.ac, L.ac_layers, sp.first_layer, sp.num_layers)
    in_flight = microbatches_in_flight(L.pp, i, L.grad_accum, L.pp_schedule, L.vp)
    activations = per_mb * tokens * in_flight
    logits = 0.0
    if i == L.pp - 1:
        sp_div = L.tp if (L.sequence_parallel and L.tp > 1) else 1
        head_inputs = tokens * ctx.elem_bytes * m.hidden_size * (1 / sp_div + 1)  # final-norm in, head in
        logits = ov.logits_bytes(tokens, m.vocab_size / L.tp, m.hidden_size, L.chunked_loss) + head_inputs
    fp8_w = fp8_s = 0.0
    if r.fp8:
        fp8_w = ov.fp8_weight_copies(st.convention, sp.largest_unit_linear, sp.fp8_linear,
                                     L.fp8_allgather, fp8_elem)
        fp8_s = ov.fp8_scale_bytes(st.convention, _linears(m) * sp.num_layers)
    dynamic = activations + (working + grads) * tokens + logits + st.unsharded_params + st.unsharded_grads + fp8_w
    return MemoryBreakdown(
        params=st.params, grads=st.grads, master_params=st.master_params, optimizer_states=st.optimizer_states,
        unsharded_params=st.unsharded_params, unsharded_grads=st.unsharded_grads,
        activations=activations, recompute_working=working * tokens, activation_grads=grads * tokens,
        logits=logits,
        fp8_weights=fp8_w, fp8_scales=float(fp8_s), workspace=float(ov.CUBLAS_WORKSPACE_BYTES),
        fragmentation=ov.FRAGMENTATION * dynamic,
        nccl_buffers=float(ov.nccl_bytes((L.dp_replicate, L.dp_shard, L.tp, L.pp, L.cp, L.ep))),
        cuda_context=float(ov.CUDA_CONTEXT_BYTES),
        worst_stage=i, convention=st.convention, microbatches_in_flight=in_flight,
        activation_groups={k: v * tokens * in_flight for k, v in groups.items()},
    )


@functools.lru_cache(maxsize=256)
def _context(seq_len, tp, sequence_parallel, cp, flash, compiled, torchtitan) -> ActivationContext:
    # The state convention names the stack: FSDP2 layouts run torchtitan's (DTensor TP/SP, per-op
    # selective checkpointing), the others Megatron's (re-gathered SP inputs, attention-core recompute)
    return ActivationContext(seq_len=seq_len, tp=tp, sequence_parallel=sequence_parallel, cp=cp,
                             flash_attention=flash, fused_pointwise=compiled, sp_saves_gathered=torchtitan,
                             per_op_selective=torchtitan)


@functools.lru_cache(maxsize=4096)
def _stage_activations(m, ctx: ActivationContext, ac: str, ac_layers: int, first: int, n: int):
    """Bytes per token of one micro-batch on a stage: (saved, recompute working set, activation
    gradients in one layer's backward, saved by group)."""
    kinds = layer_kinds(m)[first:first + n]
    saved = LayerActivations()
    working = grads = 0.0
    for j, is_moe in enumerate(kinds):
        grads = max(grads, layer_backward_grads(m, is_moe, ctx))
        policy = _policy(ac, ac_layers, j)
        kept = layer_activations(m, is_moe, ctx, policy)
        saved = saved.plus(kept)
        if policy != "none":
            # backward recomputes one layer at a time; the dropped tensors are alive again meanwhile
            working = max(working, layer_activations(m, is_moe, ctx, "none").total - kept.total)
    if ac == "offload":
        # the next layer's input is prefetched from host while the current one is recomputed
        working += 2 * layer_activations(m, False, ctx, "full").total
    return saved.total, working, grads, saved.to_dict()


def _policy(ac: str, ac_layers: int, j: int) -> str:
    if ac == "partial":
        return "full" if j < ac_layers else "none"
    return ac


def _linears(m) -> int:
    """fp8-cast linear layers per transformer block (q, k, v, o + MLP or routed/shared experts)."""
    mats = 3 if m.gated_mlp else 2
    if m.moe is None:
        return 4 + mats
    return 4 + mats * (m.moe.num_experts + (1 if m.moe.num_shared_experts else 0))
