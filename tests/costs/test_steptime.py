"""Step time (costs/steptime.py): breakdown identities, bubble, ledger, and Korthikanti et al. Table 4."""

from dataclasses import replace

import pytest

from trainplan.costs.steptime import exposed, step_time
from trainplan.hardware import Cluster, find_node
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.models import resolve
from trainplan.profile import Profile, default_profile
from trainplan.validation.dataset import model_spec

PRIOR = Profile()


def job(model="llama-3.1-8b", instance="ml.p5.48xlarge", nodes=1, seq=4096, gb=8):
    return Job(resolve(model), Cluster(find_node(instance), nodes), Workload(seq, gb))


@pytest.mark.parametrize("ac", ["none", "full", "offload"])
def test_total_is_the_sum_of_its_parts(ac):
    t = step_time(job(nodes=2, gb=16), Layout(dp_shard=8, tp=2, grad_accum=1, micro_batch=2, ac=ac), PRIOR).time
    fields = [k for k in t.__slots__ if k != "total"]
    assert t.total == pytest.approx(sum(getattr(t, k) for k in fields), rel=1e-12)
    assert 0 < t.nongemm < t.compute


def test_activation_offload_pays_for_its_pcie_copies():
    # ac="offload" recomputes like "full" and also moves each layer's input to host and back
    # over PCIe; the copies are in the ledger and what compute does not hide is exposed.
    j, base = job(seq=8192, gb=8), Layout(dp_shard=8, micro_batch=1, ac="full")
    full, off = step_time(j, base, PRIOR), step_time(j, base.with_(ac="offload"), PRIOR)
    copies = [c for c in off.comm if c.dimension == "offload"]
    assert {c.collective for c in copies} == {"d2h", "h2d"} and {c.tier for c in copies} == {"pcie"}
    layer_input = 8192 * j.model.hidden_size * 2
    assert all(c.bytes == layer_input * j.model.num_layers for c in copies)
    assert off.time.offload == pytest.approx(sum(c.exposed_seconds for c in copies))
    assert off.time.total == pytest.approx(full.time.total + off.time.offload, rel=1e-12)
    assert full.time.offload == 0
    # no overlap at all: every copy is exposed
    none = step_time(j, base.with_(ac="offload"), replace(PRIOR, overlap=0.0))
    assert none.time.offload == pytest.approx(sum(c.seconds for c in copies))


def test_exposed_never_exceeds_the_collective_and_hides_behind_long_compute():
    assert exposed(1.0, 10.0, 0.8) == pytest.approx(0.2)
    assert exposed(1.0, 0.5, 0.8) == pytest.approx(0.5)
    r = step_time(job(nodes=2, gb=16), Layout(dp_shard=16, micro_batch=1), PRIOR)
    assert r.comm and all(0 <= c.exposed_seconds <= c.seconds for c in r.comm)
    assert {c.tier for c in r.comm} == {"efa"}  # a 16-way FSDP group spans two p5 nodes


# Narayanan et al. 2021 sec. 2.2: bubble fraction (p-1)/m for 1F1B, divided by v when interleaved.
def test_pipeline_bubble_per_schedule():
    j = job("llama-3.1-70b", nodes=2, gb=32)
    base = Layout(tp=8, pp=2, grad_accum=32, sharding="none", dp_replicate=1)
    r1 = step_time(j, base, PRIOR)
    per_mb = r1.microbatch.total
    assert r1.time.bubble == pytest.approx(1 / 1 * (per_mb + (r1.time.tp + r1.time.cp + r1.time.ep) / 32))
    r2 = step_time(j, base.with_(pp_schedule="interleaved", vp=4), PRIOR)
    assert r2.time.bubble == pytest.approx(r1.time.bubble / 4)


def test_fsdp_gathers_every_microbatch_zero1_once_per_step():
    j = job(gb=32)
    f1 = step_time(j, Layout(dp_shard=8, grad_accum=1, micro_batch=4), PRIOR)
    f4 = step_time(j, Layout(dp_shard=8, grad_accum=4, micro_batch=1), PRIOR)
    z4 = step_time(j, Layout(dp_shard=8, grad_accum=4, micro_batch=1, sharding="zero1"), PRIOR)
    ag = lambda r: sum(c.count for c in r.comm if c.collective == "all_gather")
    assert (ag(f1), ag(f4), ag(z4)) == (2, 8, 1)


def test_tensor_parallel_traffic_is_exposed_without_overlap():
    r = step_time(job(), Layout(tp=8, micro_batch=8, grad_accum=1), PRIOR)
    tp = [c for c in r.comm if c.dimension == "tp"]
    assert {c.collective for c in tp} == {"all_gather", "reduce_scatter"}
    assert r.time.tp == pytest.approx(sum(c.seconds for c in tp))


def test_expert_all_to_all_only_for_moe():
    moe = step_time(job("mixtral-8x7b", gb=8), Layout(dp_shard=8, ep=8), PRIOR)
    assert any(c.dimension == "ep" and c.collective == "all_to_all" for c in moe.comm)
    dense = step_time(job(gb=8), Layout(dp_shard=8), PRIOR)
    assert not any(c.dimension == "ep" for c in dense.comm)


def test_full_recompute_costs_one_layer_forward_in_megatron_less_the_down_projection_in_pytorch():
    # flops.py steps 9-10: Megatron's checkpoint re-runs the whole layer forward; torch's
    # non-reentrant checkpoint stops before the MLP down projection (llama-3.1-8b: w2 is 27% of a
    # layer's matmul FLOPs, 4096 x 14336 of 4096 x 53248 weights)
    j = job(gb=8)
    times = {}
    for fw in ("torchtitan", "megatron"):
        none = step_time(j, Layout(dp_shard=8, stack=fw), PRIOR).time
        full = step_time(j, Layout(dp_shard=8, ac="full", stack=fw), PRIOR).time
        times[fw] = full.recompute / (none.compute / 3)
    assert times["megatron"] == pytest.approx(1.0, rel=0.15)
    assert times["torchtitan"] < times["megatron"] * 0.85


# Korthikanti et al. 2022 (arXiv:2205.05198) Table 4: forward / backward / combined ms per
# transformer layer of the 22B GPT (h=6144, 64 heads, s=2048, micro-batch 4, TP=8, DGX A100):
#   baseline, no recompute           7.7 / 11.9 / 19.6
#   sequence parallelism             7.2 / 11.8 / 19.0
#   baseline with full recompute     7.7 / 19.5 / 27.2  (39% overhead)
#   selective recompute              7.7 / 13.2 / 20.9  (7%)
#   selective + sequence parallelism 7.2 / 13.1 / 20.3  (4%)
# Confirmed from a stored source: only the paper's abstract (ar5iv.labs.arxiv.org/html/2205.05198:
# recompute overhead reduced "by over 90%", consistent with 39% -> 4%). The per-row numbers are the
# lead's reading of Table 4 and could not be checked against a stored copy of the table (an earlier
# version of this test held 19.6 / 27.2 / 19.9 / 19.4 from memory; the rows above replace it).
# Predicted with the packaged profile's global coefficients (fitted on the dev file, which holds
# Korthikanti's end-to-end step times on A100 but not these per-layer times), Megatron's fused
# kernels and TE-class attention, without the Megatron step-time factor (fitted on today's Megatron
# recipes, not 2022's) and without TP comm overlap (see below). Per layer = the
# difference between the 48-layer model and a 24-layer one, so the LM head, loss and optimizer cancel.
KORTHIKANTI_22B = {"hidden_size": 6144, "num_layers": 48, "num_attention_heads": 64, "num_kv_heads": 64,
                   "ffn_hidden_size": 24576, "vocab_size": 51200, "mlp": "gelu", "family": "gpt",
                   "name": "GPT 22B", "arch_extra": {"position_embedding": "learned"}}
# The sequence-parallel row is an expected failure since the packaged profile keeps only the
# coefficients the time split supports (issue 23; calibration/support.py pinned hbm_eff and d_half
# at their priors): the model prices sequence parallelism no faster than none (21.2 vs 21.1 ms per
# layer, Table 4: 19.0 vs 19.6), 11% over (the fitted hbm_eff and d_half gave 20.5). A term to derive
# (issue 23 item 3), not a coefficient to fit back; strict, so the fix removes this mark.
_SP_GAP = pytest.mark.xfail(strict=True, reason="sequence parallel priced no faster than none (issue 23)")
TABLE4 = [("none", False, 7.7, 19.6), pytest.param("none", True, 7.2, 19.0, marks=_SP_GAP), ("full", False, 7.7, 27.2),
          ("selective", False, 7.7, 20.9), ("selective", True, 7.2, 20.3)]


def _per_layer_ms(ac, sp):
    out = []
    for layers in (48, 24):
        m = model_spec({**KORTHIKANTI_22B, "num_layers": layers}, 2048)
        j = Job(m, Cluster(find_node("dgx-a100-80gb"), 1), Workload(2048, 4))
        # Megatron of 2022 had no TP comm-GEMM overlap (Transformer Engine's userbuffers overlap
        # came in 2023), so the fitted tp_overlap, learned on today's recipes, is switched off
        prof = replace(default_profile(), framework_time={})
        r = step_time(j, Layout(tp=8, micro_batch=4, ac=ac, sequence_parallel=sp, sharding="none", stack="megatron"), prof)
        tp_fwd = sum(c.exposed_seconds for c in r.comm if c.dimension == "tp") / (3 if ac == "full" else 2)
        out.append((r.microbatch.forward * prof.time_factor("megatron") + tp_fwd, r.time.total))
    (f48, t48), (f24, t24) = out
    return (f48 - f24) / 24 * 1e3, (t48 - t24) / 24 * 1e3


@pytest.mark.parametrize("ac,sp,fwd_ms,ms", TABLE4)
def test_korthikanti_table4_per_layer_time(ac, sp, fwd_ms, ms):
    fwd, total = _per_layer_ms(ac, sp)
    assert total == pytest.approx(ms, rel=0.10)
    # the model's backward is 2x its forward (flops.py step 7); Table 4's is ~1.55x (7.7 vs 11.9 ms):
    # Megatron's backward GEMMs run closer to peak than its forward, so the forward comes out ~15% low
    assert fwd == pytest.approx(fwd_ms, rel=0.20)


def test_korthikanti_table4_recompute_overheads():
    # the ordering and size of the overheads in Table 4: full >> selective > selective + SP
    base = _per_layer_ms("none", False)[1]
    full, sel = _per_layer_ms("full", False)[1] / base - 1, _per_layer_ms("selective", False)[1] / base - 1
    assert 0.25 < full < 0.5 and 0.0 < sel < 0.12


def test_materialised_attention_is_slower_than_flash():
    j = job(seq=8192)
    flash = step_time(j, Layout(dp_shard=8), PRIOR).time
    eager = step_time(j, Layout(dp_shard=8, flash_attention=False), PRIOR).time
    assert eager.nongemm > flash.nongemm and eager.total > flash.total


def test_trainplan_zero1_all_reduces_every_microbatch_and_broadcasts_after_the_step():
    # DDP all-reduces fp32 gradients on each micro-batch; ZeroRedundancyOptimizer broadcasts the
    # updated fp32 shards once (an all-gather's volume, exposed); Megatron's distributed optimizer
    # reduce-scatters once per step instead.
    j = job(gb=32)
    L = Layout(dp_shard=8, grad_accum=4, micro_batch=1, sharding="zero1")
    torch_z1 = {c.collective: c for c in step_time(j, L, PRIOR).comm if c.dimension in ("dp", "fsdp")}
    assert torch_z1["all_reduce"].count == 4 and torch_z1["all_gather"].count == 1
    assert torch_z1["all_gather"].exposed_seconds == pytest.approx(torch_z1["all_gather"].seconds)
    mg = step_time(j, L.with_stack("megatron"), PRIOR).comm
    assert {c.collective: c.count for c in mg if c.dimension == "fsdp"} == {"reduce_scatter": 1, "all_gather": 1}
    # the fp32 parameters are broadcast (4 bytes), Megatron all-gathers bf16 ones (2 bytes)
    assert torch_z1["all_gather"].bytes == pytest.approx(2 * next(c.bytes for c in mg if c.collective == "all_gather"))
