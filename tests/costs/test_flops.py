"""FLOPs from the architecture (costs/flops.py) against published formulas."""

from dataclasses import replace

import pytest

from trainplan.costs.flops import (
    keys_per_query,
    megatron_flops_per_step,
    model_flops,
    recompute_fraction,
)
from trainplan.models import resolve
from trainplan.models.params import count_params
from trainplan.models.spec import ModelSpec


def gpt(layers=96, h=12288, heads=96, vocab=51200):
    return ModelSpec(name="gpt", model_type="gpt", num_layers=layers, hidden_size=h, num_heads=heads,
                     num_kv_heads=heads, head_dim=h // heads, ffn_size=4 * h, vocab_size=vocab, mlp="gelu",
                     norm="layernorm")


# Narayanan et al. 2021 (arXiv:2104.04473) eq. 3, the model FLOPs of Korthikanti et al. 2022 eq. 7
# (arXiv:2205.05198): F = 72 B s l h^2 (1 + s/6h + V/12lh), full (non-causal) attention.
@pytest.mark.parametrize("layers,h,heads,s", [(96, 12288, 96, 2048), (48, 6144, 64, 2048), (128, 25600, 160, 2048),
                                              (24, 2048, 16, 4096)])
def test_matches_megatron_formula_without_causal_halving(layers, h, heads, s):
    m = gpt(layers, h, heads)
    batch = 8
    ours = batch * s * model_flops(m).model_per_token(s, causal=False)
    assert ours == pytest.approx(megatron_flops_per_step(batch, s, layers, h, 51200), rel=1e-12)


def test_causal_mask_halves_the_attention_term_only():
    m, s = gpt(), 2048
    f = model_flops(m)
    full, causal = f.attention_per_token(s, causal=False), f.attention_per_token(s)
    assert causal == pytest.approx(full / 2)
    diff = f.model_per_token(s, causal=False) - f.model_per_token(s)
    assert diff == pytest.approx(3 * full / 2)


def test_linear_flops_are_two_per_matmul_weight_for_a_catalog_model():
    # 6N rule: forward linear FLOPs per token = 2 x (matmul weights); norms are the only non-matmul params.
    m = resolve("llama-3.1-8b")
    p = count_params(m)
    norms = sum(x.norms for x in p.layers)
    assert model_flops(m).linear_per_token() == 2 * (p.total - p.embedding - p.lm_head - p.final_norm - norms)
    assert model_flops(m).head_per_token == 2 * m.hidden_size * m.vocab_size


def test_moe_counts_only_active_experts():
    m = resolve("mixtral-8x7b")
    p = count_params(m)
    active_matmul = sum(x.attention + x.mlp + x.active_experts for x in p.layers)
    assert model_flops(m).linear_per_token() == 2 * active_matmul
    all_experts = replace(m, moe=replace(m.moe, experts_per_token=m.moe.num_experts))
    assert model_flops(all_experts).linear_per_token() > 3 * model_flops(m).linear_per_token()


def test_mla_projections_are_counted_from_the_ranks():
    m = resolve("deepseek-v3")
    p = count_params(m)
    # attention params = matmul weights + the two low-rank norms (q_lora_rank + kv_lora_rank)
    attn_matmul = p.layers[0].attention - m.mla.q_lora_rank - m.mla.kv_lora_rank
    attn_gemms = [g for g in model_flops(m).layers[0].gemms if g[3] == "attn"]
    assert sum(2 * k * n * c for k, n, c, _ in attn_gemms) == 2 * attn_matmul


def test_sliding_window_limits_keys_per_query():
    assert keys_per_query(8192, None) == 4096
    assert keys_per_query(8192, 128) == pytest.approx(128 - 128 * 128 / 2 / 8192)
    assert keys_per_query(100, 128) == 50
    assert keys_per_query(8192, 128, causal=False) == 128


@pytest.mark.parametrize("ac,layers,expected", [("none", 0, 0.0), ("selective", 0, 0.0), ("full", 0, 1.0),
                                                ("offload", 0, 1.0), ("partial", 5, 0.25)])
def test_recompute_fraction_per_policy(ac, layers, expected):
    assert recompute_fraction(ac, layers, 20) == expected
