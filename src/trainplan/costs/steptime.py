"""Step time: compute of the slowest pipeline stage, exposed communication per parallel dimension,
the pipeline bubble and the optimizer step; and the communication ledger behind it.

Rank order (innermost first), as torchtitan's device mesh and Megatron's default 'tp-cp-ep-dp-pp'
lay them out: tp, cp, dp_shard, dp_replicate, pp. Expert parallelism is carved out of
dp_shard * cp next to tp (stride tp). A group's placement on nodes follows from its stride
(costs/comm.span).

step_time finds the slowest stage (`slowest_stage`), then composes the terms of costs/step_terms.py
in this order, which is also the ledger's: tensor parallel, context parallel, expert parallel,
pipeline sends, data parallel / sharding, activation offload; then the optimizer step, the bubble
(it carries the per-micro-batch exposed tp, cp and ep communication), the stack's time factor
on the compute-side terms, and the kernel launches the GPU waits for (costs/launch.py; none under
cuda_graphs). How each term overlaps with compute: costs/step_terms.py.
Pipeline bubble (Narayanan et al. 2021 sec. 2.2): (pp - 1) / vp micro-batch times per step, for
1F1B and GPipe (the same bubble) and interleaved 1F1B with vp chunks per rank.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainplan.costs import moe as moe_cost
from trainplan.costs import step_terms as terms
from trainplan.costs.comm import CommEntry
from trainplan.costs.compute import MicrobatchCompute, microbatch_compute
from trainplan.costs.flops import model_flops, recompute_fraction, stage_flops
from trainplan.costs.step_terms import exposed, shard_calls
from trainplan.job import Job
from trainplan.layout import Layout
from trainplan.models.layers import kind_counts, moe_flags
from trainplan.models.stages import stage_layers
from trainplan.profile import Profile
from trainplan.stacks import stack as stack_preset

__all__ = ["StepResult", "StepTime", "exposed", "shard_calls", "slowest_stage", "step_time"]


@dataclass(frozen=True, slots=True)
class StepTime:
    """Seconds per optimizer step, by cause. The fields before `total` partition it exactly:
    total = compute + recompute + dp + tp + pp + cp + ep + bubble + optimizer + nongemm + overhead
    + offload + launch."""

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
    launch: float = 0.0  # kernel launches the GPU waits for (costs/launch.py); none under cuda_graphs

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

    @property
    def derived(self) -> tuple[str, ...]:
        """GEMMs priced as the compute dtype's measured rows x a cited ratio (costs/measured.py)."""
        return self.microbatch.derived


def _stage_counts(num_layers: int, L: Layout) -> tuple[int, int]:
    """(layers on the fullest stage but the last, layers on the last stage); pp = 1: (all, all)."""
    stages = stage_layers(num_layers, L.pp, L.vp, L.uneven)
    if L.pp == 1:
        return num_layers, num_layers
    return max(len(x) for x in stages[:-1]), len(stages[-1])


def slowest_stage(job: Job, L: Layout, prof: Profile) -> terms.Stage:
    """The pipeline stage that sets the pace (and the bubble): the fullest stage without the head,
    or the last stage with its layers and the head (models/stages.py decides the counts)."""
    m, c, w = job.model, job.cluster, job.workload
    gpu = c.gpu
    rec = L.recipe
    mf = model_flops(m)
    s = w.seq_len
    tokens = L.micro_batch * s / L.cp  # tokens of one micro-batch on one GPU
    st = stack_preset(L.stack)

    def stage_compute(layers: int, head: bool, mf=mf) -> tuple[MicrobatchCompute, float]:
        r = recompute_fraction(L.ac, L.ac_layers, layers) if layers else 0.0
        return microbatch_compute(
            m, mf, gpu, prof, recipe=rec, tokens=tokens, seq_len=s, tp=L.tp, ep=L.ep, etp=L.expert_groups.etp,
            layers_on_stage=layers, head_on_stage=head, recompute_frac=r,
            selective=L.ac == "selective", flash=L.flash_attention,
            fused=terms.fused_elementwise(L), compiled_loss=L.loss_kind == "fused",
            te_attention=st.fused_kernels, family=st.recompute_family,
            moe_load=moe_cost.layout_load(L), lowp_experts=L.conventions.lowp_experts,
        ), r

    if L.pp > 1 and len(kind_counts(m)) > 1:
        # layers that differ: each stage costs the sum of its own layers (flops.stage_flops); the
        # slowest one sets the pace. Stages holding the same kinds cost the same (memoised).
        best = None
        for i, held in enumerate(stage_layers(m.num_layers, L.pp, L.vp, L.uneven)):
            got = stage_compute(len(held), i == L.pp - 1, stage_flops(m, held) if held else mf)
            if best is None or got[0].total > best[0].total:
                best = (*got, held)
        mb, r, held = best
        moe = sum(moe_flags(m)[j] for j in held)  # the all-to-all runs on these layers only
        return terms.Stage(m, L, prof, rec, c.node, gpu, prof.machine_for(gpu.name), mb, r, len(held), tokens, moe)
    # one layer kind: a stage's layers are its share of the model's (bit for bit the numbers of before)
    layers_stage, head_only = _stage_counts(m.num_layers, L)
    (mb, r) = stage_compute(layers_stage, L.pp == 1)
    if L.pp > 1:
        last, rl = stage_compute(head_only, True)
        if last.total > mb.total:
            mb, r, layers_stage = last, rl, head_only
    return terms.Stage(m, L, prof, rec, c.node, gpu, prof.machine_for(gpu.name), mb, r, layers_stage, tokens)


def step_time(job: Job, L: Layout, prof: Profile) -> StepResult:
    """The step's breakdown (StepTime) and ledger, composed in the module doc's order."""
    stage = slowest_stage(job, L, prof)
    mb, n_mb = stage.mb, stage.n_mb
    tp, cp, ep = terms.tp_term(stage), terms.cp_term(stage), terms.ep_term(stage)
    pp, dp, off = terms.pp_term(stage), terms.dp_term(stage), terms.offload_term(stage)
    optimizer = terms.optimizer_time(stage)
    per_mb_exposed = tp.exposed / n_mb + cp.exposed / n_mb + ep.exposed / n_mb
    bubble = (L.pp - 1) / L.vp * (mb.total + per_mb_exposed) if L.pp > 1 else 0.0
    compute = (mb.gemm + mb.attention) * n_mb
    nongemm = mb.nongemm * n_mb
    recompute = mb.recompute * n_mb
    # A framework's kernels run slower or faster than the model's rates (trainplan/profile.py):
    # the factor scales the compute-side terms; the communication ledger stays as computed.
    f = prof.time_factor(L.stack)
    compute, nongemm, recompute, bubble, optimizer = (x * f for x in (compute, nongemm, recompute, bubble, optimizer))
    # host time issuing kernels beyond their GPU time; the stack's factor does not apply (it is no kernel)
    launch = terms.launch_time(stage)
    total = compute + recompute + dp.exposed + tp.exposed + pp.exposed + cp.exposed + ep.exposed + bubble \
        + optimizer + nongemm + prof.step_overhead_s + off.exposed + launch
    t = StepTime(compute, recompute, dp.exposed, tp.exposed, pp.exposed, cp.exposed, ep.exposed, bubble,
                 optimizer, nongemm, prof.step_overhead_s, total, off.exposed, launch)
    ledger = (tp, cp, ep, pp, dp, off)
    entries = tuple(e for term in ledger for e in term.entries)
    notes = set(mb.outside).union(*(term.outside for term in ledger))
    model = job.workload.tokens_per_step * model_flops(job.model).model_per_token(job.workload.seq_len)
    hw = model * mb.hardware_flops / mb.model_flops if mb.model_flops else model
    return StepResult(t, entries, model, hw, mb, tuple(sorted(notes)))
