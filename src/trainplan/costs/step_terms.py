"""The terms of the step time (costs/steptime.py composes them): each is a pure function of the
slowest stage's shape (`Stage`) returning its named part of the breakdown, the exposed seconds of
one cause and the ledger entries behind them (`Term`).

Overlap is what the layout's stack does (Layout.execution, stacks.py), never assumed: a collective
the stack issues ahead of, or behind, independent compute is hidden up to a fraction of its time
as long as the compute it runs beside (its window) lasts longer:
exposed = max(c - window, c * (1 - overlap)). The fraction is the profile's `overlap` for
  FSDP/ZeRO parameter all-gathers        when param_gather_overlap (else 0: gathered before use)
  gradient reduce-scatter / all-reduce   when grad_reduce_overlap (else 0: after backward)
  pipeline sends                         when pp_p2p_overlap
  the CP exchange                        as costs/context_parallel.py lays it out per cp_comm
and `tp_overlap` for tensor-parallel collectives when tp_comm_overlap (TE userbuffers / async TP:
they sit between dependent GEMMs, exposed otherwise). Expert dispatch: `alltoall` all-to-alls and
`allgather` all-gathers/reduce-scatters of the tokens on the critical path; `deepep` hides them up
to `tp_overlap` behind the GEMMs (DeepEP's dispatch/combine overlapped with compute); with
ep_comm_overlap (Megatron-Core's --overlap-moe-expert-parallel-comm, alltoall or deepep) the
all-to-alls of one micro-batch run beside the compute of another, hidden up to `overlap`.
An overlap that is off is charged in full.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from trainplan.costs import context_parallel as cpx
from trainplan.costs import launch
from trainplan.costs import moe as moe_cost
from trainplan.costs.comm import (
    CommEntry,
    Span,
    bytes_on_wire,
    collective_time,
    measured_time,
    network_bytes,
    span,
    tier_name,
)
from trainplan.costs.compute import MicrobatchCompute
from trainplan.hardware import GPUSpec, NodeType
from trainplan.layout import Layout
from trainplan.memo import memoised
from trainplan.models.params import count_params
from trainplan.models.spec import ModelSpec
from trainplan.precision import Recipe
from trainplan.profile import Profile
from trainplan.stacks import stack as stack_preset

# Pinned host<->device copies reach ~80% of the PCIe link's per-direction rate (NVIDIA nvbandwidth
# host_to_device/device_to_host on Gen5 x16 systems report ~50-55 of 64 GB/s; an assumption until a
# lent GPU measures it with bench/gpu_check.py).
_PCIE_EFFICIENCY = 0.8


@dataclass(frozen=True, slots=True)
class Stage:
    """What every term reads: the layout and the slowest pipeline stage's micro-batch."""

    m: ModelSpec
    L: Layout
    prof: Profile
    rec: Recipe
    node: NodeType
    gpu: GPUSpec
    mach: object  # prof.machine_for(gpu.name): measured collective tables, or None
    mb: MicrobatchCompute  # one micro-batch on the slowest stage
    r: float  # its recompute fraction
    layers: int  # its layers
    tokens: float  # tokens of one micro-batch on one GPU
    # its MoE layers when the model's layers differ (steptime.slowest_stage counts them); None: the
    # stage's share of the model's MoE layers
    moe_layers: int | None = None

    @property
    def n_mb(self) -> int:
        return self.L.grad_accum

    @property
    def fwd(self) -> float:
        return self.mb.forward

    @property
    def bwd(self) -> float:
        return self.mb.total - self.mb.forward

    @property
    def gemm_window(self) -> float:
        return self.mb.gemm / 3.0


@dataclass(frozen=True, slots=True)
class Term:
    """One cause's exposed seconds, the ledger entries behind them (in issue order) and the machine
    table lookups that fell outside a table's range."""

    exposed: float = 0.0
    entries: tuple[CommEntry, ...] = ()
    outside: frozenset[str] = frozenset()


def exposed(c: float, window: float, overlap: float) -> float:
    return max(c - window, c * (1.0 - overlap)) if c > 0 else 0.0


def _combine(terms) -> Term:
    """The terms in order, their exposed seconds added left to right."""
    e, entries, outside = 0.0, [], set()
    for t in terms:
        e += t.exposed
        entries.extend(t.entries)
        outside.update(t.outside)
    return Term(e, tuple(entries), frozenset(outside))


def _priced(st: Stage, op: str, dim: str, nbytes: float, sp: Span, calls: float, window: float,
            overlap: float) -> Term:
    """`calls` collectives of `nbytes` over `sp`: the machine's measured time when it has one,
    else the model's; nothing when the group is one rank or nothing moves."""
    if sp.n <= 1 or nbytes <= 0 or calls <= 0:
        return Term()
    t1, outside = _one_call(st.node, st.mach, op=op, nbytes=nbytes, sp=sp)
    t = t1 * calls
    e = exposed(t, window, overlap)
    entry = CommEntry(op, dim, tier_name(sp, st.node), bytes_on_wire(op, nbytes, sp.n) * calls,
                      t, e, int(calls), network_bytes(op, nbytes, sp) * calls)
    return Term(e, (entry,), outside)


@memoised()  # the search prices the same collectives in many layouts
def _one_call(node: NodeType, mach, *, op: str, nbytes: float, sp: Span) -> tuple[float, frozenset[str]]:
    """Seconds of one collective and the notes of its table lookup: the machine's measured time when
    it has one, else the model's."""
    got = measured_time(op, nbytes, sp, node, mach)
    if got is None:
        return collective_time(op, nbytes, sp, node), frozenset()
    return got[0], frozenset(got[1])


def moe_tokens(st: Stage) -> tuple[float, int]:
    """(tokens of a micro-batch entering the MoE dispatcher on one GPU, the expert tensor-parallel
    group its routed copies are gathered over). With sequence parallel each tp rank routes its own
    tokens/tp: Megatron-Core (the "megatron" activations convention) then gathers the routed copies
    over etp (costs/moe.py), and with etp = 1 nothing is gathered in any stack. DTensor stacks with
    etp = tp (torchtitan apply_moe_ep_tp: the MoE block's input made Replicate over tp, its output
    Partial then reduce-scattered) and every stack without sequence parallel hold the whole tokens
    on every tp rank: the tp term gathers and reduces the block like a dense MLP. (trainplan's own
    trainer, etp = tp with sequence parallel, all-reduces the experts' partial sums and slices the
    result instead of reduce-scattering it: its MoE blocks move more tp bytes than this prices.)"""
    L, g = st.L, st.L.expert_groups
    if L.tp > 1 and L.sequence_parallel and (g.etp == 1 or not L.conventions.torch_style):
        return st.tokens / L.tp, g.etp
    return st.tokens, 1


def _moe_layers(st: Stage) -> float:
    """MoE layers on the slowest stage: the expert all-to-all and the dispatcher run on those only."""
    m = st.m
    if st.moe_layers is not None:
        return float(st.moe_layers)
    return m.num_moe_layers * st.layers / m.num_layers if m.moe is not None else 0.0


def tp_term(st: Stage) -> Term:
    """Tensor parallel: two collectives per layer and pass (forward, backward, recomputed forward),
    one around attention, one around the MLP; an MoE layer whose tokens enter the dispatcher
    sequence-split (moe_tokens) has no MLP collective unless shared experts run on the tp group."""
    L, ex = st.L, st.L.execution
    if L.tp <= 1:
        return Term()
    sp_tp = span(L.tp, 1, st.node)
    act = st.tokens * st.m.hidden_size * 2  # bf16 activation of the full (gathered) sequence
    passes = 2 + st.r  # forward + backward + recomputed forward
    moe = st.m.moe
    split_moe = _moe_layers(st) if moe and not moe.num_shared_experts and moe_tokens(st)[0] < st.tokens else 0.0
    calls = (2 * st.layers - split_moe) * passes * st.n_mb
    window = st.gemm_window * st.n_mb
    overlap = st.prof.tp_overlap if ex.tp_comm_overlap else 0.0
    ops = ("all_gather", "reduce_scatter") if L.sequence_parallel else ("all_reduce",)
    return _combine(_priced(st, op, "tp", act, sp_tp, calls, window, overlap) for op in ops)


def cp_term(st: Stage) -> Term:
    """Context parallel: the exchange cp_comm names (costs/context_parallel.py)."""
    L, mb, r, n_mb = st.L, st.mb, st.r, st.n_mb
    if L.cp <= 1:
        return Term()
    kv, qo = cpx.kv_qo_bytes(st.m, st.tokens, L.tp)
    windows = {"attention": mb.attention / 3 * (3 + r) * n_mb, "local": mb.attention / 3 * (3 + r) * n_mb / L.cp,
               "none": 0.0}
    return _combine(
        _priced(st, x.op, "cp", x.nbytes, span(x.ranks, x.stride, st.node),
                (x.calls_fwd * (1 + r) + x.calls_bwd) * st.layers * n_mb, windows[x.window],
                st.prof.overlap if x.window != "none" else 0.0)
        for x in cpx.exchanges(L.execution.cp_comm, L.cp, L.tp, kv, qo, st.node.gpus_per_node))


def ep_term(st: Stage) -> Term:
    """Expert parallel: dispatch and combine of the routed tokens per MoE layer, and with expert
    tensor parallelism the gather of the routed copies over etp (costs/moe.py)."""
    m, L, ex, n_mb = st.m, st.L, st.L.execution, st.n_mb
    if m.moe is None:
        return Term()
    g = L.expert_groups
    tokens, etp_gather = moe_tokens(st)
    if L.ep * etp_gather <= 1:
        return Term()
    # the expert folding (layout.expert_groups): etp innermost, so the ep group strides over etp
    # ranks; with etp = 1 it is contiguous and an ep group of up to a node's size stays on NVLink
    sp_ep = span(L.ep, g.ep_stride, st.node)
    # ep_comm_overlap (Megatron-Core's batch-level overlap): a micro-batch's all-to-alls run
    # beside another micro-batch's compute, so every micro-batch but one lends its whole compute
    ep_batch = ex.ep_comm_overlap and ex.moe_dispatcher != "allgather" and n_mb > 1
    terms = []
    # each routed copy of a token (top-k) travels out and back in bf16, as many as routing and a
    # capacity factor leave on the busiest rank (costs/moe.routed_load)
    load = moe_cost.layout_load(L)
    for x in moe_cost.dispatch_exchanges(m, ex.moe_dispatcher, load, tokens, L.ep,
                                         _moe_layers(st), (2 + st.r) * n_mb, st.prof.tp_overlap,
                                         sp_ep.domains, sp_ep.per_domain, etp_gather):
        sp_x = span(x.ranks, x.stride, st.node) if x.ranks else sp_ep
        window, hidden = ((st.mb.total * (n_mb - 1), st.prof.overlap) if ep_batch
                          else (st.gemm_window * n_mb, x.hidden))
        terms.append(_priced(st, x.op, "ep", x.nbytes, sp_x, x.calls, window, hidden))
    return _combine(terms)


def pp_term(st: Stage) -> Term:
    """Pipeline sends: activations forward, gradients backward, per micro-batch and chunk (the
    bubble is not a communication; steptime.py adds it)."""
    L = st.L
    if L.pp <= 1:
        return Term()
    sp_pp = span(L.pp, L.tp * L.cp * L.dp, st.node)
    act = st.tokens * st.m.hidden_size * 2 / (L.tp if L.sequence_parallel else 1)
    overlap = st.prof.overlap if L.execution.pp_p2p_overlap else 0.0
    return _priced(st, "p2p", "pp", act, sp_pp, 2 * st.n_mb * L.vp, st.mb.total * st.n_mb, overlap)


@functools.lru_cache(maxsize=256)
def _param_split(m: ModelSpec) -> tuple[float, float, float]:
    """(layer params excluding routed experts, routed expert params, embedding + head params)."""
    p = count_params(m)
    return float(p.total - p.experts - p.embedding - p.lm_head), float(p.experts), \
        float(max(p.embedding, p.lm_head))


def _gpu_params(m: ModelSpec, L: Layout) -> tuple[float, float]:
    """(dense, routed-expert) parameters one GPU of the fullest stage holds before sharding."""
    dense, experts, embed = _param_split(m)
    return (dense / L.pp + embed) / L.tp, experts / L.pp / L.expert_groups.weight_split


def shard_calls(L: Layout) -> tuple[int, int]:
    """(parameter all-gathers, gradient reduce-scatters) per step over the sharding group, as each
    framework runs its sharding (the memory model, costs/states.py, keeps the same tensors alive):

      zero1 (Megatron distributed optimizer): gradients reduce-scattered once per step after the
        last micro-batch, the updated bf16 weights all-gathered once (overlapped with the next
        step's forward when param_gather_overlap); Megatron-LM docs dist_optimizer.md.
      zero2: the weights stay whole, so they are all-gathered once per step after the optimizer;
        gradients are sharded, so each micro-batch's gradients are reduce-scattered into the shard
        (ZeRO, Rajbhandari et al. 2020 sec. 5.2; DeepSpeed stage 2 reduces every micro-step).
        A stack whose zero2 convention is fsdp2_no_reshard (stacks.toml; trainplan's trainer,
        runtime/parallel.py apply_fsdp) runs it as FSDP2 with reshard_after_forward=False: the
        weights are freed after each backward, so every micro-batch gathers them once, in forward,
        and reduce-scatters; under pipelining as fsdp with pp below.
      zero1 as trainplan's trainer runs it (DDP + ZeroRedundancyOptimizer) is not priced here: see
        the all-reduce and broadcast in dp_term.
      fsdp without pp (FSDP2, reshard_after_forward=True): every micro-batch gathers each unit in
        forward and again in backward and reduce-scatters its gradients (once per step when
        gradient sync waits for the last micro-batch, fsdp_sync_last_microbatch).
      fsdp with pp (torch.distributed.pipelining with torchtitan's reshard_after_forward=False for
        pp): the schedule turns resharding after backward and gradient sync off until its
        REDUCE_GRAD action after the last micro-batch (pipelining/stage.py
        backward_maybe_with_nosync, perform_reduce_grad): one all-gather and one reduce-scatter
        per step, the unsharded stage kept in between (states.py).
    """
    n_mb = L.grad_accum
    if L.sharding == "zero1":
        return 1, 1
    if L.sharding == "zero2":
        if L.conventions.zero2 == "fsdp2_no_reshard":
            return (1, 1) if L.pp > 1 else (n_mb, n_mb)
        return 1, n_mb
    if L.sharding == "fsdp":
        if L.pp > 1:
            return 1, 1
        return 2 * n_mb, 1 if L.conventions.grad_sync == "last_microbatch" else n_mb
    return 0, 0


def dp_term(st: Stage) -> Term:
    """Data parallel and sharding: weight gathers, gradient reduce-scatters and all-reduces, for
    the dense parameters over dp_shard * cp and the routed experts over the expert folding's
    edp_shard (layout.expert_groups)."""
    L, rec, node, n_mb = st.L, st.rec, st.node, st.n_mb
    ex = L.execution
    gather_overlap = st.prof.overlap if ex.param_gather_overlap else 0.0
    reduce_overlap = st.prof.overlap if ex.grad_reduce_overlap else 0.0
    p_dense, p_exp = _gpu_params(st.m, L)
    # the recipe's bytes per element: weights gathered in its low-precision format with
    # fp8_allgather (scales included), else the compute copy; gradients in the reduce dtype (the
    # Megatron-convention shardings reduce the compute-dtype buffer)
    pbytes = rec.low_precision.weight_bytes if L.fp8_allgather else rec.param_bytes
    gbytes = rec.param_bytes if L.sharding in ("zero1", "none") else rec.grad_bytes
    shard = L.dp_shard * L.cp
    g = L.expert_groups
    # (params, sharding group, its size, plain data parallel's all-reduce group)
    groups = [(p_dense, span(shard, L.tp, node), shard, span(L.dp_replicate * L.cp, L.tp, node))]
    if p_exp:
        groups.append((p_exp, span(g.edp_shard, g.edp_stride, node), g.edp_shard,
                       span(g.edp_shard * L.dp_replicate, g.edp_stride, node)))
    sp_rep = span(L.dp_replicate, L.tp * L.cp * L.dp_shard, node)
    ag_calls, rs_calls = shard_calls(L)
    # a collective issued once per step hides behind one micro-batch's pass, one per micro-batch
    # behind all of them
    ag_window = st.fwd if ag_calls == 1 else (st.fwd + st.bwd) * n_mb
    rs_window = st.bwd if rs_calls == 1 else st.bwd * n_mb
    terms = []
    for params, sp_sh, n_sh, full in groups:
        if L.sharding == "zero1" and L.conventions.zero1 == "zero_redundancy":
            # torch ZeRO-1 (runtime/parallel.apply_zero1): DDP all-reduces the gradients, in the
            # parameters' dtype, on every micro-batch over all data-parallel ranks; after the step
            # ZeroRedundancyOptimizer broadcasts each rank's updated shard (an all-gather's volume),
            # never overlapped (supports.py requires param_gather_overlap=false for it)
            wbytes = rec.master_bytes or rec.param_bytes
            dp_all = span(L.dp_replicate * L.dp_shard, L.tp * L.cp, node)
            terms.append(_priced(st, "all_reduce", "dp", params * wbytes, dp_all, n_mb, st.bwd * n_mb,
                                 reduce_overlap))
            terms.append(_priced(st, "all_gather", "fsdp", params * wbytes, sp_sh, 1, 0.0, 0.0))
        elif L.sharding != "none":
            terms.append(_priced(st, "all_gather", "fsdp", params * pbytes, sp_sh, ag_calls, ag_window,
                                 gather_overlap))
            terms.append(_priced(st, "reduce_scatter", "fsdp", params * gbytes, sp_sh, rs_calls, rs_window,
                                 reduce_overlap))
            terms.append(_priced(st, "all_reduce", "dp", params * gbytes / n_sh, sp_rep, 1, st.bwd,
                                 reduce_overlap))
        else:  # plain data parallel: one all-reduce over every replica (and cp rank)
            terms.append(_priced(st, "all_reduce", "dp", params * gbytes, full, 1, st.bwd, reduce_overlap))
    return _combine(terms)


def offload_term(st: Stage) -> Term:
    """Activation offload (ac="offload"): each layer's checkpointed input goes to host memory in
    forward and comes back in backward over the GPU's PCIe link (torch.autograd.graph.save_on_cpu
    with pin_memory on a side stream). The copy of one layer overlaps the compute of the next, so a
    micro-batch's copies hide behind its forward (to host) and backward (back) up to the profile's
    overlap fraction; what does not fit in that window is exposed."""
    L, n_mb = st.L, st.n_mb
    if L.ac != "offload":
        return Term()
    layer_in = st.tokens * st.m.hidden_size * 2 / (L.tp if L.sequence_parallel else 1)
    link = st.gpu.pcie_bandwidth * _PCIE_EFFICIENCY
    terms = []
    for op, window in (("d2h", st.fwd), ("h2d", st.bwd)):
        t = layer_in * st.layers * n_mb / link
        e = exposed(t, window * n_mb, st.prof.overlap)
        terms.append(Term(e, (CommEntry(op, "offload", "pcie", layer_in * st.layers * n_mb, t, e,
                                        int(st.layers * n_mb)),)))
    return _combine(terms)


def optimizer_time(st: Stage) -> float:
    """AdamW reads and writes its states once per step (memory-bound), before the stack's time
    factor."""
    L, rec = st.L, st.rec
    p_dense, p_exp = _gpu_params(st.m, L)
    shard = L.dp_shard * L.cp
    local = p_dense / (shard if L.sharding != "none" else 1) + p_exp / (
        L.expert_groups.edp_shard if L.sharding != "none" else 1)
    # the optimizer's weights (master copy, else the compute copy), gradient and m, v read; weights,
    # m, v written; with a master copy the compute copy is written too (bf16 mixed: 16 + 12 + 2 = 30)
    weights = rec.master_bytes or rec.param_bytes
    opt_bytes = 2 * weights + rec.grad_bytes + 4 * rec.optimizer_bytes + (rec.param_bytes if rec.master_bytes else 0)
    return local * opt_bytes / (st.gpu.hbm_bandwidth * st.prof.hbm_eff)


def fused_elementwise(L: Layout) -> bool:
    """Whether the layout's element-wise ops run as fused kernels: torch.compile, or a stack whose
    preset has TE/Apex fused kernels (stacks.toml fused_kernels). Read by the compute and launch terms."""
    return L.torch_compile or stack_preset(L.stack).fused_kernels


def launch_time(st: Stage) -> float:
    """Seconds the step waits on kernel launches (costs/launch.py): per micro-batch, what issuing
    the slowest stage's kernels takes beyond their GPU time; none under CUDA graphs."""
    L = st.L
    fused = fused_elementwise(L)
    tp_calls = 0 if L.tp <= 1 else round(2 * (2 if L.sequence_parallel else 1) * (2 + st.r))
    per_layer = launch.layer_kernels(fused, st.r, tp_calls)
    return st.n_mb * launch.exposed_launch(st.layers, per_layer, st.mb.total, L.execution.cuda_graphs)
