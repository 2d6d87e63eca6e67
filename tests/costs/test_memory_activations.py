"""Per-layer activation accounting (costs/activations.py) against Korthikanti et al. 2022."""

from __future__ import annotations

import pytest

from trainplan.costs.activations import (
    ActivationContext,
    layer_activations,
    layer_backward_grads,
    layer_none,
    microbatches_in_flight,
)
from trainplan.models import resolve
from trainplan.models.spec import MLASpec, ModelSpec


def gpt(h: int, a: int) -> ModelSpec:
    """The paper's GPT: LayerNorm, GELU MLP of 4h, multi-head attention."""
    return ModelSpec(name=f"gpt-h{h}", model_type="gpt", num_layers=1, hidden_size=h, num_heads=a,
                     num_kv_heads=a, head_dim=h // a, ffn_size=4 * h, vocab_size=51200, mlp="gelu",
                     norm="layernorm", position_embedding="learned", max_position_embeddings=2048)


def paper_ctx(s: int, t: int, sp: bool) -> ActivationContext:
    """The paper's assumptions: 16-bit activations, dropout, materialised attention, no norm stats."""
    return ActivationContext(seq_len=s, tp=t, sequence_parallel=sp, elem_bytes=2, flash_attention=False,
                             dropout=True, norm_stats=False)


# Korthikanti et al. 2022 (arXiv:2205.05198) Table 3 model configurations (a heads, h hidden, s seq,
# t tensor-parallel size): 22B, 175B (GPT-3), 530B, 1T.
CONFIGS = [(64, 6144, 2048, 8), (96, 12288, 2048, 8), (128, 20480, 2048, 8), (160, 25600, 2048, 8)]


# Korthikanti et al. 2022, Table 2, row "no parallelism": sbh(34 + 5as/h) bytes per layer.
@pytest.mark.parametrize("a,h,s,t", CONFIGS)
def test_no_parallelism_matches_table2(a, h, s, t):
    per_token = layer_activations(gpt(h, a), False, paper_ctx(s, 1, False), "none").total
    assert per_token * s == pytest.approx(s * h * (34 + 5 * a * s / h), rel=1e-12)


# Korthikanti et al. 2022, Table 2, row "tensor parallel (baseline)": sbh(10 + 24/t + 5as/(ht)).
@pytest.mark.parametrize("a,h,s,t", CONFIGS + [(32, 4096, 4096, 2), (32, 4096, 4096, 4)])
def test_tensor_parallel_matches_table2(a, h, s, t):
    per_token = layer_activations(gpt(h, a), False, paper_ctx(s, t, False), "none").total
    assert per_token * s == pytest.approx(s * h * (10 + 24 / t + 5 * a * s / (h * t)), rel=1e-12)


# Korthikanti et al. 2022, Table 2, row "tensor + sequence parallel": sbh(34/t + 5as/(ht)).
@pytest.mark.parametrize("a,h,s,t", CONFIGS)
def test_tensor_sequence_parallel_matches_table2(a, h, s, t):
    per_token = layer_activations(gpt(h, a), False, paper_ctx(s, t, True), "none").total
    assert per_token * s == pytest.approx(s * h * (34 / t + 5 * a * s / (h * t)), rel=1e-12)


# Korthikanti et al. 2022, Table 2, rows "tensor parallel + selective recompute": sbh(10 + 24/t),
# and "tensor + sequence parallel + selective recompute": sbh(34/t).
@pytest.mark.parametrize("a,h,s,t", CONFIGS)
def test_selective_recompute_matches_table2(a, h, s, t):
    m = gpt(h, a)
    no_sp = layer_activations(m, False, paper_ctx(s, t, False), "selective").total
    with_sp = layer_activations(m, False, paper_ctx(s, t, True), "selective").total
    assert no_sp * s == pytest.approx(s * h * (10 + 24 / t), rel=1e-12)
    assert with_sp * s == pytest.approx(s * h * 34 / t, rel=1e-12)


# Korthikanti et al. 2022, Table 2, row "full activation recomputation": sbh * 2.
@pytest.mark.parametrize("a,h,s,t", CONFIGS)
def test_full_recompute_matches_table2(a, h, s, t):
    assert layer_activations(gpt(h, a), False, paper_ctx(s, t, False), "full").total * s == 2 * s * h


def test_paper_groups_are_the_papers_tensors():
    """The 34 of sbh(34 + 5as/h): 11 attention + 19 MLP + 4 LayerNorm (section 4.1)."""
    h, a, s = 4096, 32, 2048
    g = layer_none(gpt(h, a), False, paper_ctx(s, 1, False))
    assert g.residual == 4 * h  # two LayerNorm inputs
    assert g.attn_input == 2 * h and g.qkv == 6 * h and g.attn_output == 2 * h
    assert g.attn_core == 5 * a * s  # softmax 2as + dropout mask as + dropout output 2as
    assert g.mlp_input == 2 * h and g.mlp_hidden == 16 * h  # GELU input and output, 8h each
    assert g.dropout_masks == 2 * h
    assert g.moe_routing == g.moe_dispatch == g.mla_latents == 0


def modern_ctx(**kw) -> ActivationContext:
    return ActivationContext(seq_len=kw.pop("s", 8192), **kw)


def test_llama_tensors_gqa_swiglu_flash():
    """Llama 3.1 8B, bf16, flash attention, no dropout: each tensor group spelled out per token."""
    m = resolve("llama-3.1-8b")
    g = layer_none(m, False, modern_ctx())
    h, f = 4096, 14336
    assert g.qkv == 2 * (4096 + 2 * 1024)  # GQA: 8 kv heads of 128
    assert g.attn_core == 4 * 32  # fp32 log-sum-exp per head
    assert g.attn_output == 2 * 4096
    assert g.mlp_hidden == 4 * 2 * f  # gate, up, silu(gate), product
    assert g.residual == 2 * (2 * h + 4)  # two RMSNorm inputs + fp32 rstd
    assert g.dropout_masks == 0
    compiled = layer_none(m, False, modern_ctx(fused_pointwise=True))
    assert compiled.mlp_hidden == 2 * 2 * f  # silu and product recomputed by the compiler


def test_torchtitan_per_op_selective_keeps_every_second_matmul():
    m = resolve("llama-3.1-8b")
    g = layer_activations(m, False, modern_ctx(), "selective")
    h, f = 4096, 14336
    # layer input, wq (1st mm) and wv (3rd) outputs, attention output + lse, w1 (5th) and w2 (7th)
    # outputs; wk, wo and w3 (2nd, 4th, 6th) are recomputed. `trainplan trace --ac selective` of
    # Llama 3.1 8B on fake tensors gives the same bytes per layer.
    expect = 2 * (h + 4096 + 1024 + 4096 + f + h) + 4 * 32
    assert g.total == expect
    assert g.total < layer_activations(m, False, modern_ctx(), "none").total


def test_policies_are_ordered():
    for name in ("llama-3.1-8b", "qwen3-30b-a3b", "deepseek-v3", "gemma-2-9b"):
        m = resolve(name)
        for moe in ({False, True} if m.moe else {False}):
            c = modern_ctx(tp=2)
            none, sel, full, off = (layer_activations(m, moe, c, p).total
                                    for p in ("none", "selective", "full", "offload"))
            assert none > sel > full > off == 0, name


def test_tp_sp_and_flash_reduce_activations():
    m = resolve("llama-3.1-70b")
    base = layer_none(m, False, modern_ctx(tp=1)).total
    tp = layer_none(m, False, modern_ctx(tp=8, sequence_parallel=False)).total
    tpsp = layer_none(m, False, modern_ctx(tp=8, sequence_parallel=True)).total
    assert base > tp > tpsp == pytest.approx(base / 8, rel=1e-9)
    mat = layer_none(m, False, modern_ctx(flash_attention=False)).total
    assert mat - base == pytest.approx(2 * 64 * 8192 - 4 * 64)  # bf16 softmax per score vs fp32 lse


def test_moe_routing_and_dispatch_scale_with_top_k():
    m = resolve("qwen3-30b-a3b")
    g = layer_none(m, True, modern_ctx())
    k, E, h, f = m.moe.experts_per_token, m.moe.num_experts, m.hidden_size, m.moe.expert_ffn_size
    assert g.moe_routing == 2 * 4 * E + (8 + 4) * k
    assert g.moe_dispatch == k * (2 * 2 * h + 4 * 2 * f)  # gathered input + output, 4 intermediates
    assert layer_none(m, False, modern_ctx()).moe_dispatch == 0


def test_mla_latents_counted():
    m = ModelSpec(name="mla", model_type="deepseek_v3", num_layers=1, hidden_size=7168, num_heads=128,
                  num_kv_heads=128, head_dim=192, ffn_size=18432, vocab_size=129280,
                  mla=MLASpec(1536, 512, 128, 64, 128))
    g = layer_none(m, False, modern_ctx())
    assert g.mla_latents == 2 * 2 * 1536 + 2 * (512 + 64) + 2 * 512
    assert g.qkv == 2 * 128 * (2 * 192 + 128)


def test_backward_grads_gated_vs_gelu():
    c = modern_ctx()
    llama = resolve("llama-3.1-8b")
    assert layer_backward_grads(llama, False, c) == 2 * 2 * 4096 + 2 * 2 * 14336
    assert layer_backward_grads(gpt(4096, 32), False, c) == 2 * 2 * 4096 + 2 * 4 * 4096


# Pipeline micro-batches in flight. 1F1B (PipeDream-Flush, Narayanan et al. 2021): stage i holds
# pp - i; interleaved, first stage: pp (1 + (pp - 1) / (pp vp)) (Korthikanti et al. 2022, 4.2.3).
@pytest.mark.parametrize("pp", [2, 4, 8, 16])
def test_1f1b_in_flight(pp):
    assert [microbatches_in_flight(pp, i, 64, "1f1b", 1) for i in range(pp)] == [pp - i for i in range(pp)]
    assert microbatches_in_flight(pp, 0, 1, "1f1b", 1) == 1  # fewer micro-batches than stages
    assert microbatches_in_flight(pp, pp - 1, 64, "gpipe", 1) == 64


@pytest.mark.parametrize("pp,vp", [(2, 2), (4, 2), (4, 4), (8, 3), (16, 2)])
def test_interleaved_first_stage_matches_megatron_formula(pp, vp):
    assert microbatches_in_flight(pp, 0, 1000, "interleaved", vp) == pytest.approx(pp * (1 + (pp - 1) / (pp * vp)))
    assert microbatches_in_flight(1, 0, 8, "1f1b", 1) == 1


def test_dtensor_sequence_parallel_saves_the_gathered_matmul_inputs():
    """Megatron re-gathers the SP-sharded norm output in backward; DTensor (torchtitan) keeps it."""
    m = resolve("llama-3.1-70b")
    megatron = layer_none(m, False, modern_ctx(tp=8))
    dtensor = layer_none(m, False, modern_ctx(tp=8, sp_saves_gathered=True))
    assert megatron.attn_input == megatron.mlp_input == 2 * 8192 / 8
    assert dtensor.attn_input == dtensor.mlp_input == 2 * 8192
    assert dtensor.total - megatron.total == 2 * 2 * 8192 * (1 - 1 / 8)


def test_megatron_selective_with_flash_drops_only_the_core():
    """Megatron's default selective recompute (core_attn) has little to drop under flash attention."""
    m = resolve("llama-3.1-8b")
    c = modern_ctx(per_op_selective=False)
    none, sel = layer_none(m, False, c), layer_activations(m, False, c, "selective")
    assert sel.attn_core == 0 and none.total - sel.total == none.attn_core == 4 * 32


def test_qk_norm_keeps_pre_norm_q_and_k():
    """Qwen3: q_norm/k_norm keep their bf16 inputs and one fp32 1/rms per head per token."""
    m = resolve("qwen3-8b")
    assert m.qk_norm
    g = layer_none(m, False, modern_ctx())
    q, kv = m.num_heads, m.num_kv_heads
    assert g.qkv == 2 * m.head_dim * (q + 2 * kv) + (2 * m.head_dim + 4) * (q + kv)
