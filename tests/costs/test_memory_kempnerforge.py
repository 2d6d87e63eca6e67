"""Memory knobs for stacks that keep the loss and gradient accumulation outside torchtitan's
choices (KempnerForge @01b461a, read in validation/dataset.py): unsharded gradient accumulation
under FSDP, logits gathered whole on every tp rank, an eager bf16 cross-entropy."""

from __future__ import annotations

import pytest

from trainplan.costs.memory import memory_breakdown
from trainplan.costs.overheads import logits_bytes
from trainplan.costs.states import stage_params, state_bytes
from trainplan.hardware import Cluster, find_node
from trainplan.job import Job, Workload
from trainplan.layout import Layout, check_layout, layout_from_dict
from trainplan.models import count_params, resolve
from trainplan.precision import recipe

KW = {"sharding": "fsdp", "dp_shard": 8, "cp": 1, "edp_shard": 8, "pp": 1, "optimizer_offload": False,
      "fp8_allgather": False, "recipe": recipe("bf16_pure")}


def test_sync_on_last_microbatch_keeps_every_unsharded_gradient_in_the_reduce_dtype():
    m = resolve("llama-3.1-8b")
    sp = stage_params(m, 1, 1, 1)[0]
    n = count_params(m).total
    every = state_bytes(sp, **KW)
    last = state_bytes(sp, sync_last_microbatch=True, **KW)
    # FSDP2 upcasts the accumulated unsharded gradient to reduce_dtype (fp32) for every unit,
    # plus the bf16 gradient of the unit in backward; the sharded gradients are made from them
    assert last.unsharded_grads == pytest.approx(4 * n + 2 * sp.largest_unit)
    assert last.grads == 0.0 and every.grads == pytest.approx(2 * n / 8)
    bf16 = state_bytes(sp, sync_last_microbatch=True, grad_fp32=False, **KW)
    assert bf16.unsharded_grads == pytest.approx(2 * n + 2 * sp.largest_unit)
    assert (last.params, last.optimizer_states) == (every.params, every.optimizer_states)


def test_unsharded_accumulation_needs_more_than_one_microbatch():
    j = Job(resolve("llama-3.1-8b"), Cluster(find_node("ml.p5.48xlarge"), 1), Workload(4096, 16))
    one = Layout(dp_shard=8, ac="full", micro_batch=2, grad_accum=1)
    check_layout(j, one)
    assert memory_breakdown(j, one) == memory_breakdown(j, one.with_(fsdp_sync_last_microbatch=True))
    two = one.with_(micro_batch=1, grad_accum=2)
    extra = memory_breakdown(j, two.with_(fsdp_sync_last_microbatch=True)).total_allocated \
        - memory_breakdown(j, two).total_allocated
    assert extra > 3 * count_params(j.model).total  # ~ the fp32 gradients of the whole model


def test_logits_gathered_on_every_tp_rank_without_a_vocab_parallel_loss():
    j = Job(resolve("llama-3.1-8b"), Cluster(find_node("ml.p5.48xlarge"), 1), Workload(4096, 2))
    L = Layout(dp_shard=2, tp=4, ac="full", stack="torchtitan")  # torchtitan: loss_parallel
    check_layout(j, L)
    sharded, gathered = memory_breakdown(j, L), memory_breakdown(j, L.with_(vocab_parallel_loss=False))
    per_vocab = logits_bytes(4096, 1, 4096, False)
    assert gathered.logits - sharded.logits == pytest.approx(per_vocab * j.model.vocab_size * (1 - 1 / 4))
    assert memory_breakdown(j, L.with_(tp=1, dp_shard=8)) == \
        memory_breakdown(j, L.with_(tp=1, dp_shard=8, vocab_parallel_loss=False))


def test_eager_bf16_loss_keeps_logits_logprobs_and_both_gradients():
    assert logits_bytes(1000, 128256, 4096, False, bf16=True) == 1000 * 128256 * 8
    assert logits_bytes(1000, 128256, 4096, False, compiled=True, bf16=True) == 1000 * 128256 * 4


def test_new_knobs_stay_out_of_plan_json_at_their_defaults():
    d = Layout().to_dict()
    assert not {"vocab_parallel_loss", "bf16_loss", "fsdp_sync_last_microbatch"} & set(d)
    L = Layout(vocab_parallel_loss=False, bf16_loss=True, fsdp_sync_last_microbatch=True)
    assert layout_from_dict(L.to_dict()) == L
