"""memory_breakdown(job, layout): named terms, worst stage, and how each layout knob moves them."""

from __future__ import annotations

import pytest

from trainplan.costs.memory import ALLOCATED, memory_breakdown
from trainplan.hardware import Cluster, find_node
from trainplan.job import Job, Workload
from trainplan.layout import Layout, check_layout
from trainplan.models import resolve
from trainplan.units import GiB


def job(model="llama-3.1-8b", nodes=1, instance="ml.p5.48xlarge", seq=8192, gb=8):
    return Job(resolve(model), Cluster(find_node(instance), nodes), Workload(seq_len=seq, global_batch=gb))


def mb(j, **kw):
    L = Layout(**{"dp_shard": j.cluster.num_gpus, **kw})
    return memory_breakdown(j, L)


def test_totals_are_sums_of_named_terms():
    b = mb(job(), ac="selective")
    assert b.total_allocated == pytest.approx(sum(getattr(b, k) for k in ALLOCATED))
    assert b.total_reserved == pytest.approx(b.total_allocated + b.fragmentation)
    assert b.total == pytest.approx(b.total_reserved + b.nccl_buffers + b.cuda_context)
    d = b.to_dict()
    assert d["bytes"]["total"] == b.total and d["gib"]["total"] == round(b.total / GiB, 3)
    assert d["worst_stage"] == 0 and d["convention"] == "fsdp2"
    assert sum(b.activation_groups.values()) == pytest.approx(b.activations)


def test_checkpointing_policies_order_activations():
    j = job()
    acts = {ac: mb(j, ac=ac).activations for ac in ("none", "selective", "full", "offload")}
    assert acts["none"] > acts["selective"] > acts["full"] > acts["offload"] == 0
    partial = [mb(j, ac="partial", ac_layers=k).activations for k in (1, 8, 16, 31)]
    assert acts["none"] > partial[0] > partial[1] > partial[2] > partial[3] > acts["full"]
    # full: one layer input per layer, bf16 (Korthikanti Table 2 "2sbh", here for 32 layers)
    assert acts["full"] == 32 * 8192 * 4096 * 2
    assert mb(j, ac="full").recompute_working > 0 and mb(j, ac="none").recompute_working == 0
    assert mb(j, ac="offload").recompute_working > 0


def test_micro_batch_and_context_parallel_scale_tokens():
    j = job()
    one, two = mb(j, ac="full"), mb(j, ac="full", micro_batch=2)
    assert two.activations == pytest.approx(2 * one.activations)
    assert two.logits == pytest.approx(2 * one.logits)
    cp = memory_breakdown(j, Layout(dp_shard=4, cp=2, ac="full"))
    assert cp.activations == pytest.approx(one.activations / 2)


def test_chunked_loss_keeps_one_chunk():
    j = job()
    full, chunked = mb(j, ac="full"), mb(j, ac="full", chunked_loss=True)
    # Liger-style chunking: ceil(V / h) = ceil(128256 / 4096) = 32 chunks of 256 tokens
    head_inputs = 8192 * 2 * 4096 * 2
    # eager loss at the start of backward: fp32 log-probs + their gradient + the logits' gradient
    assert full.logits - head_inputs == 8192 * 128256 * 12
    assert chunked.logits - head_inputs == 256 * 128256 * 12


def test_vocab_parallel_logits_divide_by_tp():
    j = job()
    tp1 = mb(j, ac="full").logits
    tp8 = memory_breakdown(j, Layout(tp=8, ac="full", stack="torchtitan")).logits  # loss_parallel
    assert tp8 < tp1 / 6


def test_fp8_extras():
    j = job()
    bf16 = mb(j, ac="selective")
    fp8 = mb(j, ac="selective", precision="fp8_tensorwise")
    ag = mb(j, ac="selective", precision="fp8_tensorwise", fp8_allgather=True)
    assert bf16.fp8_weights == bf16.fp8_scales == 0
    assert fp8.fp8_weights > 0 and fp8.fp8_scales > 0
    assert ag.unsharded_params < fp8.unsharded_params  # the all-gather moves 1-byte block weights
    assert ag.fp8_weights == pytest.approx(fp8.fp8_weights / 2)  # only the transposes are extra
    blackwell = job(instance="ml.p6-b200.48xlarge")
    mx = mb(blackwell, ac="selective", precision="mxfp8")
    assert mx.fp8_weights == pytest.approx(mb(blackwell, ac="selective", precision="fp8_tensorwise").fp8_weights * (1 + 1 / 32))


def test_megatron_fp8_caches_weights_for_all_local_layers():
    j = job()
    L = Layout(precision="fp8_tensorwise", sharding="zero1", dp_shard=8, ac="selective", stack="megatron")
    b = memory_breakdown(j, L)
    assert b.convention == "megatron"
    # fp8 weight + transpose of every block matmul (TE caches them across micro-batches)
    m = j.model
    block = (m.hidden_size * (m.q_dim + 2 * m.kv_dim) + m.q_dim * m.hidden_size + 3 * m.hidden_size * m.ffn_size)
    assert b.fp8_weights == pytest.approx(2 * 32 * block)


def test_pipeline_worst_stage_first_with_many_micro_batches():
    j = job("llama-3.1-70b", nodes=2, gb=64)
    L = Layout(pp=4, tp=4, dp_shard=1, micro_batch=1, grad_accum=64, ac="selective")
    check_layout(j, L)
    b = memory_breakdown(j, L)
    assert b.worst_stage == 0 and b.microbatches_in_flight == 4
    inter = memory_breakdown(j, L.with_(pp_schedule="interleaved", vp=2))
    assert inter.microbatches_in_flight == pytest.approx(4 * (1 + 3 / 8))
    assert inter.activations > b.activations


def test_pipeline_worst_stage_last_when_logits_dominate():
    # Gemma 2 9B: 256k vocabulary; one micro-batch in flight everywhere, so the logits decide
    j = Job(resolve("gemma-2-9b"), Cluster(find_node("ml.p5.48xlarge"), 1), Workload(16384, 4))
    L = Layout(pp=2, dp_shard=4, micro_batch=1, grad_accum=1, ac="full")
    check_layout(j, L)
    b = memory_breakdown(j, L)
    assert b.worst_stage == 1 and b.logits > 0


def test_moe_dispatch_and_expert_parallel():
    j = job("qwen3-30b-a3b", gb=8)
    L = Layout(dp_shard=8, ep=8, ac="none")
    check_layout(j, L)
    b = memory_breakdown(j, L)
    assert b.activation_groups["moe_dispatch"] > b.activation_groups["qkv"]
    assert b.activation_groups["moe_routing"] > 0
    no_ep = memory_breakdown(j, L.with_(ep=1))
    assert b.params == pytest.approx(no_ep.params)  # ep carves out of the 8-way FSDP group: same shard
    assert b.unsharded_params < no_ep.unsharded_params  # but only 1/8 of each layer's experts is gathered


def test_every_catalog_model_gives_a_positive_breakdown():
    from trainplan.models import names

    for name in names():
        j = Job(resolve(name), Cluster(find_node("ml.p6-b200.48xlarge"), 4), Workload(4096, 32))
        b = memory_breakdown(j, Layout(dp_shard=32, ac="full"))
        assert b.total > b.total_reserved > b.total_allocated > 0, name
        assert all(v >= 0 for v in b.terms().values()), name


def test_state_convention_picks_the_selective_policy():
    j = job()
    torchtitan = memory_breakdown(j, Layout(dp_shard=8, ac="selective"))
    megatron = memory_breakdown(j, Layout(sharding="zero1", dp_shard=8, ac="selective", stack="megatron"))
    none = memory_breakdown(j, Layout(sharding="zero1", dp_shard=8, ac="none", stack="megatron"))
    assert megatron.activations < none.activations
    assert megatron.activations > 0.99 * none.activations  # only the log-sum-exp is dropped
    assert torchtitan.activations < 0.5 * megatron.activations
