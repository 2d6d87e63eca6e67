"""One answer to "which layers are MoE" (models/layers.py), asked by every consumer.

The bug this pins: Qwen3-MoE's `mlp_only_layers` made 46 MoE layers in the parameter count and 48
in the memory model (which had its own copy of the rule without the explicit dense layers)."""

from dataclasses import replace

import pytest

from trainplan.costs import flops
from trainplan.costs.memory import memory_breakdown
from trainplan.costs.states import stage_params
from trainplan.hardware import Cluster, find_node
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.models import catalog, count_params, hf_config, spec_from_config
from trainplan.models import layers as L
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


# ---- layers that differ from one another (issue 24) ---------------------------------------------


def test_llama4_maverick_interleaves_moe_and_dense_and_chunked_and_nope():
    # Llama4TextConfig (transformers 5.24): moe_layers = every interleave_moe_layer_step-th layer,
    # no_rope_layers 0 on every no_rope_layer_interval-th (4); rope layers attend in chunks of 8192.
    m = catalog()["llama-4-maverick"]
    kinds = L.layer_pattern(m)
    assert [k.mlp for k in kinds[:4]] == [DENSE, MOE, DENSE, MOE]
    assert [k.attention for k in kinds[:4]] == [L.CHUNKED, L.CHUNKED, L.CHUNKED, L.NOPE]
    assert {k.ffn_size for k in kinds if k.mlp == DENSE} == {16384}
    assert all(k.window == 8192 for k in kinds if k.attention == L.CHUNKED)
    assert sum(lp.experts > 0 for lp in count_params(m).layers) == 24


def test_llama4_scout_has_moe_with_a_shared_expert_on_every_layer():
    # Llama 4 Scout: interleave_moe_layer_step 1, so no dense layer; the chunked / NoPE split of Maverick
    m = catalog()["llama-4-scout"]
    kinds = L.layer_pattern(m)
    assert {k.mlp for k in kinds} == {MOE} and m.num_dense_layers == 0 and m.ffn_size == 0
    assert [k.attention for k in kinds].count(L.NOPE) == 12 and kinds[3].attention == L.NOPE
    c = count_params(m)
    shared = 3 * m.hidden_size * 8192  # one SwiGLU shared expert of intermediate_size beside the 16 routed
    assert all(lp.mlp == shared + m.hidden_size * 16 for lp in c.layers)  # + the router


def test_uniform_models_have_one_kind_per_mlp_variant():
    assert len(L.kind_counts(catalog()["llama-3.1-8b"])) == 1
    assert {k.attention for k in L.kind_counts(catalog()["deepseek-v3"])} == {L.MLA}
    assert L.mtp_kinds(catalog()["deepseek-v3"]) == (L.layer_pattern(catalog()["deepseek-v3"])[-1],)


@pytest.mark.parametrize("s, chunk", [(8192, 8192), (4096, 8192), (20000, 8192), (3, 2)])
def test_chunked_attention_counts_the_pairs_inside_each_chunk(s, chunk):
    # brute force, non-causal: query i sees every key of its own chunk
    assert flops.chunked_keys_per_query(s, chunk, causal=False) * s == sum(
        min(chunk, s - (i // chunk) * chunk) for i in range(s))
    # causal: c^2/2 pairs per chunk of c tokens, the s/2 convention of costs/flops.py step 3
    lengths = [min(chunk, s - start) for start in range(0, s, chunk)]
    assert flops.chunked_keys_per_query(s, chunk) * s == pytest.approx(sum(c * c / 2 for c in lengths))
    if s <= chunk:  # one chunk is plain causal attention
        assert flops.chunked_keys_per_query(s, chunk) == flops.keys_per_query(s, None)


def test_chunked_layers_cost_less_attention_than_full_ones_at_long_sequences():
    m = catalog()["llama-4-maverick"]
    full = replace(m, attention_layers=(), attention_chunk_size=None)
    mf, ff = flops.model_flops(m), flops.model_flops(full)
    assert mf.linear_per_token() == ff.linear_per_token()
    # 36 of 48 layers see 8192 keys at most: at 65536 tokens they do 1/8 of the global pairs
    ratio = mf.attention_per_token(65536) / ff.attention_per_token(65536)
    assert ratio == pytest.approx((12 + 36 / 8) / 48, rel=1e-3)


def test_a_new_layer_kind_is_one_row_and_one_cost_function(monkeypatch):
    # A fake variant that attends to the 16 previous keys only, added the way the module doc says:
    # a row of models/layers.py ATTENTION and a function of costs/flops.py KEYS_PER_QUERY.
    monkeypatch.setitem(L.ATTENTION, "last16", L.AttentionVariant(True, True, "test-only variant"))
    monkeypatch.setitem(flops.KEYS_PER_QUERY, "last16", lambda s, _w, causal=True: 16.0)
    m = catalog()["llama-3.1-8b"]
    half = ("last16", L.FULL) * (m.num_layers // 2)
    fake = replace(m, attention_layers=half, name="llama-fake-kind")
    from trainplan.models.checks import check_spec

    check_spec(fake, "test")  # the checks accept it from the table
    mf, base = flops.model_flops(fake), flops.model_flops(m)
    n = m.num_layers // 2
    pair = base.layers[0].attn_pair_flops
    assert mf.attention_per_token(8192) == pytest.approx(n * pair * 16 + n * pair * 8192 / 2)
    assert count_params(fake).total == count_params(m).total  # attention variants share weights
    w, c = Workload(seq_len=8192, global_batch=8), Cluster(find_node("ml.p5.48xlarge"), 1)
    assert memory_breakdown(Job(fake, c, w), Layout(dp_shard=8, micro_batch=1)).total > 0


def test_an_unknown_attention_variant_is_refused_in_one_line():
    from trainplan.errors import TrainplanError
    from trainplan.models.checks import check_spec

    m = catalog()["llama-3.1-8b"]
    with pytest.raises(TrainplanError, match="attention variant 'banded' is not one of full, sliding"):
        check_spec(replace(m, attention_layers=("banded",) * m.num_layers), "x.json")
    with pytest.raises(TrainplanError, match="lists 3 layers, the model has 32"):
        check_spec(replace(m, attention_layers=(L.FULL,) * 3), "x.json")


def test_linear_attention_costs_the_same_per_token_at_any_length():
    # Qwen3-Next: 36 gated DeltaNet layers (a recurrent state) and 12 full-attention layers
    m = catalog()["qwen3-next-80b-a3b"]
    mf = flops.model_flops(m)
    linear = [k for k in mf.layers if k.attention == L.LINEAR]
    assert sum(k.count for k in linear) == 36
    assert {k.keys_per_query(4096) for k in linear} == {k.keys_per_query(262144) for k in linear}
    full = [k for k in mf.layers if k.attention == L.FULL]
    assert full[0].keys_per_query(262144) == 64 * full[0].keys_per_query(4096)
    # in_proj_qkvz + in_proj_ba + out_proj, 2 FLOP per weight: the layer's matmul weights less the conv
    a, h = m.linear_attention, m.hidden_size
    per_token = linear[0].linear_per_token  # + the MoE (router, shared and routed experts)
    proj = h * (2 * a.key_dim + 2 * a.value_dim) + h * 2 * a.num_value_heads + a.value_dim * h
    attn_gemms = sum(2 * k * n * c for k, n, c, what in linear[0].gemms if what == "attn")
    assert attn_gemms == 2 * proj and per_token > attn_gemms
