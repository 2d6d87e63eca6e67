"""Parameters, gradients and optimizer states per GPU (costs/states.py) against published tables."""

from __future__ import annotations

import pytest

from trainplan.costs.memory import memory_breakdown
from trainplan.costs.states import stage_params
from trainplan.hardware import Cluster, find_node
from trainplan.job import Job, Workload
from trainplan.layout import Layout, check_layout
from trainplan.models import count_params, resolve


def job(model="llama-3.1-8b", nodes=1, instance="ml.p5.48xlarge", seq=4096, gb=None, layout=None):
    m = resolve(model)
    c = Cluster(find_node(instance), nodes)
    L = layout or Layout()
    return Job(m, c, Workload(seq_len=seq, global_batch=gb or L.micro_batch * L.grad_accum * L.dp))


def states_per_param(j, L):
    b = memory_breakdown(j, L)
    n = count_params(j.model).total
    return (b.params + b.grads + b.master_params + b.optimizer_states) / n, b


# Megatron-LM docs/source/api-guide/dist_optimizer.md, "bytes per parameter" table:
# bf16 params + fp32 grads, no distributed optimizer: 2 + 4 + 4 (master) + 8 (Adam) = 18.
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_megatron_mixed_precision_is_18_bytes_per_param(precision):
    L = Layout(precision=precision, sharding="none", dp_replicate=8)
    j = job(layout=L)
    check_layout(j, L)
    per_param, b = states_per_param(j, L)
    assert per_param == pytest.approx(18)
    assert b.convention == "megatron" and b.unsharded_params == 0


# Same table, distributed optimizer: 6 + 12/DP bytes per parameter (d = data-parallel size).
@pytest.mark.parametrize("nodes,d", [(1, 8), (2, 16), (8, 64)])
def test_megatron_distributed_optimizer_is_6_plus_12_over_dp(nodes, d):
    L = Layout(sharding="zero1", dp_shard=d, stack="megatron")  # the distributed optimizer
    j = job(nodes=nodes, layout=L)
    check_layout(j, L)
    per_param, _ = states_per_param(j, L)
    assert per_param == pytest.approx(6 + 12 / d)


# FSDP2 mixed precision (torchtitan MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)):
# fp32 sharded params (the master copy) 4 + fp32 sharded grads 4 + AdamW 8 = 16 bytes / shard.
@pytest.mark.parametrize("nodes,d", [(1, 8), (4, 32)])
def test_fsdp2_is_16_bytes_per_param_per_shard(nodes, d):
    L = Layout(sharding="fsdp", dp_shard=d)
    j = job(nodes=nodes, layout=L)
    check_layout(j, L)
    per_param, b = states_per_param(j, L)
    assert per_param == pytest.approx(16 / d)
    assert b.convention == "fsdp2"
    # in flight: two all-gathered bf16 units (current + prefetch); the largest unit of Llama 3.1 8B
    # is its LM head with the final norm (vocab x hidden + hidden)
    assert b.unsharded_params == pytest.approx(2 * 2 * (128256 * 4096 + 4096))


def test_zero2_and_pure_bf16():
    L = Layout(sharding="zero2", dp_shard=8)
    per_param, b = states_per_param(job(layout=L), L)
    assert per_param == pytest.approx(2 + 16 / 8)  # bf16 weights + sharded fp32 grads, master, Adam
    assert b.unsharded_grads > 0  # one layer's gradient bucket being reduced
    pure = Layout(precision="bf16_pure", sharding="none", dp_replicate=8)
    assert states_per_param(job(layout=pure), pure)[0] == pytest.approx(8)  # 2 + 2 + 4
    pure_fsdp = Layout(precision="bf16_pure", dp_shard=8)
    assert states_per_param(job(layout=pure_fsdp), pure_fsdp)[0] == pytest.approx(8 / 8)


def test_hsdp_shards_over_dp_shard_only():
    L = Layout(dp_shard=8, dp_replicate=2)
    per_param, _ = states_per_param(job(nodes=2, layout=L), L)
    assert per_param == pytest.approx(16 / 8)


def test_optimizer_offload_keeps_only_weights_and_grads():
    L = Layout(sharding="zero1", dp_shard=8, optimizer_offload=True, stack="megatron")
    per_param, b = states_per_param(job(layout=L), L)
    assert b.master_params == b.optimizer_states == 0
    assert per_param == pytest.approx(6)


def test_tp_divides_matrices_not_norms():
    m = resolve("llama-3.1-8b")
    pc = count_params(m)
    one = stage_params(m, 1, 1, 1)[0]
    eight = stage_params(m, 8, 1, 1)[0]
    norms = sum(lp.norms for lp in pc.layers) + pc.final_norm
    assert one.dense == pc.total
    assert eight.dense == pytest.approx((pc.total - norms) / 8 + norms)


def test_tp_beyond_kv_heads_replicates_kv():
    from dataclasses import replace

    # a 4-kv-head variant of Llama 3.1 70B: tp=8 keeps one kv head per rank
    m4 = replace(resolve("llama-3.1-70b"), num_kv_heads=4)
    kv = 2 * m4.hidden_size * m4.kv_dim * m4.num_layers
    a = stage_params(m4, 8, 1, 1)[0].dense
    b = stage_params(m4, 4, 1, 1)[0].dense
    # going from tp=4 to tp=8 halves everything except the norms and the kv projections
    assert a > b / 2
    assert a - b / 2 == pytest.approx(kv / 8 + sum(x.norms for x in count_params(m4).layers) / 2
                                      + count_params(m4).final_norm / 2, rel=1e-9)


def test_pipeline_stages_hold_embedding_first_and_head_last():
    m = resolve("llama-3.1-70b")
    pc = count_params(m)
    st = stage_params(m, 1, 1, 4)
    assert [s.layers for s in st] == [tuple(range(20 * i, 20 * i + 20)) for i in range(4)]
    layer = pc.layers[0].total
    assert st[0].dense == pytest.approx(20 * layer + pc.embedding)
    assert st[1].dense == pytest.approx(20 * layer)
    assert st[3].dense == pytest.approx(20 * layer + pc.lm_head + pc.final_norm)
    assert sum(s.dense for s in st) == pc.total


def test_tied_embeddings_with_pp_put_a_head_copy_on_the_last_stage():
    m = resolve("llama-3.2-1b")
    assert m.tied_embeddings
    pc = count_params(m)
    st = stage_params(m, 1, 1, 2)
    assert st[1].dense - sum(lp.total for lp in pc.layers[8:]) - pc.final_norm == pc.embedding
    assert stage_params(m, 1, 1, 1)[0].dense == pc.total


def test_experts_sharded_over_ep_then_dp():
    m = resolve("qwen3-30b-a3b")
    pc = count_params(m)
    st = stage_params(m, 1, 8, 1)[0]
    assert st.experts == pytest.approx(pc.experts / 8)
    L = Layout(dp_shard=8, ep=8)
    j = job(model="qwen3-30b-a3b", layout=L)
    check_layout(j, L)
    b = memory_breakdown(j, L)
    # dense part sharded 8-way by FSDP; experts split 8-way by EP, then FSDP over 8/8 = 1
    expect = 4 * (st.dense / 8 + st.experts / 1)
    assert b.params == pytest.approx(expect)


# trainplan's trainer runs zero1 as DDP + torch's ZeroRedundancyOptimizer (runtime/parallel.py):
# fp32 parameters (the master copy) and fp32 gradient buckets whole on every rank, AdamW states on
# the rank's shard: 4 + 4 + 8/d, plus autocast's bf16 copies in flight. Pure bf16: 2 + 2 + 4/d.
# (tests/runtime/test_runtime_zero.py counts these bytes on a running trainer.)
@pytest.mark.parametrize("d", [2, 8])
def test_trainplan_zero1_is_ddp_with_a_sharded_optimizer(d):
    L = Layout(sharding="zero1", dp_shard=d)
    j = job(layout=L)
    per_param, b = states_per_param(j, L)
    n = count_params(j.model).total
    assert L.stack == "trainplan" and b.convention == "ddp"
    assert per_param == pytest.approx(8 + 8 / d)
    assert b.master_params == 0 and b.unsharded_params == pytest.approx(2 * n)
    pure = Layout(sharding="zero1", dp_shard=d, precision="bf16_pure")
    per_param, b = states_per_param(job(layout=pure), pure)
    assert per_param == pytest.approx(4 + 4 / d) and b.unsharded_params == 0
