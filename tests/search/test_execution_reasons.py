"""Reasons say what a stack's settings cost the chosen plan (search/reasons.py execution_reasons)."""

import re

from trainplan.hardware import cluster
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.models import resolve
from trainplan.search.candidate import Candidate
from trainplan.search.evaluator import Counting, model_evaluator
from trainplan.search.reasons import execution_reasons


def candidate(layout, seq=8192, gb=1, model="llama-3.1-70b", nodes=1):
    ev = Counting(model_evaluator())
    job = Job(resolve(model), cluster("ml.p6-b200.48xlarge", nodes), Workload(seq, gb))
    return Candidate(job, layout, ev.evaluate(job, layout)), ev


def test_an_overlap_that_is_off_is_a_reason_with_its_seconds():
    best, ev = candidate(Layout(tp=8, ac="full").with_stack("megatron", tp_comm_overlap=False))
    (why,) = [r for r in execution_reasons(best, ev) if r.startswith("tp communication")]
    assert "not overlapped (megatron: tp_comm_overlap=false)" in why
    seconds = float(re.search(r"\+([\d.e-]+) s per step", why)[1])
    alt, _ = candidate(best.layout.with_stack("megatron", tp_comm_overlap=True))
    assert seconds == float(f"{best.metrics.step_time_s - alt.metrics.step_time_s:.2g}")


def test_overlaps_that_are_on_or_irrelevant_say_nothing():
    best, ev = candidate(Layout(tp=8, ac="full").with_stack("nemo"))  # TP overlap on, no dp, no pp
    assert not [r for r in execution_reasons(best, ev) if "not overlapped" in r]


def test_a_slower_context_parallel_exchange_names_the_faster_one():
    # a ring over two nodes waits on EFA at every step; the reason names the fastest other exchange
    L = Layout(cp=16, ac="full").with_stack("trainplan", cp_comm="p2p")
    best, ev = candidate(L, seq=131072, model="llama-3.1-8b", nodes=2)
    (why,) = [r for r in execution_reasons(best, ev) if r.startswith("cp_comm")]
    times = {o: candidate(L.with_stack("trainplan", cp_comm=o), seq=131072, model="llama-3.1-8b", nodes=2)[0]
             .metrics.step_time_s for o in ("a2a", "allgather", "a2a+p2p")}
    fastest = min(times, key=times.get)
    assert times[fastest] < best.metrics.step_time_s
    assert why.startswith(f"cp_comm p2p (trainplan): {fastest} would be -") and why.endswith(f"(--set cp_comm={fastest})")
