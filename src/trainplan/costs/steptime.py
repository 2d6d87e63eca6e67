"""Step time: compute of the slowest pipeline stage, exposed communication per parallel dimension,
the pipeline bubble and the optimizer step; and the communication ledger behind it.

Rank order (innermost first), as torchtitan's device mesh and Megatron's default 'tp-cp-ep-dp-pp'
lay them out: tp, cp, dp_shard, dp_replicate, pp. Expert parallelism is carved out of
dp_shard * cp next to tp (stride tp). A group's placement on nodes follows from its stride
(costs/comm.span).

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
Pipeline bubble (Narayanan et al. 2021 sec. 2.2): (pp - 1) / vp micro-batch times per step, for
1F1B and GPipe (the same bubble) and interleaved 1F1B with vp chunks per rank.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from trainplan.costs import context_parallel as cpx
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
from trainplan.costs.compute import MicrobatchCompute, microbatch_compute
from trainplan.costs.flops import model_flops, recompute_fraction
from trainplan.job import Job
from trainplan.layout import Layout
from trainplan.models.params import count_params
from trainplan.models.spec import ModelSpec
from trainplan.models.stages import stage_layers
from trainplan.precision import recipe
from trainplan.profile import Profile
from trainplan.stacks import conventions
from trainplan.stacks import stack as stack_preset


@dataclass(frozen=True, slots=True)
class StepTime:
    """Seconds per optimizer step, by cause. The fields before `total` partition it exactly:
    total = compute + recompute + dp + tp + pp + cp + ep + bubble + optimizer + nongemm + overhead
    + offload."""

    compute: float  # GEMMs and attention of all micro-batches (slowest stage), no recompute
    recompute: float  # activation-checkpointing re-runs
    dp: float  # exposed data-parallel / FSDP / ZeRO communication
    tp: float
    pp: float  # exposed pipeline sends (the bubble is separate)
    cp: float
    ep: float
    bubble: float
    optimizer: float
    nongemm: float  # element-wise work (norms, activations, RoPE, loss, fp8 casts), no recompute
    overhead: float  # fixed per-step overhead from the profile
    total: float
    offload: float = 0.0  # exposed host<->GPU copies of offloaded activations (ac="offload")

    @property
    def exposed_comm(self) -> float:
        return self.dp + self.tp + self.pp + self.cp + self.ep

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__slots__}


@dataclass(frozen=True, slots=True)
class StepResult:
    time: StepTime
    comm: tuple[CommEntry, ...]
    model_flops: float  # per step, whole cluster, no recompute
    hardware_flops: float  # per step, whole cluster, with recompute
    microbatch: MicrobatchCompute
    outside: tuple[str, ...] = ()  # machine-profile lookups beyond a table's range (its edge was used)


# Pinned host<->device copies reach ~80% of the PCIe link's per-direction rate (NVIDIA nvbandwidth
# host_to_device/device_to_host on Gen5 x16 systems report ~50-55 of 64 GB/s; an assumption until a
# lent GPU measures it with bench/gpu_check.py).
_PCIE_EFFICIENCY = 0.8


def exposed(c: float, window: float, overlap: float) -> float:
    return max(c - window, c * (1.0 - overlap)) if c > 0 else 0.0


@functools.lru_cache(maxsize=256)
def _param_split(m: ModelSpec) -> tuple[float, float, float]:
    """(layer params excluding routed experts, routed expert params, embedding + head params)."""
    p = count_params(m)
    return float(p.total - p.experts - p.embedding - p.lm_head), float(p.experts), \
        float(max(p.embedding, p.lm_head))


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
        the all-reduce and broadcast in step_time.
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
        if conventions(L).zero2 == "fsdp2_no_reshard":
            return (1, 1) if L.pp > 1 else (n_mb, n_mb)
        return 1, n_mb
    if L.sharding == "fsdp":
        if L.pp > 1:
            return 1, 1
        return 2 * n_mb, 1 if conventions(L).grad_sync == "last_microbatch" else n_mb
    return 0, 0


def _stage_counts(num_layers: int, L: Layout) -> tuple[int, int]:
    """(layers on the fullest stage but the last, layers on the last stage); pp = 1: (all, all)."""
    stages = stage_layers(num_layers, L.pp, L.vp, L.uneven)
    if L.pp == 1:
        return num_layers, num_layers
    return max(len(x) for x in stages[:-1]), len(stages[-1])


def step_time(job: Job, L: Layout, prof: Profile) -> StepResult:
    m, c, w = job.model, job.cluster, job.workload
    node, gpu = c.node, c.gpu
    rec = recipe(L.precision)
    mf = model_flops(m)
    s = w.seq_len
    tokens = L.micro_batch * s / L.cp  # tokens of one micro-batch on one GPU
    st, ex = stack_preset(L.stack), L.execution

    def stage_compute(layers: int, head: bool) -> tuple[MicrobatchCompute, float]:
        r = recompute_fraction(L.ac, L.ac_layers, layers) if layers else 0.0
        return microbatch_compute(
            m, mf, gpu, prof, recipe=rec, tokens=tokens, seq_len=s, tp=L.tp, ep=L.ep,
            layers_on_stage=layers, head_on_stage=head, recompute_frac=r,
            selective=L.ac == "selective", flash=L.flash_attention,
            fused=L.torch_compile or st.fused_kernels, compiled_loss=L.loss_kind == "fused",
            te_attention=st.fused_kernels, family=st.recompute_family,
            moe_imbalance=ex.moe_imbalance if L.ep > 1 else 1.0,
        ), r

    # The slowest pipeline stage sets the pace (and the bubble): the fullest stage without the head,
    # or the last stage with its layers and the head (models/stages.py decides the counts).
    layers_stage, head_only = _stage_counts(m.num_layers, L)
    (mb, r) = stage_compute(layers_stage, L.pp == 1)
    if L.pp > 1:
        last, rl = stage_compute(head_only, True)
        if last.total > mb.total:
            mb, r, layers_stage = last, rl, head_only
    n_mb = L.grad_accum
    fwd, bwd = mb.forward, mb.total - mb.forward
    # What the stack overlaps (module doc): an overlap that is off hides nothing.
    tp_overlap = prof.tp_overlap if ex.tp_comm_overlap else 0.0
    gather_overlap = prof.overlap if ex.param_gather_overlap else 0.0
    reduce_overlap = prof.overlap if ex.grad_reduce_overlap else 0.0
    pp_overlap = prof.overlap if ex.pp_p2p_overlap else 0.0
    gemm_window = mb.gemm / 3.0
    entries: list[CommEntry] = []
    mach = prof.machine_for(gpu.name)
    notes: set[str] = set(mb.outside)

    def add(op, dim, nbytes, sp: Span, calls, window, overlap):
        if sp.n <= 1 or nbytes <= 0 or calls <= 0:
            return 0.0
        got = measured_time(op, nbytes, sp, node, mach)
        if got is None:
            t1 = collective_time(op, nbytes, sp, node)
        else:
            t1, more = got
            notes.update(more)
        t = t1 * calls
        e = exposed(t, window, overlap)
        entries.append(CommEntry(op, dim, tier_name(sp, node), bytes_on_wire(op, nbytes, sp.n) * calls,
                                 t, e, int(calls), network_bytes(op, nbytes, sp) * calls))
        return e

    # --- tensor parallel (per layer, per micro-batch) --------------------------------------
    tp_exp = 0.0
    if L.tp > 1:
        sp_tp = span(L.tp, 1, node)
        act = tokens * m.hidden_size * 2  # bf16 activation of the full (gathered) sequence
        passes = 2 + r  # forward + backward + recomputed forward
        calls = 2 * layers_stage * passes * n_mb
        if L.sequence_parallel:
            tp_exp += add("all_gather", "tp", act, sp_tp, calls, gemm_window * n_mb, tp_overlap)
            tp_exp += add("reduce_scatter", "tp", act, sp_tp, calls, gemm_window * n_mb, tp_overlap)
        else:
            tp_exp += add("all_reduce", "tp", act, sp_tp, calls, gemm_window * n_mb, tp_overlap)

    # --- context parallel: the exchange cp_comm names (costs/context_parallel.py) --------------------
    cp_exp = 0.0
    if L.cp > 1:
        kv, qo = cpx.kv_qo_bytes(m, tokens, L.tp)
        windows = {"attention": mb.attention / 3 * (3 + r) * n_mb, "local": mb.attention / 3 * (3 + r) * n_mb / L.cp,
                   "none": 0.0}
        for x in cpx.exchanges(ex.cp_comm, L.cp, L.tp, kv, qo, node.gpus_per_node):
            calls = (x.calls_fwd * (1 + r) + x.calls_bwd) * layers_stage * n_mb
            cp_exp += add(x.op, "cp", x.nbytes, span(x.ranks, x.stride, node), calls, windows[x.window],
                          prof.overlap if x.window != "none" else 0.0)

    # --- expert parallel: dispatch and combine all-to-alls per MoE layer --------------------------
    ep_exp = 0.0
    if L.ep > 1 and m.moe is not None:
        # Megatron-Core "parallel folding" (and torchtitan with etp=1) forms expert groups from
        # contiguous ranks, so an EP group of up to a node's size stays on NVLink.
        sp_ep = span(L.ep, 1, node)
        moe_layers = m.num_moe_layers * layers_stage / m.num_layers
        # each routed copy of a token (top-k) travels out and back in bf16; with sequence parallel
        # the tokens of a micro-batch are split over the tp ranks before dispatch
        sp_div = L.tp if L.sequence_parallel else 1
        # ep_comm_overlap (Megatron-Core's batch-level overlap): a micro-batch's all-to-alls run
        # beside another micro-batch's compute, so every micro-batch but one lends its whole compute
        ep_batch = ex.ep_comm_overlap and ex.moe_dispatcher != "allgather" and n_mb > 1
        for x in moe_cost.dispatch_exchanges(m, ex.moe_dispatcher, ex.moe_imbalance, tokens / sp_div, L.ep,
                                             moe_layers, (2 + r) * n_mb, prof.tp_overlap,
                                             sp_ep.domains, sp_ep.per_domain):
            sp_x = span(x.ranks, x.stride, node) if x.ranks else sp_ep
            window, hidden = ((mb.total * (n_mb - 1), prof.overlap) if ep_batch
                              else (gemm_window * n_mb, x.hidden))
            ep_exp += add(x.op, "ep", x.nbytes, sp_x, x.calls, window, hidden)

    # --- pipeline: activations forward, gradients backward, per micro-batch and chunk ------------
    pp_exp = 0.0
    if L.pp > 1:
        sp_pp = span(L.pp, L.tp * L.cp * L.dp, node)
        act = tokens * m.hidden_size * 2 / (L.tp if L.sequence_parallel else 1)
        calls = 2 * n_mb * L.vp
        pp_exp += add("p2p", "pp", act, sp_pp, calls, mb.total * n_mb, pp_overlap)

    # --- data parallel / sharding --------------------------------------------------------------
    dense, experts, embed = _param_split(m)
    p_dense = (dense / L.pp + embed) / L.tp
    p_exp = experts / L.pp / (L.ep * L.tp)
    # the recipe's bytes per element: weights gathered in its low-precision format with
    # fp8_allgather (scales included), else the compute copy; gradients in the reduce dtype (the
    # Megatron-convention shardings reduce the compute-dtype buffer)
    pbytes = rec.low_precision.weight_bytes if L.fp8_allgather else rec.param_bytes
    gbytes = rec.param_bytes if L.sharding in ("zero1", "none") else rec.grad_bytes
    dp_exp = 0.0
    shard = L.dp_shard * L.cp
    groups = [(p_dense, span(shard, L.tp, node), shard)]
    if p_exp:
        groups.append((p_exp, span(max(1, shard // L.ep), L.tp * L.ep, node), max(1, shard // L.ep)))
    sp_rep = span(L.dp_replicate, L.tp * L.cp * L.dp_shard, node)
    ag_calls, rs_calls = shard_calls(L)
    # a collective issued once per step hides behind one micro-batch's pass, one per micro-batch
    # behind all of them
    ag_window = fwd if ag_calls == 1 else (fwd + bwd) * n_mb
    rs_window = bwd if rs_calls == 1 else bwd * n_mb
    for params, sp_sh, n_sh in groups:
        if L.sharding == "zero1" and conventions(L).zero1 == "zero_redundancy":
            # torch ZeRO-1 (runtime/parallel.apply_zero1): DDP all-reduces the gradients, in the
            # parameters' dtype, on every micro-batch over all data-parallel ranks; after the step
            # ZeroRedundancyOptimizer broadcasts each rank's updated shard (an all-gather's volume),
            # never overlapped (supports.py requires param_gather_overlap=false for it)
            wbytes = rec.master_bytes or rec.param_bytes
            dp_all = span(L.dp_replicate * L.dp_shard, L.tp * L.cp, node)
            dp_exp += add("all_reduce", "dp", params * wbytes, dp_all, n_mb, bwd * n_mb, reduce_overlap)
            dp_exp += add("all_gather", "fsdp", params * wbytes, sp_sh, 1, 0.0, 0.0)
        elif L.sharding != "none":
            dp_exp += add("all_gather", "fsdp", params * pbytes, sp_sh, ag_calls, ag_window, gather_overlap)
            dp_exp += add("reduce_scatter", "fsdp", params * gbytes, sp_sh, rs_calls, rs_window, reduce_overlap)
            dp_exp += add("all_reduce", "dp", params * gbytes / n_sh, sp_rep, 1, bwd, reduce_overlap)
        else:  # plain data parallel: one all-reduce over every replica (and cp rank)
            full = span(L.dp_replicate * L.cp, L.tp, node)
            dp_exp += add("all_reduce", "dp", params * gbytes, full, 1, bwd, reduce_overlap)

    # --- activation offload: each layer's checkpointed input goes to host memory in forward and
    # comes back in backward over the GPU's PCIe link (torch.autograd.graph.save_on_cpu with
    # pin_memory on a side stream). The copy of one layer overlaps the compute of the next, so a
    # micro-batch's copies hide behind its forward (to host) and backward (back) up to the
    # profile's overlap fraction; what does not fit in that window is exposed.
    off_exp = 0.0
    if L.ac == "offload":
        layer_in = tokens * m.hidden_size * 2 / (L.tp if L.sequence_parallel else 1)
        link = gpu.pcie_bandwidth * _PCIE_EFFICIENCY
        for op, window in (("d2h", fwd), ("h2d", bwd)):
            t = layer_in * layers_stage * n_mb / link
            e = exposed(t, window * n_mb, prof.overlap)
            entries.append(CommEntry(op, "offload", "pcie", layer_in * layers_stage * n_mb, t, e,
                                     int(layers_stage * n_mb)))
            off_exp += e

    # --- optimizer: AdamW reads and writes its states once per step (memory-bound) --------------
    local = p_dense / (shard if L.sharding != "none" else 1) + p_exp / (
        max(1, shard // L.ep) if L.sharding != "none" else 1)
    # the optimizer's weights (master copy, else the compute copy), gradient and m, v read; weights,
    # m, v written; with a master copy the compute copy is written too (bf16 mixed: 16 + 12 + 2 = 30)
    weights = rec.master_bytes or rec.param_bytes
    opt_bytes = 2 * weights + rec.grad_bytes + 4 * rec.optimizer_bytes + (rec.param_bytes if rec.master_bytes else 0)
    optimizer = local * opt_bytes / (gpu.hbm_bandwidth * prof.hbm_eff)

    per_mb_exposed = tp_exp / n_mb + cp_exp / n_mb + ep_exp / n_mb
    bubble = (L.pp - 1) / L.vp * (mb.total + per_mb_exposed) if L.pp > 1 else 0.0
    compute = (mb.gemm + mb.attention) * n_mb
    nongemm = mb.nongemm * n_mb
    recompute = mb.recompute * n_mb
    # A framework's kernels run slower or faster than the model's rates (trainplan/profile.py):
    # the factor scales the compute-side terms; the communication ledger stays as computed.
    f = prof.time_factor(L.stack)
    compute, nongemm, recompute, bubble, optimizer = (x * f for x in (compute, nongemm, recompute, bubble, optimizer))
    total = compute + recompute + dp_exp + tp_exp + pp_exp + cp_exp + ep_exp + bubble + optimizer \
        + nongemm + prof.step_overhead_s + off_exp
    t = StepTime(compute, recompute, dp_exp, tp_exp, pp_exp, cp_exp, ep_exp, bubble, optimizer,
                 nongemm, prof.step_overhead_s, total, off_exp)
    tokens_step = w.tokens_per_step
    model = tokens_step * mf.model_per_token(s)
    hw = model * mb.hardware_flops / mb.model_flops if mb.model_flops else model
    return StepResult(t, tuple(entries), model, hw, mb, tuple(sorted(notes)))
