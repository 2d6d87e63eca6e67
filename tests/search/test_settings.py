"""`plan` chooses the execution settings a stack can run (search/settings.py), says what each gained,
never gives a stack a value it cannot run, and keeps what the person fixed with --set."""

import re
from dataclasses import replace

import pytest

from trainplan.hardware import cluster, find_node
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.models import resolve
from trainplan.search import Counting, Query, model_evaluator, search
from trainplan.search import settings as st
from trainplan.stacks import CONDITIONS, SETTINGS, applicable, stack, stacks
from trainplan.supports import TRAINER_STACK, implemented, refusal

P6 = (find_node("ml.p6-b200.48xlarge"),)


def _layouts(r):
    return [c.layout for c in (r.chosen, *r.runners_up, *r.pareto)]


@pytest.fixture(scope="module")
def megatron_70b():
    return search(Query(resolve("llama-3.1-70b"), P6, nodes=1, stack="megatron"))


def test_by_rule_settings_are_chosen_and_each_gain_is_the_estimate_without_it(megatron_70b):
    r = megatron_70b
    L = r.chosen.layout
    assert L.tp > 1 and L.execution.tp_comm_overlap  # Megatron's preset has it off; the plan turns it on
    assert not stack("megatron").execution.tp_comm_overlap
    (line,) = [x for x in r.reasons if x.startswith("tp_comm_overlap=true:")]
    gain = re.search(r": ([+-]\d+)% tokens/s over false, the megatron preset's", line)
    ev = Counting(model_evaluator())
    off = ev.evaluate(r.chosen.job, replace(L, execution=L.execution.with_(tp_comm_overlap=False)))
    assert int(gain[1]) == round((r.chosen.tokens_per_s / off.tokens_per_s - 1) * 100) > 0


def test_settings_that_are_not_priced_are_reported_as_not_weighed(megatron_70b):
    assert not megatron_70b.chosen.layout.execution.cuda_graphs
    assert any(x.startswith("cuda_graphs=false (the megatron preset's): not weighed") for x in megatron_70b.reasons)


@pytest.mark.parametrize("layout", [
    Layout(tp=8, ac="full", micro_batch=1, grad_accum=4),
    Layout(tp=2, dp_shard=4, ac="full", micro_batch=1, grad_accum=8),
    Layout(tp=2, pp=4, pp_schedule="interleaved", vp=2, ac="full", grad_accum=8, sharding="zero1"),
    Layout(dp_shard=8, ac="full", micro_batch=2, grad_accum=2),
], ids=["tp8", "tp2-fsdp", "tp2-pp4-zero1", "fsdp8"])
def test_the_rule_holds_on_the_cost_model_each_rule_value_is_never_slower_nor_larger(layout):
    """What lets the search set BY_RULE without enumerating it: on any layout the rule's value costs
    no more time and no more memory than the other value (here on four meshes of Llama 3.1 70B)."""
    ev = Counting(model_evaluator())
    gpus = layout.tp * layout.pp * layout.dp
    job = Job(resolve("llama-3.1-70b"), cluster("ml.p6-b200.48xlarge", max(1, gpus // 8)),
              Workload(8192, layout.micro_batch * layout.grad_accum * layout.dp))
    base = layout.with_stack("megatron")
    for key, on in st.BY_RULE.items():
        with_on = replace(base, execution=base.execution.with_(**{key: on}))
        with_off = replace(base, execution=base.execution.with_(**{key: st.RULE_OFF[key]}))
        assert ev.evaluate(job, with_on).step_time_s <= ev.evaluate(job, with_off).step_time_s, key
        assert ev.memory(job, with_on) <= ev.memory(job, with_off), key


def test_a_stack_never_gets_a_value_it_cannot_run():
    # every value a plan's layouts carry is the stack's preset (as it runs on the layout) or one of its choices,
    # and a choice's only_if holds wherever it is true
    for name in ("megatron", "torchtitan", TRAINER_STACK):
        r = search(Query(resolve("llama-3.1-8b"), P6, nodes=2, stack=name))
        cs = stack(name).choices
        for L in _layouts(r):
            preset = applicable(L, stack(name).execution)
            for key in SETTINGS:
                v = getattr(L.execution, key)
                assert v == getattr(preset, key) or (key in cs and cs[key].allows(L, v)), (name, key, v)
                c = cs.get(key)
                if v is True and c is not None and c.only_if:
                    assert CONDITIONS[c.only_if](L), (name, key)


def test_the_trainers_choices_are_what_supports_says_it_runs():
    runs = implemented()
    for key, c in st.choices(TRAINER_STACK).items():
        assert set(c.values) <= set(runs[key]), key
    for name in stacks():
        assert set(st.choices(name)) <= set(stack(name).choices)


def test_trainplan_plans_stay_runnable():
    r = search(Query(resolve("llama-3.1-8b"), P6, nodes=2))
    for L in _layouts(r):
        assert L.stack == TRAINER_STACK and refusal(L, "cuda", resolve("llama-3.1-8b")) is None
        assert L.execution == applicable(L, stack(TRAINER_STACK).execution)


def test_a_setting_fixed_with_set_is_kept_and_the_reason_says_what_the_other_value_would_give():
    preset = stack("megatron").execution
    r = search(Query(resolve("llama-3.1-70b"), P6, nodes=1, stack="megatron", execution=preset,
                     fixed_settings=frozenset({"grad_reduce_overlap"})))
    L = r.chosen.layout
    assert L.dp > 1 and not L.execution.grad_reduce_overlap
    # Megatron-Core overlaps the parameter gather only with --overlap-grad-reduce (its choice's only_if)
    assert not L.execution.param_gather_overlap
    assert [x for x in r.reasons if x.startswith("grad_reduce_overlap=false: as asked (--set); true would be +")]
    assert not [x for x in r.reasons if x.startswith("grad_reduce_overlap=true")]


def test_the_dispatcher_is_the_best_the_stack_runs_on_the_chosen_layout():
    r = search(Query(resolve("mixtral-8x22b"), (find_node("ml.p5.48xlarge"),), nodes=6, stack="megatron"))
    c = r.chosen
    assert c.layout.ep > 1
    ev = Counting(model_evaluator())
    tried = {}
    for ex in st.options(c.layout, ("moe_dispatcher", "ep_comm_overlap"), st.free(r.query)):
        L = replace(c.layout, execution=ex)
        if ev.fits(c.job, L):
            tried[(ex.moe_dispatcher, ex.ep_comm_overlap)] = ev.evaluate(c.job, L).tokens_per_s
    assert len(tried) > 1
    assert c.tokens_per_s == pytest.approx(max(tried.values()))
    (line,) = [x for x in r.reasons if x.startswith(f"moe_dispatcher={c.layout.execution.moe_dispatcher}")]
    assert "chosen on this mesh's best layout; against it here: " in line
