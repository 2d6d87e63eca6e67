"""A gated DeltaNet layer keeps its own tensors (costs/activations.py _deltanet), not those of the
model's attention layers: Qwen3-Next's 36 linear-attention layers and 12 gated-attention layers."""

import pytest

from trainplan.costs.activations import ActivationContext, layer_activations
from trainplan.costs.memory import memory_breakdown
from trainplan.hardware import Cluster, find_node
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.models import resolve
from trainplan.models.layers import LINEAR


def test_the_deltanet_layer_keeps_its_projections_conv_outputs_and_chunk_states():
    m = resolve("qwen3-next-80b-a3b")
    a, e = m.linear_attention, 2
    for tp in (1, 2):
        kept = layer_activations(m, True, ActivationContext(seq_len=4096, tp=tp), "none", mixer=LINEAR)
        # HF Qwen3NextGatedDeltaNet: in_proj_qkvz (2 key_dim + 2 value_dim), in_proj_ba (2 value heads),
        # conv1d over q, k, v (2 key_dim + value_dim channels)
        widths = (2 * a.key_dim + 2 * a.value_dim) + 2 * a.num_value_heads + (2 * a.key_dim + a.value_dim)
        assert kept.qkv == pytest.approx(e * widths / tp)
        # one fp32 128 x 128 state per value head per 64-token chunk, and fp32 decay and beta per head
        assert kept.attn_core == pytest.approx((4 * 32 * 128 * 128 / 64 + 2 * 4 * 32) / tp)
        assert kept.attn_output == pytest.approx(e * a.value_dim / tp)


def test_the_model_counts_each_mixer_on_its_own_layers():
    m = resolve("qwen3-next-80b-a3b")
    ctx = ActivationContext(seq_len=4096)
    linear = layer_activations(m, True, ctx, "none", mixer=LINEAR).total
    attention = layer_activations(m, True, ctx, "none").total
    assert linear != attention
    job = Job(m, Cluster(find_node("ml.p6-b200.48xlarge"), 1), Workload(4096, 8))
    got = memory_breakdown(job, Layout(dp_shard=8, micro_batch=1)).activation_groups
    assert sum(got.values()) > 0
    # the stage's saved bytes per token are 36 DeltaNet layers + 12 attention layers
    tokens = 4096
    assert sum(got.values()) == pytest.approx(tokens * (36 * linear + 12 * attention), rel=1e-9)
