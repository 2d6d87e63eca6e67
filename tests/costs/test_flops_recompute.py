"""Recompute FLOPs per (checkpointing policy, framework family): costs/flops.py steps 9-13, pinned
against `trainplan trace` (the real Hugging Face model code on fake tensors, torch.utils.flop_counter).

Trace measurements (run once on 2026-11-29 with torch 2.13.0 CPU, transformers 5.24; 2 traced layers
extrapolated per layer kind to the full depth):
  trainplan trace --model llama-3.1-8b --seq-len 8192 --micro-batch 1 --ac full --json
    recompute_flops_by_class: matmul 83562883710976, attention 35184372088832
    forward_flops_by_class: matmul 122956323749888, attention 35184372088832
    flops_by_class.attention 158329674399744 (= 3.5 + 1 forward: s x s, flash backward 2.5x)
  ... --ac selective --json
    recompute_flops_by_class: matmul 41781441855488, attention 0
  ... --ac none --json
    model_flops_matmul 368868971249664, flops_by_class.attention 123145302310912
  trainplan trace --model qwen3-30b-a3b --seq-len 4096 --micro-batch 1 --ac full --json
    recompute_flops_by_class: matmul 22368189677568, attention 13194139533312
  ... --ac selective --json
    recompute_flops_by_class: matmul 3710851743744, attention 0
The traced analytic comparison before this change (trace/compare.py, whole layer re-run):
1.14349209288704e14 for llama full, 37% above the trace.
"""

import pytest

from trainplan.costs.flops import (
    layer_policies,
    layer_recompute,
    model_flops,
    recompute_per_token,
)
from trainplan.models import resolve

LLAMA_S = 8192  # tokens of the traced micro-batch (micro-batch 1)
QWEN_S = 4096


def _recompute(model, s, ac, family, causal=False):
    r = recompute_per_token(model_flops(resolve(model)), s, ac, family, causal=causal)
    return r.linear * s, r.attention * s


def test_pytorch_full_checkpoint_stops_before_the_down_projection():
    # traced: matmul 8.3562883710976e13, attention 3.5184372088832e13 (non-causal, as torch counts)
    linear, attn = _recompute("llama-3.1-8b", LLAMA_S, "full", "pytorch")
    assert linear == pytest.approx(83562883710976, rel=1e-12)
    assert attn == pytest.approx(35184372088832, rel=1e-12)


def test_megatron_full_recompute_reruns_the_whole_layer():
    # Megatron's CheckpointFunction re-runs the layer forward as a whole: every layer matmul, i.e. the
    # model matmuls of the trace less the LM head, over 3 (forward only)
    m = resolve("llama-3.1-8b")
    linear, attn = _recompute("llama-3.1-8b", LLAMA_S, "full", "megatron")
    layers_fwd = 368868971249664 / 3 - 2 * m.hidden_size * m.vocab_size * LLAMA_S
    assert linear == pytest.approx(layers_fwd, rel=1e-12)
    assert linear == pytest.approx(1.14349209288704e14, rel=1e-12)
    assert attn == pytest.approx(35184372088832, rel=1e-12)


def test_torchtitan_selective_reruns_every_second_matmul_and_no_attention():
    # traced: matmul 4.1781441855488e13 (k, o, up of each layer), attention 0
    linear, attn = _recompute("llama-3.1-8b", LLAMA_S, "selective", "pytorch")
    assert linear == pytest.approx(41781441855488, rel=1e-12)
    assert attn == 0.0


def test_megatron_selective_reruns_the_attention_core_only():
    linear, attn = _recompute("llama-3.1-8b", LLAMA_S, "selective", "megatron")
    assert linear == 0.0 and attn == pytest.approx(35184372088832, rel=1e-12)


def test_moe_layers_under_pytorch_checkpointing_match_the_trace():
    # qwen3-30b-a3b: full re-runs the whole MoE layer (score-weighted combine needs the experts'
    # outputs); selective re-runs k, o (mm 2 and 4), grouped expert GEMMs are saved
    assert _recompute("qwen3-30b-a3b", QWEN_S, "full", "pytorch") == pytest.approx(
        (22368189677568, 13194139533312), rel=1e-12)
    assert _recompute("qwen3-30b-a3b", QWEN_S, "selective", "pytorch") == pytest.approx(
        (3710851743744, 0.0), rel=1e-12)


def test_attention_is_causal_for_time_and_mfu_and_full_square_as_torch_counts():
    # step 13: the trace's forward attention (3.5184372088832e13) is the s x s count; a causal
    # kernel executes (s + 1) / 2 keys per query on average, counted here as s / 2
    mf = model_flops(resolve("llama-3.1-8b"))
    assert mf.attention_per_token(LLAMA_S, causal=False) * LLAMA_S == pytest.approx(35184372088832, rel=1e-12)
    _, causal = _recompute("llama-3.1-8b", LLAMA_S, "full", "pytorch", causal=True)
    assert causal == pytest.approx(35184372088832 / 2, rel=1e-12)
    # torch's flash backward counts 2.5x the forward: 3.5x forward in all, the traced class total
    assert 3.5 * mf.attention_per_token(LLAMA_S, causal=False) * LLAMA_S == pytest.approx(123145302310912, rel=1e-12)


@pytest.mark.parametrize("framework,family", [("torchtitan", "pytorch"), ("composer", "pytorch"),
                                              ("kempnerforge", "pytorch"), ("fms_fsdp", "pytorch"),
                                              ("trainplan", "pytorch"), ("megatron", "megatron"), ("nemo", "megatron"),
                                              ("megatron_bridge", "megatron")])
def test_framework_family(framework, family):
    from trainplan.stacks import stack_for_framework

    assert stack_for_framework(framework).recompute_family == family


def test_partial_checkpoints_a_share_of_layers_fully():
    mf = model_flops(resolve("llama-3.1-8b"))
    assert layer_policies("partial", 8, 32) == (("full", 0.25), ("none", 0.75))
    part = recompute_per_token(mf, 4096, "partial", "pytorch", ac_layers=8)
    full = recompute_per_token(mf, 4096, "full", "pytorch")
    assert part.total == pytest.approx(full.total / 4, rel=1e-12)
    assert recompute_per_token(mf, 4096, "none", "megatron").total == 0.0


def test_offload_recomputes_like_full_and_none_recomputes_nothing():
    kind = model_flops(resolve("llama-3.1-8b")).layers[0]
    assert layer_recompute(kind, "offload", "pytorch") == layer_recompute(kind, "full", "pytorch")
    none = layer_recompute(kind, "none", "pytorch")
    assert sum(none.gemms) == none.attention == none.nongemm == 0.0


def _mb(framework_family, **kw):
    from trainplan.costs.compute import microbatch_compute
    from trainplan.hardware import find_gpu
    from trainplan.profile import Profile

    m = resolve("llama-3.1-8b")
    from trainplan.precision import recipe

    args = {"recipe": recipe("bf16"), "tokens": LLAMA_S, "seq_len": LLAMA_S, "tp": 1, "ep": 1,
            "layers_on_stage": m.num_layers, "head_on_stage": True, "recompute_frac": 0.0, "selective": False,
            "family": framework_family} | kw
    return microbatch_compute(m, model_flops(m), find_gpu("h100-sxm-80gb"), Profile(), **args)


@pytest.mark.parametrize("family", ["pytorch", "megatron"])
@pytest.mark.parametrize("ac,kw", [("full", {"recompute_frac": 1.0}), ("selective", {"selective": True})])
def test_step_hardware_flops_add_exactly_the_recompute_flops(family, ac, kw):
    # the time model charges what flops.recompute_per_token counts (causal attention, no LM head)
    mb = _mb(family, **kw)
    r = recompute_per_token(model_flops(resolve("llama-3.1-8b")), LLAMA_S, ac, family)
    assert mb.hardware_flops - mb.model_flops == pytest.approx(r.total * LLAMA_S, rel=1e-9)
    assert mb.recompute > 0


def test_selective_recompute_time_follows_the_family():
    # torchtitan's per-op policy re-runs k, o, up and the element-wise ops, Megatron's only the
    # attention core; at s = 8192 on H100 both cost a few percent of a step, never a forward
    tt, mg = _mb("pytorch", selective=True), _mb("megatron", selective=True)
    fwd = _mb("pytorch").forward
    assert 0 < tt.recompute < 0.5 * fwd and 0 < mg.recompute < 0.5 * fwd
    assert tt.recompute != pytest.approx(mg.recompute, rel=0.01)
    full_pt, full_mg = _mb("pytorch", recompute_frac=1.0), _mb("megatron", recompute_frac=1.0)
    assert full_pt.recompute < full_mg.recompute < fwd
