"""One answer to "which layers are MoE" (models/layers.py), asked by every consumer.

The bug this pins: Qwen3-MoE's `mlp_only_layers` made 46 MoE layers in the parameter count and 48
in the memory model (which had its own copy of the rule without the explicit dense layers)."""

from dataclasses import replace

import pytest

from trainplan.costs.memory import memory_breakdown
from trainplan.costs.states import stage_params
from trainplan.hardware import Cluster, find_node
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.models import count_params, hf_config, spec_from_config
from trainplan.models.layers import DENSE, MOE, layer_kinds, moe_flags
from trainplan.trace.config import layer_kinds as trace_kinds


def _qwen(mlp_only_layers):
    cfg = {**hf_config("qwen3-30b-a3b"), "mlp_only_layers": list(mlp_only_layers)}
    return cfg, spec_from_config(cfg, name="qwen3-30b-a3b-mlp-only", where="test")


def test_mlp_only_layers_are_dense_for_params_memory_and_trace():
    cfg, m = _qwen([0, 47])
    kinds = layer_kinds(m)
    assert kinds.count(MOE) == 46 and kinds[0] == kinds[47] == DENSE
    assert m.num_moe_layers == 46
    assert tuple(lp.experts > 0 for lp in count_params(m).layers) == moe_flags(m)
    for pp in (1, 4):  # the memory model's per-stage MoE layers add up to the same 46
        assert sum(s.moe_layers for s in stage_params(m, 1, 1, pp)) == 46
    assert [k.split("/")[0] for k in trace_kinds(cfg)] == list(kinds)


def test_memory_model_treats_mlp_only_layers_as_dense():
    # Every layer listed in mlp_only_layers: the activations are those of the same model without MoE.
    _, m = _qwen(range(48))
    assert m.num_moe_layers == 0
    w, c = Workload(seq_len=4096, global_batch=8), Cluster(find_node("ml.p5.48xlarge"), 1)
    L = Layout(dp_shard=8, micro_batch=1)
    dense = memory_breakdown(Job(replace(m, moe=None), c, w), L).activations
    assert memory_breakdown(Job(m, c, w), L).activations == pytest.approx(dense)


def test_trainer_builds_the_ffn_the_spec_says():
    torch = pytest.importorskip("torch")
    from trainplan.runtime.model import Block

    _, m = _qwen([1])
    tiny = replace(m, num_layers=3, hidden_size=16, num_heads=2, num_kv_heads=1, head_dim=8, ffn_size=32,
                   moe=replace(m.moe, num_experts=2, experts_per_token=1, expert_ffn_size=8))
    with torch.device("meta"):
        blocks = [Block(tiny, i) for i in range(3)]
    built = tuple(MOE if hasattr(b.feed_forward, "router") else DENSE for b in blocks)
    assert built == layer_kinds(tiny) == (MOE, DENSE, MOE)
