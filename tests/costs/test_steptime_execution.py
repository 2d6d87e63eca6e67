"""Step time reads the layout's execution settings: an overlap that is off hides nothing, the MoE
dispatcher and the CP exchange are priced as what they run, the recompute family is the stack's."""

from dataclasses import replace

import pytest

from trainplan.costs.steptime import step_time
from trainplan.hardware import cluster
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.models import resolve
from trainplan.profile import Profile

# overlap fractions of 1: whatever is allowed to hide, hides as far as its window reaches
PROF = Profile(overlap=1.0, tp_overlap=1.0)


def job(model="llama-3.1-70b", nodes=1, seq=8192, gb=8, instance="ml.p5.48xlarge"):
    return Job(resolve(model), cluster(instance, nodes), Workload(seq, gb))


def ledger(r, dim):
    return [c for c in r.comm if c.dimension == dim]


def test_tp_communication_overlapped_only_when_the_setting_says_so():
    j, L = job(gb=1), Layout(tp=8, dp_shard=1)
    off = step_time(j, L.with_stack("megatron", tp_comm_overlap=False), PROF)
    on = step_time(j, L.with_stack("megatron", tp_comm_overlap=True), PROF)
    assert off.time.tp == pytest.approx(sum(c.seconds for c in ledger(off, "tp")))  # all exposed
    assert on.time.tp < 0.2 * off.time.tp
    assert off.time.total - on.time.total == pytest.approx(off.time.tp - on.time.tp)


@pytest.mark.parametrize("key, op", [("grad_reduce_overlap", "reduce_scatter"), ("param_gather_overlap", "all_gather")])
def test_data_parallel_overlaps_are_separate_settings(key, op):
    j, L = job(nodes=2, gb=16), Layout(dp_shard=16, ac="full")
    on = step_time(j, L.with_stack("trainplan"), PROF)
    off = step_time(j, L.with_stack("trainplan", **{key: False}), PROF)
    e_on = sum(c.exposed_seconds for c in on.comm if c.collective == op)
    e_off = sum(c.exposed_seconds for c in off.comm if c.collective == op)
    assert e_off == pytest.approx(sum(c.seconds for c in off.comm if c.collective == op))
    assert e_on < e_off and off.time.dp > on.time.dp


def test_pipeline_sends_hidden_only_with_pp_p2p_overlap():
    j, L = job(nodes=2, gb=16), Layout(pp=2, dp_shard=8, grad_accum=2, ac="full")
    on = step_time(j, L.with_stack("trainplan", pp_p2p_overlap=True), PROF)
    off = step_time(j, L.with_stack("trainplan", pp_p2p_overlap=False), PROF)
    assert off.time.pp > on.time.pp
    assert off.time.pp == pytest.approx(sum(c.seconds for c in ledger(off, "pp")))


def test_moe_dispatchers_move_different_bytes_and_deepep_hides():
    j, L = job("mixtral-8x7b", gb=8), Layout(dp_shard=8, ep=8)
    a2a = step_time(j, L.with_stack("trainplan", moe_dispatcher="alltoall"), PROF)
    ag = step_time(j, L.with_stack("trainplan", moe_dispatcher="allgather"), PROF)
    deep = step_time(j, L.with_stack("trainplan", moe_dispatcher="deepep"), PROF)
    assert {c.collective for c in ledger(a2a, "ep")} == {"all_to_all"}
    assert {c.collective for c in ledger(ag, "ep")} == {"all_gather", "reduce_scatter"}
    # the all-gather dispatcher moves every token to every rank; all-to-all only the top-k copies
    assert sum(c.bytes for c in ledger(ag, "ep")) > sum(c.bytes for c in ledger(a2a, "ep"))
    assert a2a.time.ep == pytest.approx(sum(c.seconds for c in ledger(a2a, "ep")))
    assert deep.time.ep < a2a.time.ep


def test_recompute_family_is_the_stacks():
    j = job("llama-3.1-8b", gb=8)
    L = Layout(dp_shard=8, ac="full")
    pt = step_time(j, L.with_stack("torchtitan"), PROF).hardware_flops
    mg = step_time(j, L.with_stack("megatron"), PROF).hardware_flops
    assert mg > pt  # Megatron re-runs the down projection too (flops.py steps 9-10)


def test_fused_cross_entropy_moves_fewer_bytes_than_plain():
    j, L = job("llama-3.1-8b", gb=8), Layout(dp_shard=8)
    plain = step_time(j, L.with_stack("trainplan", cross_entropy="plain"), PROF).time.nongemm
    fused = step_time(j, L.with_stack("trainplan", cross_entropy="fused"), PROF).time.nongemm
    assert fused < plain


# ---- context parallelism: one exchange per cp_comm ---------------------------------------------

CP_JOB = {"model": "llama-3.1-8b", "seq": 131072, "gb": 1}


def cp_run(kind, cp=8, nodes=1, tp=1):
    j = job(nodes=nodes, **CP_JOB)
    L = Layout(cp=cp, tp=tp, dp_shard=nodes * 8 // (cp * tp), ac="full").with_stack("trainplan", cp_comm=kind)
    return step_time(j, L, PROF)


def test_ring_exchange_sends_kv_around_the_ring_and_hides_behind_attention():
    r = cp_run("p2p")
    (e,) = ledger(r, "cp")
    assert e.collective == "p2p" and e.count == 7 * (3 + 1) * 32  # (cp-1) x (fwd, bwd kv+dkv, recompute) x layers
    assert e.exposed_seconds < e.seconds


def test_ulysses_all_to_all_is_exposed_and_moves_q_k_v_and_output():
    r = cp_run("a2a")
    (e,) = ledger(r, "cp")
    assert e.collective == "all_to_all" and e.exposed_seconds == pytest.approx(e.seconds)
    m = resolve("llama-3.1-8b")
    tokens = 131072 / 8
    per_call = tokens * 2 * (2 * m.kv_dim + 2 * m.q_dim) * 7 / 8  # S x (n-1)/n
    assert e.bytes == pytest.approx(per_call * e.count)


def test_all_gather_exchange_gathers_kv_and_reduce_scatters_its_gradient():
    r = cp_run("allgather")
    assert {c.collective for c in ledger(r, "cp")} == {"all_gather", "reduce_scatter"}
    ag = next(c for c in ledger(r, "cp") if c.collective == "all_gather")
    assert ag.count == (1 + 1 + 1) * 32  # forward, recomputed forward, backward re-gather


def test_hierarchical_exchange_runs_all_to_all_in_the_node_and_a_ring_across():
    r = cp_run("a2a+p2p", cp=16, nodes=2)
    kinds = {c.collective: c.tier for c in ledger(r, "cp")}
    assert kinds == {"all_to_all": "nvlink", "p2p": "efa"}


def test_a2a_needs_heads_divisible_by_cp():
    from trainplan.errors import TrainplanError
    from trainplan.layout import check_layout

    j = job(model="llama-3.1-8b", seq=131072, gb=1, nodes=8)  # 32 heads
    L = Layout(cp=64, dp_shard=1).with_stack("trainplan", cp_comm="a2a")
    with pytest.raises(TrainplanError, match="splits each tp rank's 32 attention heads 64 ways.*cp_comm=p2p"):
        check_layout(j, L)
    check_layout(j, replace(L, execution=L.execution.with_(cp_comm="p2p")))
