"""Memory per GPU for one layout: a named breakdown for the worst pipeline stage.

The largest total over the pipeline stages wins: stage 0 usually holds the most in-flight
micro-batches plus the embedding, the last stage the LM head and the logits. Only the stages that
can win are evaluated (`_candidate_stages`: the first of each group of identical stages, minus the
middle stages another earlier stage dominates term by term), which gives exactly the scan of every
stage (tests/costs/test_memory_conventions.py) at a few microseconds per call. The terms come from
states.py (parameters, gradients, optimizer), activations.py (saved tensors per layer and the
pipeline micro-batches in flight) and overheads.py (logits, fp8 extras, runtime overheads).
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass, field, fields

from trainplan.costs import context_parallel as cpx
from trainplan.costs import overheads as ov
from trainplan.costs.activations import (
    GROUPS,
    ActivationContext,
    LayerActivations,
    layer_activations,
    layer_backward_grads,
    microbatches_in_flight,
    saved_kinds,
)
from trainplan.costs.moe import layout_load
from trainplan.costs.states import StageParams, stage_params, state_bytes
from trainplan.layout import Layout
from trainplan.memo import memoised
from trainplan.models.layers import FULL, moe_flags
from trainplan.models.stages import EVEN, Uneven
from trainplan.units import GiB

# Terms that are tensors (torch.cuda.memory_allocated counts them).
ALLOCATED = ("params", "grads", "master_params", "optimizer_states", "unsharded_params", "unsharded_grads",
             "activations", "recompute_working", "activation_grads", "logits", "fp8_weights", "fp8_scales", "workspace",
             "cp_buffers")


_allocated_terms = operator.attrgetter(*ALLOCATED)


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
    cp_buffers: float = 0.0  # context-parallel exchange buffers of one layer's attention (cp_comm)
    worst_stage: int = 0
    convention: str = "fsdp2"  # "fsdp2" | "megatron" | "ddp", see costs/states.py
    microbatches_in_flight: float = 1.0
    activation_groups: dict = field(default_factory=dict)  # activations by tensor group, bytes

    @property
    def total_allocated(self) -> float:
        """What torch.cuda.max_memory_allocated would report."""
        return sum(_allocated_terms(self))

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
            "activation_groups": dict(self.activation_groups),  # bytes
            "activation_groups_gib": {k: round(v / GiB, 3) for k, v in self.activation_groups.items()},
            "worst_stage": self.worst_stage,
            "convention": self.convention,
            "microbatches_in_flight": self.microbatches_in_flight,
        }


def memory_breakdown(job, layout: Layout) -> MemoryBreakdown:
    """Memory of the worst GPU (max total over pipeline stages) for `layout` running `job`.

    Assumes `check_layout(job, layout)` passed; pure arithmetic, no I/O.
    """
    _, terms, groups, scale = _worst_stage(job, layout)
    return _build(terms, groups, scale)


def memory_total(job, layout: Layout) -> float:
    """memory_breakdown(job, layout).total, without building the breakdown: the search's memory
    check (the same sums in the same order, so the two are equal to the last bit)."""
    return _worst_stage(job, layout)[0]


def _worst_stage(job, L: Layout) -> tuple[float, tuple, dict, float]:
    """_stage_terms of the stage with the largest total (the first of equal totals)."""
    m = job.model
    split = L.expert_groups.weight_split
    lowp_experts = L.conventions.lowp_experts
    stages, check = _stages(m, tp=L.tp, split=split, pp=L.pp, vp=L.vp, first=L.pp_first_stage_layers,
                            last=L.pp_last_stage_layers, embedding=L.pp_embedding_in_split, loss=L.pp_loss_in_split,
                            lowp_experts=lowp_experts)
    best = None
    same = _Shared(job, L)
    for i in check:
        got = _stage_terms(job, L, i, stages[i], same)
        if best is None or got[0] > best[0]:
            best = got
    return best


@memoised()
def _stages(m, *, tp, split, pp, vp, first, last, embedding, loss, lowp_experts):
    """(every stage's parameters, the stages that can be the worst) of a split (Layout.uneven's fields)."""
    uneven = Uneven(first, last, embedding, loss)
    return (stage_params(m, tp, split, pp, vp, uneven, lowp_experts),
            _candidate_stages(m, tp, split, pp, vp, uneven, lowp_experts))


@functools.lru_cache(maxsize=1024)
def _candidate_stages(m, tp: int, expert_split: int, pp: int, vp: int, uneven: Uneven = EVEN,
                      lowp_experts: bool = True) -> tuple[int, ...]:
    """The stages that can be the worst: the first of each group of stages holding the same
    parameters and layer kinds. Within a group only the micro-batches in flight differ, and they
    never grow with the stage index (1F1B, interleaved, GPipe), so the group's first stage has the
    largest total (and the first of equal totals, as a scan of every stage would pick)."""
    kinds = moe_flags(m)
    stages = stage_params(m, tp, expert_split, pp, vp, uneven, lowp_experts)
    seen, out = set(), []
    for i, sp in enumerate(stages):
        key = (i == 0, i == pp - 1, sp.num_layers, sp.moe_layers, sp.dense, sp.experts, sp.fp8_linear,
               sp.largest_unit, sp.largest_unit_linear, tuple(kinds[j] for j in sp.layers))
        if key not in seen:
            seen.add(key)
            out.append(i)
    # A middle stage is also dominated by an earlier stage (the first included: the embedding only
    # adds to it) that is not the last, holds layers of the same single kind, at least as many of
    # them and at least as many parameters of every sort: every term is then >=.
    before_last = [i for i in out if i < pp - 1]
    keep = [i for i in out
            if not (0 < i < pp - 1 and any(_dominates(stages[j], stages[i], kinds) for j in before_last if j < i))]
    return tuple(keep)


def _dominates(a: StageParams, b: StageParams, kinds: tuple[bool, ...]) -> bool:
    ka = {kinds[j] for j in a.layers}
    kb = {kinds[j] for j in b.layers}
    return (len(ka) == 1 and ka == kb and a.num_layers >= b.num_layers and a.dense >= b.dense
            and a.experts >= b.experts and a.fp8_linear >= b.fp8_linear and a.largest_unit >= b.largest_unit
            and a.largest_unit_linear >= b.largest_unit_linear)


def _stage(job, L: Layout, i: int, sp: StageParams) -> MemoryBreakdown:
    """The breakdown of pipeline stage i."""
    return _build(*_stage_terms(job, L, i, sp, _Shared(job, L))[1:])


def _build(terms: tuple, groups: dict, scale: float) -> MemoryBreakdown:
    return MemoryBreakdown(*terms, activation_groups={k: v * scale for k, v in groups.items()})


class _Shared:
    """What every pipeline stage of one layout shares (computed once per layout, not per stage)."""

    __slots__ = ("conv", "cp_buf", "ctx", "g", "linears", "lp", "nccl", "r", "states", "tokens")

    def __init__(self, job, L: Layout):
        m, w = job.model, job.workload
        self.r = r = L.recipe
        self.lp = lp = r.low_precision
        self.conv = conv = L.conventions  # the stack's (stacks.toml), never inferred from sharding
        self.g = g = L.expert_groups
        self.states = {"sharding": L.sharding, "dp_shard": L.dp_shard, "cp": L.cp,
                       "edp_shard": g.edp_shard, "pp": L.pp, "optimizer_offload": L.optimizer_offload,
                       "fp8_allgather": L.fp8_allgather, "grad_fp32": conv.grad_reduce_fp32,
                       "sync_last_microbatch": conv.grad_sync == "last_microbatch" and L.grad_accum > 1,
                       "zero1_replicated": conv.zero1 == "zero_redundancy"}
        self.tokens = tokens = L.micro_batch * w.seq_len / L.cp  # tokens of one micro-batch on this GPU
        self.ctx = _context(w.seq_len, L.tp, L.sequence_parallel, L.cp, L.flash_attention, L.torch_compile,
                            conv.torch_style, None if lp is None else lp.weight_bytes, g.routed_share,
                            layout_load(L, balanced=True))
        self.cp_buf = _cp_buffers(m, L, tokens, job.cluster.node.gpus_per_node)
        self.nccl = float(ov.nccl_bytes((L.dp_replicate, L.dp_shard, L.tp, L.pp, L.cp, L.ep)))
        self.linears = _linears(m)


def _stage_terms(job, L: Layout, i: int, sp: StageParams, same: _Shared) -> tuple[float, tuple, dict, float]:
    """(device total, MemoryBreakdown's fields in order up to microbatches_in_flight, activation
    groups per token, tokens in flight) of stage i. The breakdown object is built only for the
    worst stage (the search calls this in its inner loop)."""
    m = job.model
    lp, conv, tokens, ctx, cp_buf = same.lp, same.conv, same.tokens, same.ctx, same.cp_buf
    st = _state_bytes(sp, same.r, **same.states)
    per_mb, working, grads, groups = _stage_activations_of(m, ctx, sp, ac=L.ac, ac_layers=L.ac_layers)
    in_flight = microbatches_in_flight(L.pp, i, L.grad_accum, L.pp_schedule, L.vp)
    activations = per_mb * tokens * in_flight
    logits = 0.0
    if i == L.pp - 1:
        sp_div = L.tp if (L.sequence_parallel and L.tp > 1) else 1
        head_inputs = tokens * ctx.elem_bytes * m.hidden_size * (1 / sp_div + 1)  # final-norm in, head in
        # without a vocabulary-parallel loss the head's output is gathered whole on every tp rank
        vocab = m.vocab_size / (L.tp if conv.vocab_parallel_loss else 1)
        loss = L.loss_kind
        logits = ov.logits_bytes(tokens, vocab, m.hidden_size, loss == "chunked",
                                 loss == "fused", conv.bf16_loss) + head_inputs
    fp8_w = fp8_s = 0.0
    if lp is not None:
        # under FSDP only the gathered units' weights exist, so no stack can cache every layer's copy
        per_use = conv.lowp_weight_copies == "per_use" or L.sharding == "fsdp"
        fp8_w = ov.fp8_weight_copies(per_use, sp.largest_unit_linear, sp.fp8_linear,
                                     L.fp8_allgather, lp.weight_bytes)
        fp8_s = ov.fp8_scale_bytes(lp.amax_history, same.linears * sp.num_layers)
    dynamic = activations + (working + grads) * tokens + logits + st.unsharded_params + st.unsharded_grads + fp8_w \
        + cp_buf
    working_b, grads_b, fp8_s = working * tokens, grads * tokens, float(fp8_s)
    workspace, fragmentation = float(ov.CUBLAS_WORKSPACE_BYTES), ov.FRAGMENTATION * dynamic
    nccl, context = same.nccl, float(ov.CUDA_CONTEXT_BYTES)
    # MemoryBreakdown's fields, in order
    terms = (st.params, st.grads, st.master_params, st.optimizer_states, st.unsharded_params, st.unsharded_grads,
             activations, working_b, grads_b, logits, fp8_w, fp8_s, workspace, fragmentation, nccl, context, cp_buf,
             i, st.convention, in_flight)
    # MemoryBreakdown.total's sums in its order (ALLOCATED, then fragmentation, NCCL, context): ties
    # must resolve identically, and memory_total must equal it to the last bit
    total = (0 + st.params + st.grads + st.master_params + st.optimizer_states + st.unsharded_params
             + st.unsharded_grads + activations + working_b + grads_b + logits + fp8_w + fp8_s + workspace + cp_buf) \
        + fragmentation + nccl + context
    return total, terms, groups, tokens * in_flight


@memoised()  # the recipe is a registry entry: keyed by identity, like the stage
def _state_bytes(sp, recipe, **shape):
    return state_bytes(sp, recipe=recipe, **shape)


@memoised()
def _stage_activations_of(m, ctx, sp, *, ac, ac_layers):
    return _stage_activations(m, ctx, ac, ac_layers, sp.layers)


def _cp_buffers(m, L: Layout, tokens: float, gpus_per_node: int) -> float:
    """Bytes of the CP exchange buffers alive in one layer's attention (costs/context_parallel.py)."""
    if L.cp <= 1:
        return 0.0
    kv, qo = cpx.kv_qo_bytes(m, tokens, L.tp)
    return cpx.working_bytes(L.execution.cp_comm, L.cp, L.tp, kv, qo, gpus_per_node)


@functools.lru_cache(maxsize=256)
def _context(seq_len, tp, sequence_parallel, cp, flash, compiled, torchtitan, lowp_bytes,
             routed_share: float = 1.0, moe_load: float = 1.0) -> ActivationContext:
    # torchtitan: the stack's `activations` convention is "pytorch" (DTensor TP/SP, per-op selective
    # checkpointing, eager SwiGLU unless compiled, torchao fp8 linears that save their bf16 input);
    # otherwise Megatron's with Transformer Engine (re-gathered SP inputs, attention-core recompute,
    # fused bias-SwiGLU, fp8 linears that save fp8 inputs). Both use fused norm kernels.
    # lowp_bytes: the recipe's low-precision element size, None without low-precision linears.
    # moe_load: the routed copies held, capacity-capped or padded, under balanced routing (the
    # memory model's assumption: costs/moe.routed_load with imbalance 1).
    return ActivationContext(seq_len=seq_len, tp=tp, sequence_parallel=sequence_parallel, cp=cp,
                             flash_attention=flash, fused_pointwise=compiled, sp_saves_gathered=torchtitan,
                             per_op_selective=torchtitan, fused_swiglu=not torchtitan,
                             fp8_linear_inputs=lowp_bytes is not None and not torchtitan,
                             lowp_bytes=lowp_bytes or 1.0, routed_share=routed_share, moe_load=moe_load)


@functools.lru_cache(maxsize=4096)
def _layer(m, is_moe: bool, ctx: ActivationContext, policy: str, mixer: tuple[str, bool] = (FULL, True)
           ) -> tuple[LayerActivations, float]:
    """One layer kind under one policy: (kept tensors, their total); `mixer`: (_mixer_kinds)."""
    kept = layer_activations(m, is_moe, ctx, policy, *mixer)
    return kept, kept.total


@functools.lru_cache(maxsize=4096)
def _stage_activations(m, ctx: ActivationContext, ac: str, ac_layers: int, layers: tuple[int, ...]):
    """Bytes per token of one micro-batch on the stage holding `layers`: (saved, recompute
    working set, activation gradients in one layer's backward, saved by group).

    Each distinct (layer kind, policy) is evaluated once and multiplied by its count. A layer's kind
    here is what decides its saved tensors: MoE or not, and a linear-attention mixer or attention
    (windowed, chunked and global attention keep the same tensors with a flash kernel)."""
    counts: dict[tuple[tuple[bool, tuple[str, bool]], str], int] = {}  # in the order of first occurrence
    moe = moe_flags(m)
    mixer = _mixer_kinds(m)
    flags = [(moe[index], mixer[index]) for index in layers]
    runs = ((flags[:ac_layers], "full"), (flags[ac_layers:], "none")) if ac == "partial" else ((flags, ac),)
    for run, policy in runs:  # the layers of one policy: their kinds, counted
        for kind in dict.fromkeys(run):
            counts[(kind, policy)] = run.count(kind)
    groups = dict.fromkeys(GROUPS, 0.0)
    saved = working = grads = 0.0
    for ((is_moe, kind), policy), count in counts.items():
        kept, kept_total = _layer(m, is_moe, ctx, policy, kind)
        saved += count * kept_total
        for g, v in kept.to_dict().items():
            groups[g] += count * v
        grads = max(grads, layer_backward_grads(m, is_moe, ctx))
        if policy != "none":
            # backward recomputes one layer at a time; the dropped tensors are alive again meanwhile
            working = max(working, _layer(m, is_moe, ctx, "none", kind)[1] - kept_total)
    if ac == "offload":
        # the next layer's input is prefetched from host while the current one is recomputed
        working += 2 * _layer(m, False, ctx, "full")[1]
    return saved, working, grads, groups


@functools.lru_cache(maxsize=256)
def _mixer_kinds(m) -> tuple[tuple[str, bool], ...]:
    return saved_kinds(m)


def _linears(m) -> int:
    """fp8-cast linear layers per transformer block (q, k, v, o + MLP or routed/shared experts)."""
    mats = 3 if m.gated_mlp else 2
    if m.moe is None:
        return 4 + mats
    return 4 + mats * (m.moe.num_experts + (1 if m.moe.num_shared_experts else 0))
