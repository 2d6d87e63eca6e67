"""`plan` recommends only layouts the chosen stack can run (issue 11 part 4), on trainplan's own
cost model: the reference trainer's expert parallelism splits the experts of its own decoder, which
has no multi-head latent attention, so for DeepSeek-V3 on --stack trainplan no ep > 1, and the
reasons name the stack a faster refused layout would need."""

from trainplan.hardware import find_node
from trainplan.models import resolve
from trainplan.search import Query, model_evaluator, search
from trainplan.search.engine import run_search
from trainplan.supports import refusal

P6 = (find_node("ml.p6-b200.48xlarge"),)


def _all(r):
    return (r.chosen, *r.runners_up, *r.pareto)


def test_deepseek_v3_on_trainplan_has_no_expert_parallelism_and_says_what_would():
    # the case: plan --model deepseek-v3 --instance ml.p6-b200.48xlarge --max-nodes 32
    q = Query(resolve("deepseek-v3"), P6, max_nodes=32)
    r = search(q)
    assert q.stack == "trainplan"  # the search's default stack is the trainer's
    assert all(c.layout.ep == 1 for c in _all(r))
    assert all(refusal(c.layout, "cuda", c.job.model) is None for c in _all(r))
    note = [x for x in r.reasons if "needs --stack megatron" in x]
    assert len(note) == 1 and "ep=" in note[0] and "x faster" in note[0]


def test_another_stack_is_not_filtered_by_the_trainers_capabilities():
    r = search(Query(resolve("deepseek-v3"), P6, max_nodes=32, stack="megatron"))
    assert r.chosen.layout.ep > 1 and r.chosen.layout.stack == "megatron"
    assert not any("needs --stack" in x for x in r.reasons)


def test_tensor_parallel_is_costed_as_the_trainer_runs_it():
    # the trainer keeps norms and the LM head whole on every tp rank: the search costs that
    pool, _, _ = run_search(Query(resolve("llama-3.1-70b"), P6, nodes=1, precision="bf16"), model_evaluator())
    tp = [c for c in pool if c.layout.tp > 1]
    assert tp and all(not c.layout.sequence_parallel and not c.layout.vocab_parallel_loss for c in tp)
    assert all(c.layout.precision in ("bf16", "fp16", "bf16_pure", "fp8_tensorwise", "fp8_rowwise")
               for c in _all(search(Query(resolve("llama-3.1-8b"), P6, nodes=1))))
