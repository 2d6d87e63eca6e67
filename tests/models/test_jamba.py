"""Jamba (issue 24): Mamba-1 layers and attention layers without positions, MoE on every other layer.

Hand-derived expectations: the layer pattern from JambaConfig's layers_block_type / layers_num_experts
rules (transformers 5.24 configuration_jamba.py); the Mamba-1 FLOPs from Gu & Dao 2023 (arXiv:2312.00752)
Algorithm 2 as JambaMambaMixer runs it; published sizes from the Jamba-1.5 report (arXiv:2408.12570):
Mini 12B active of 52B, Large 94B active of 398B.
"""

import json

import pytest

from trainplan.costs.activations import ActivationContext, layer_activations, saved_kinds
from trainplan.costs.flops import mamba1_scan_per_token, model_flops
from trainplan.errors import TrainplanError
from trainplan.models import catalog, count_params, spec_from_config
from trainplan.models.layers import ATTENTION, DENSE, MAMBA, MOE, NOPE, layer_pattern

SMALL = {"model_type": "jamba", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
         "intermediate_size": 512, "vocab_size": 1000, "num_hidden_layers": 8, "num_experts": 4,
         "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_expand": 2}


def _small(**over):
    return spec_from_config(dict(SMALL, **over), name="small", where="small.json")


def test_attention_every_period_at_its_offset_and_moe_every_other_layer():
    kinds = [(k.attention, k.mlp) for k in layer_pattern(_small())]
    # attention where i % 8 == 4, MoE where i % 2 == 1 (JambaConfig defaults: Jamba-v0.1, Jamba-1.5)
    assert kinds == [(MAMBA, DENSE), (MAMBA, MOE), (MAMBA, DENSE), (MAMBA, MOE),
                     (NOPE, DENSE), (MAMBA, MOE), (MAMBA, DENSE), (MAMBA, MOE)]
    other = [(k.attention, k.mlp) for k in layer_pattern(_small(attn_layer_period=3, attn_layer_offset=0,
                                                                expert_layer_period=4, expert_layer_offset=2))]
    assert [a for a, _ in other] == [NOPE, MAMBA, MAMBA] * 2 + [NOPE, MAMBA]
    assert [i for i, (_, f) in enumerate(other) if f == MOE] == [2, 6]
    # one expert: HF builds a dense JambaMLP on every layer
    assert _small(num_experts=1).moe is None


def test_no_layer_has_rotary_positions():
    m = catalog()["jamba-1.5-mini"]
    assert m.position_embedding == "none"
    assert not any(ATTENTION[k.attention].rope for k in layer_pattern(m))
    assert [i for i, k in enumerate(layer_pattern(m)) if k.attention == NOPE] == [4, 12, 20, 28]


def test_published_sizes():
    for name, total_b, active_b in (("jamba-1.5-mini", 52, 12), ("jamba-1.5-large", 398, 94)):
        c = count_params(catalog()[name])
        assert c.total / 1e9 == pytest.approx(total_b, abs=0.6)
        assert c.active / 1e9 == pytest.approx(active_b, abs=0.2)


def test_mamba1_layer_flops_by_hand():
    m = _small()
    h, d, n, r, k = 256, 512, 16, 16, 4  # dt rank "auto": ceil(256 / 16)
    mf = model_flops(m)
    # the dense Mamba layers: 0, 2, 6
    mamba = next(x for x in mf.layers if x.attention == MAMBA and not any(g[3] == "expert" for g in x.gemms))
    assert mamba.count == 3
    mixer = 2 * h * 2 * d + 2 * d * (r + 2 * n) + 2 * r * d + 2 * d * h  # in_proj, x_proj, dt_proj, out_proj
    assert mamba.linear_per_token == mixer + 2 * h * 2 * 512 + 2 * 512 * h  # + the dense SwiGLU MLP
    # conv: K multiply-adds per channel; per (channel, state) dt A, (dt u) B, the recurrence (2), C h (2);
    # per channel dt u, D u (2) and the gate
    scan = 2 * k * d + d * n * (1 + 1 + 2 + 2) + d * (1 + 2 + 1)
    assert mamba1_scan_per_token(m) == scan
    for s in (1024, 8192):  # linear in the sequence: the same per token at any length
        assert mamba.attn_pair_flops * mamba.keys_per_query(s) == pytest.approx(scan)


def test_mamba1_layer_keeps_its_projections_scan_inputs_and_chunk_states():
    m = _small()
    e, d, small = 2, 512, 16 + 2 * 16
    assert saved_kinds(m)[0] == (MAMBA, True)
    for tp in (1, 2):
        kept = layer_activations(m, False, ActivationContext(seq_len=4096, tp=tp), "none", MAMBA, True)
        # x and z, the conv output u, delta; dt/B/C out of x_proj and normed, with three fp32 1/rms
        assert kept.qkv == pytest.approx(e * 4 * d / tp + e * 2 * small + 3 * 4)
        states = 4 * d * 2 * 16 / 2048  # fp32 (d x 2N) per 2048-token chunk of the scan kernel
        conv_state = e * d * 3 / 4096
        assert kept.attn_core == pytest.approx((e * d + states + conv_state) / tp)
        assert kept.attn_output == pytest.approx(e * d / tp)
        assert kept.mlp_hidden > 0  # a Jamba layer has its MLP too


@pytest.mark.parametrize("bad, message", [
    ({"attn_layer_offset": 8}, "attn_layer_offset 8 must be smaller than attn_layer_period 8"),
    ({"expert_layer_period": 2, "expert_layer_offset": 3}, "expert_layer_offset 3 must be smaller"),
    ({"mamba_dt_rank": "full"}, "field 'mamba_dt_rank' must be a positive integer"),
    ({"hidden_size": 250}, "hidden_size 250 is not a multiple of num_attention_heads 4"),
    # refused before a per-layer pattern of a trillion entries is built
    ({"num_hidden_layers": 10**12}, "num_layers 1,000,000,000,000 is beyond the limit of 4,096"),
])
def test_a_fake_config_is_refused_in_one_line(bad, message):
    with pytest.raises(TrainplanError) as e:
        _small(**bad)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_the_trainer_and_megatron_refuse_mamba1_and_name_no_stack_that_would_not_run_it():
    from trainplan.export.megatron import model_args
    from trainplan.supports import check_own_model, other_stack

    m = catalog()["jamba-1.5-mini"]
    assert other_stack(m) is None
    for refuse in (check_own_model, model_args):
        with pytest.raises(TrainplanError) as e:
            refuse(m)
        text = str(e.value)
        assert "Mamba-1" in text and "\n" not in text and "--stack megatron" not in text


def test_plan_works_for_jamba_1_5_mini_on_p6_b200_on_the_trainer_with_data_parallelism(cli):
    code, out, err = cli("plan", "--model", "jamba-1.5-mini", "--instance", "ml.p6-b200.48xlarge", "--json")
    assert code == 0, err
    d = json.loads(out)
    layout = d["plan"]["layout"]
    # the trainer runs Mamba-1 only through the HF code: data parallelism and FSDP, nothing else
    assert layout["stack"] == "trainplan"
    assert all(layout.get(k, 1) == 1 for k in ("tp", "pp", "cp", "ep"))
    assert d["plan"]["estimate"]["tokens_per_s"] > 0
    assert any(r.startswith("no other stack compared: none that trainplan knows builds") for r in d["reasons"])


def test_plan_goes_past_the_fewest_nodes_that_fit_when_only_layouts_no_stack_runs_fit_there(cli):
    """Jamba-1.5-Large fits 6 p6-b200 nodes only with ep=16, which no stack runs for Mamba-1 (the
    trainer's --hf path is data parallel only): plan goes on to the fewest nodes where FSDP alone
    fits instead of answering with the refusal, and says why in its first reason."""
    code, out, err = cli("plan", "--model", "jamba-1.5-large", "--instance", "ml.p6-b200.48xlarge", "--json")
    assert code == 0, err
    d = json.loads(out)
    layout = d["plan"]["layout"]
    assert all(layout.get(k, 1) == 1 for k in ("tp", "pp", "cp", "ep")) and layout["sharding"] == "fsdp"
    nodes = d["plan"]["cluster"]["nodes"]
    first = d["reasons"][0]
    assert first.startswith(f"{nodes} nodes, not the fewest that fit (6): up to ") and "ep=16" in first
    assert "--hf" in first


def test_a_trace_slice_of_three_layers_holds_every_layer_kind():
    # trainplan trace builds K layers: Jamba's kinds come from periods and offsets, which the slice
    # chooses so that its K layers hold the full model's kinds (Mamba and MoE, Mamba and dense, NoPE and dense)
    from trainplan.models import hf_config
    from trainplan.trace.config import layer_kinds, slice_config

    full = layer_kinds(hf_config("jamba-1.5-mini"))
    assert sorted(set(full)) == ["dense/mamba", "dense/nope", "moe/mamba"]
    assert full[4] == "dense/nope" and full[5] == "moe/mamba"
    three = slice_config(hf_config("jamba-1.5-mini"), 3)
    assert sorted(layer_kinds(three)) == ["dense/mamba", "dense/nope", "moe/mamba"]
    assert three["hidden_size"] == 4096 and three["num_hidden_layers"] == 3
