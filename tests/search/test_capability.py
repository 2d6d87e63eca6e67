"""`plan` recommends only layouts the chosen stack can run (issue 11 part 4), on trainplan's own
cost model: the reference trainer's expert parallelism splits the experts of its own decoder; a
model with multi-head latent attention runs only through its Hugging Face code (data parallel
only), and the answer names the stack a refused layout would need. A stack with an exporter is
offered only what that framework's pinned release runs (issue #22: export/<framework>.refusal)."""

from trainplan.hardware import find_node
from trainplan.models import resolve
from trainplan.search import Query, model_evaluator, search
from trainplan.search.engine import run_search
from trainplan.supports import refusal

P6 = (find_node("ml.p6-b200.48xlarge"),)


def _all(r):
    return (r.chosen, *r.runners_up, *r.pareto)


def test_deepseek_v3_on_trainplan_names_the_stack_that_runs_it():
    # the case: plan --model deepseek-v3 --instance ml.p6-b200.48xlarge --max-nodes 32.
    # MLA runs in the trainer only through the HF model (data parallel, FSDP): nothing that fits
    # 671B on 32 nodes is left, so the answer is the stack that runs it, in one line.
    import pytest

    from trainplan.errors import TrainplanError

    q = Query(resolve("deepseek-v3"), P6, max_nodes=32)
    assert q.stack == "trainplan"  # the search's default stack is the trainer's
    with pytest.raises(TrainplanError, match="multi-head latent attention.*--stack megatron") as e:
        search(q)
    assert "\n" not in str(e.value) and "ep=" in str(e.value)


def test_moe_model_on_trainplan_may_choose_expert_parallelism():
    # the trainer's own decoder splits experts over ep: the search keeps ep > 1 for it
    from trainplan.search.engine import run_search

    pool, _, _ = run_search(Query(resolve("mixtral-8x22b"), P6, max_nodes=8), model_evaluator())
    ep = [c for c in pool if c.layout.ep > 1]
    assert any(refusal(c.layout, "cuda", c.job.model) is None for c in ep)


def test_another_stack_is_not_filtered_by_the_trainers_capabilities():
    r = search(Query(resolve("deepseek-v3"), P6, max_nodes=32, stack="megatron"))
    assert r.chosen.layout.ep > 1 and r.chosen.layout.stack == "megatron"
    assert not any("needs --stack" in x for x in r.reasons)


def test_tensor_parallel_is_costed_as_the_trainer_runs_it():
    # the trainer keeps the LM head whole on every tp rank and shards the norms (sequence parallel):
    # the search costs that
    pool, _, _ = run_search(Query(resolve("llama-3.1-70b"), P6, nodes=1, precision="bf16"), model_evaluator())
    tp = [c for c in pool if c.layout.tp > 1]
    assert tp and all(c.layout.sequence_parallel and not c.layout.vocab_parallel_loss for c in tp)
    assert all(c.layout.precision in ("bf16", "fp16", "bf16_pure", "fp8_tensorwise", "fp8_rowwise")
               for c in _all(search(Query(resolve("llama-3.1-8b"), P6, nodes=1))))


def test_a_framework_stack_is_offered_only_what_its_exporter_runs(monkeypatch):
    # torchtitan 0.3.0 has no tensorwise float8, no FSDP float8 all-gather, no zero1 (export/
    # torchtitan.refusal): every plan a torchtitan search returns exports, and without the check the
    # same search returns some it cannot (so the check is what keeps them out)
    from trainplan.export import refusal as framework_refusal
    from trainplan.search import capability

    P5 = (find_node("ml.p5.48xlarge"),)
    q = Query(resolve("llama-3.1-8b"), P5, nodes=1, stack="torchtitan")
    assert all(framework_refusal(c.job, c.layout) is None for c in _all(search(q)))
    monkeypatch.setattr(capability, "framework_refusal", lambda job, layout: None)
    capability._framework_refused.cache_clear()
    try:
        unchecked = search(q)
    finally:
        capability._framework_refused.cache_clear()
    assert any(framework_refusal(c.job, c.layout) for c in _all(unchecked))


def test_a_faster_layout_the_framework_refuses_is_named_with_its_refusal():
    # DeepSeek-V3's 61 layers over pp=32: Megatron-LM asserts an even split divides; the plan says
    # what it would gain and the exporter's own line (search/capability.refused_note)
    r = search(Query(resolve("deepseek-v3"), P6, max_nodes=32, stack="megatron"))
    notes = [x for x in r.reasons if "does not run it" in x]
    assert notes and all("megatron export: " in x and "x faster" in x for x in notes)
    from trainplan.export import refusal as framework_refusal

    assert all(framework_refusal(c.job, c.layout) is None for c in _all(r))
