"""fits / headroom / max_micro_batch / max_seq_len (costs/fit.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainplan.costs.fit import fits, headroom, max_micro_batch, max_seq_len, seq_step, within
from trainplan.costs.memory import memory_breakdown
from trainplan.hardware import Cluster, find_node
from trainplan.job import Job, Workload
from trainplan.layout import Layout, check_layout
from trainplan.models import resolve
from trainplan.units import GiB


def job(model="llama-3.1-8b", instance="ml.p5.48xlarge", nodes=1, seq=8192, gb=8):
    return Job(resolve(model), Cluster(find_node(instance), nodes), Workload(seq_len=seq, global_batch=gb))


def test_fits_and_headroom_agree_with_the_breakdown():
    j, L = job(), Layout(dp_shard=8, ac="full")
    check_layout(j, L)
    b = memory_breakdown(j, L)
    cap = j.cluster.gpu.memory_bytes
    assert headroom(j, L) == pytest.approx(cap - b.total)
    assert fits(j, L) is (b.total <= cap)
    assert fits(j, L, capacity_bytes=b.total) and not fits(j, L, capacity_bytes=b.total - 1)


def brute_force_mb(j, L, cap):
    n = 0
    while memory_breakdown(j, L.with_(micro_batch=n + 1)).total <= cap:
        n += 1
    return n


@pytest.mark.parametrize("ac,cap_gib", [("full", 80), ("selective", 80), ("none", 140), ("full", 30)])
def test_max_micro_batch_is_the_brute_force_answer(ac, cap_gib):
    j, L = job(), Layout(dp_shard=8, ac=ac)
    cap = cap_gib * GiB
    got = max_micro_batch(j, L, cap)
    assert got == brute_force_mb(j, L, cap)
    if got:
        assert memory_breakdown(j, L.with_(micro_batch=got)).total <= cap
    assert memory_breakdown(j, L.with_(micro_batch=got + 1)).total > cap


def test_nothing_fits_gives_zero():
    j = job(model="llama-3.1-70b")
    L = Layout(sharding="none", dp_replicate=8)  # 18 bytes x 70B on one 80 GB GPU
    assert max_micro_batch(j, L) == 0 and max_seq_len(j, L) == 0 and not fits(j, L)


def test_max_seq_len_is_the_boundary():
    j, L = job(), Layout(dp_shard=8, ac="full")
    cap = j.cluster.gpu.memory_bytes
    s = max_seq_len(j, L)
    assert s > 8192

    def total(seq):
        return memory_breakdown(replace(j, workload=replace(j.workload, seq_len=seq)), L).total

    # the answer's granularity is 1024 tokens (costs/fit.py says why)
    assert s % 1024 == 0 and total(s) <= cap < total(s + 1024)


def test_max_seq_len_stays_a_multiple_of_2cp():
    j = job(nodes=2, seq=65536, gb=4)
    L = Layout(dp_shard=4, cp=4, ac="full")
    check_layout(j, L)
    s = max_seq_len(j, L)
    assert s > 0 and s % 1024 == 0
    nxt = replace(j, workload=replace(j.workload, seq_len=s + 1024))
    assert memory_breakdown(nxt, L).total > j.cluster.gpu.memory_bytes


def test_max_seq_len_with_cp_12_is_a_multiple_of_24_and_1024():
    assert seq_step(1) == 1024 and seq_step(4) == 1024 and seq_step(12) == 3072


def test_the_search_and_fit_answer_the_same_longest_sequence():
    # Once costs/fit.py said 19,849 and the search 16,384 for the same layout: two granularities
    # (one token, a 2^k x 1.25 grid) and two fit rules (point, band). Now both call longest_seq.
    from trainplan.search.engine import longest_seq
    from trainplan.search.evaluator import Counting, ModelEvaluator

    j, L = job(), Layout(dp_shard=8, ac="full")
    ev = ModelEvaluator()
    for err, allow_risk in ((ev.memory_band(j).error, False), (0.0, True)):
        searched = longest_seq(Counting(ev, allow_risk=allow_risk), j, L)
        assert searched == max_seq_len(j, L, memory_error=err) > 8192


def test_the_fit_rule_names_capacity_and_band():
    assert within(90, 100) and within(100, 100) and not within(101, 100)
    assert within(90, 100, memory_error=0.1) and not within(91, 100, memory_error=0.1)


def test_more_memory_never_fits_less():
    j, L = job(), Layout(dp_shard=8, ac="selective")
    small, big = max_micro_batch(j, L, 40 * GiB), max_micro_batch(j, L, 120 * GiB)
    assert big > small
    assert max_seq_len(j, L, 40 * GiB) < max_seq_len(j, L, 120 * GiB)


def test_fast_enough_for_the_search():
    """Bisection, not enumeration: a max_seq_len call costs tens of breakdowns, not thousands."""
    import trainplan.costs.fit as fit_mod

    calls = []
    real = fit_mod.memory_breakdown
    fit_mod.memory_breakdown = lambda j, L: calls.append(1) or real(j, L)
    try:
        max_seq_len(job(), Layout(dp_shard=8, ac="full"))
    finally:
        fit_mod.memory_breakdown = real
    assert len(calls) < 60


@settings(max_examples=60, deadline=None)
@given(model=st.sampled_from(["llama-3.1-8b", "qwen3-30b-a3b", "gemma-2-9b", "deepseek-v3"]),
       tp=st.sampled_from([1, 2, 4]), pp=st.sampled_from([1, 2, 4]), cp=st.sampled_from([1, 2]),
       ac=st.sampled_from(["none", "selective", "full", "partial", "offload"]),
       sharding=st.sampled_from(["fsdp", "zero1", "zero2"]), mb=st.integers(1, 16),
       seq=st.sampled_from([1024, 4096, 8192]), flash=st.booleans())
def test_memory_grows_with_micro_batch_and_sequence(model, tp, pp, cp, ac, sharding, mb, seq, flash):
    """Bisection is exact only if memory is monotone in micro-batch and sequence length."""
    j = job(model=model, nodes=4, seq=seq, gb=1)
    L = Layout(tp=tp, pp=pp, cp=cp, dp_shard=32 // (tp * pp * cp), sharding=sharding, ac=ac,
               ac_layers=1 if ac == "partial" else 0, micro_batch=mb, flash_attention=flash)
    a = memory_breakdown(j, L).total
    assert memory_breakdown(j, L.with_(micro_batch=mb + 1)).total > a
    longer = replace(j, workload=replace(j.workload, seq_len=seq + 2 * cp))
    assert memory_breakdown(longer, L).total > a
