"""Nemotron 3 (issue 24): the MoE blocks (E) of the nemotron_h pattern, their latent projections
(LatentMoE, Super) and the MTP modules, each priced where it is; and plans on p6-b200 for the Nano and
for Llama 4 Scout, the other MoE entry of this change.

Expected sizes are hand-derived from transformers 5.24 modeling_nemotron_h.py: NemotronHMoE holds a
bias-free fp32 router Linear(hidden, experts), n_routed_experts squared-ReLU experts of up and down
projections (no gate) between moe_latent_size features (hidden_size without a latent), one shared
NemotronHMLP of moe_shared_expert_intermediate_size, and fc1/fc2_latent_proj hidden <-> latent.
The published totals are checked against transformers on meta tensors in test_params_vs_transformers.py.
"""

import pytest

from trainplan.costs.activations import ActivationContext, layer_activations
from trainplan.costs.flops import model_flops, stage_flops
from trainplan.costs.moe import dispatch_exchanges
from trainplan.costs.states import stage_params
from trainplan.errors import TrainplanError
from trainplan.models import catalog, count_params, hf_config, spec_from_config
from trainplan.models.layers import FULL, MAMBA2, MOE, NO_MIXER, NO_MLP, layer_pattern, mtp_kinds
from trainplan.models.params import count_mtp_params

H, EXPERTS, TOPK, FF, SHARED, LATENT = 256, 16, 4, 96, 160, 64
SMALL = {"model_type": "nemotron_h", "hidden_size": H, "num_attention_heads": 4, "num_key_value_heads": 2,
         "head_dim": 64, "intermediate_size": 512, "vocab_size": 1000, "mamba_num_heads": 8,
         "mamba_head_dim": 32, "ssm_state_size": 16, "n_groups": 2, "hybrid_override_pattern": "MEM*EM",
         "n_routed_experts": EXPERTS, "num_experts_per_tok": TOPK, "moe_intermediate_size": FF,
         "moe_shared_expert_intermediate_size": SHARED}


def _spec(**over):
    return spec_from_config(dict(SMALL, **over), name="small", where="small.json")


def test_e_blocks_are_moe_without_a_mixer_from_letters_or_names():
    m = _spec()
    kinds = [(k.attention, k.mlp) for k in layer_pattern(m)]
    mamba, moe, attention = (MAMBA2, NO_MLP), (NO_MIXER, MOE), (FULL, NO_MLP)
    assert kinds == [mamba, moe, mamba, attention, moe, mamba]
    assert (m.num_moe_layers, m.num_dense_layers) == (2, 0)  # a mixer block has no dense MLP
    for key, names in (("layers_block_type", ["mamba", "moe", "mamba", "attention", "moe", "mamba"]),
                       ("layer_types", ["linear_attention", "moe", "linear_attention", "full_attention", "moe",
                                        "linear_attention"])):  # NemotronHConfig's attribute_map alias
        listed = dict(SMALL, **{key: names})
        del listed["hybrid_override_pattern"]
        assert layer_pattern(spec_from_config(listed, name="small", where="small.json")) == layer_pattern(m)
    # a pattern without E blocks has no MoE at all, whatever n_routed_experts says
    assert _spec(hybrid_override_pattern="M*M-").moe is None


def test_moe_block_weights_are_router_experts_shared_expert_and_latent_projections():
    plain = count_params(_spec()).layers[1]
    assert plain.experts == EXPERTS * 2 * H * FF  # up and down, no gate (relu2)
    assert plain.active_experts == TOPK * 2 * H * FF
    assert plain.mlp == H * EXPERTS + 2 * H * SHARED  # router + shared expert
    assert plain.attention == 0 and plain.norms == H  # no mixer, one RMSNorm
    latent = count_params(_spec(moe_latent_size=LATENT)).layers[1]
    assert latent.experts == EXPERTS * 2 * LATENT * FF  # the experts work between LATENT features
    assert latent.mlp == H * EXPERTS + 2 * H * SHARED + 2 * H * LATENT  # + fc1/fc2_latent_proj


def test_moe_costs_sit_on_the_e_blocks_only():
    m = _spec(moe_latent_size=LATENT)
    flops = model_flops(m)
    with_experts = [k for k in flops.layers if any(g[3] == "expert" for g in k.gemms)]
    assert [(k.attention, k.count) for k in with_experts] == [(NO_MIXER, 2)]
    # the latent MoE: the router at hidden, the shared expert at hidden, down to the latent, the routed
    # experts between latent features (top-k of them), back up to hidden
    assert with_experts[0].gemms == ((H, EXPERTS, 1, "mlp"), (H, SHARED, 1, "mlp"), (SHARED, H, 1, "mlp"),
                                     (H, LATENT, 1, "mlp"), (LATENT, FF, TOPK, "expert"),
                                     (FF, LATENT, TOPK, "expert"), (LATENT, H, 1, "mlp"))
    # a pipeline stage of the first three blocks holds one MoE layer, the last three one too
    assert [s.moe_layers for s in stage_params(m, 1, 1, 2)] == [1, 1]
    assert not any(g[3] == "expert" for k in stage_flops(m, (0, 3)).layers for g in k.gemms)  # M and *


def test_tokens_are_dispatched_at_the_latent_width():
    tokens, ep = 4096, 8
    for over, width in (({}, H), ({"moe_latent_size": LATENT}, LATENT)):
        m = _spec(**over)
        (a2a,) = dispatch_exchanges(m, "alltoall", 1.0, tokens, ep, moe_layers=2, passes=3, hidden_overlap=0.0)
        assert a2a.op == "all_to_all" and a2a.nbytes == tokens * TOPK * width * 2  # bf16 copies, top-k per token


def test_an_e_block_saves_routed_copies_at_the_latent_width_and_no_mixer_tensors():
    c = ActivationContext(seq_len=4096)
    plain, latent = (layer_activations(_spec(**over), True, c, "none", NO_MIXER, True)
                     for over in ({}, {"moe_latent_size": LATENT}))
    assert plain.qkv == plain.attn_core == plain.attn_input == 0 and plain.moe_routing > 0
    # each of the top-k copies, in and out, is LATENT wide instead of H; the up projection keeps its
    # LATENT-wide input (bf16) besides
    assert latent.moe_dispatch - plain.moe_dispatch == pytest.approx(TOPK * 2 * 2 * (LATENT - H) + 2 * LATENT)
    mamba = layer_activations(_spec(), False, c, "none", MAMBA2, False)
    assert mamba.moe_dispatch == mamba.moe_routing == 0  # the Mamba-2 blocks route nothing


def test_super_counts_its_mtp_module_of_an_attention_and_a_moe_block():
    m = catalog()["nemotron-3-super-120b-a12b"]
    assert hf_config("nemotron-3-super-120b-a12b")["num_nextn_predict_layers"] == 1
    kinds = mtp_kinds(m)
    assert [(k.attention, k.mlp) for k in kinds] == [(FULL, NO_MLP), (NO_MIXER, MOE)]
    c, h = count_params(m), m.hidden_size
    pattern = hf_config("nemotron-3-super-120b-a12b")["hybrid_override_pattern"]
    block = {letter: c.layers[pattern.index(letter)].total for letter in "*E"}
    # DeepSeek-V3 sec. 2.2: two input RMSNorms, the 2h -> h projection and a final norm, then its blocks
    assert count_mtp_params(m) == 3 * h + 2 * h * h + block["*"] + block["E"]
    assert count_mtp_params(catalog()["nemotron-3-nano-30b-a3b"]) == 0  # the Nano has no MTP module


def test_an_mtp_block_the_model_has_no_sizes_for_is_refused_in_one_line():
    with pytest.raises(TrainplanError, match=r"MTP block \(none, dense\) is not a kind of block") as e:
        _spec(num_nextn_predict_layers=1, mtp_hybrid_override_pattern="*-")
    assert "\n" not in str(e.value)
    with pytest.raises(TrainplanError, match="block 'X' is not one of M"):
        _spec(num_nextn_predict_layers=1, mtp_layers_block_type=["X"])


def test_trainplan_model_prints_the_blocks_the_latent_and_the_mtp_module(cli):
    code, out, err = cli("model", "nemotron-3-super-120b-a12b")
    assert code == 0, err
    m = catalog()["nemotron-3-super-120b-a12b"]
    assert f"{count_params(m).total:,}" in out and f"{count_params(m).active:,}" in out
    assert "40 mamba2, 40 moe-only, 8 full" in out and "expert ffn 2688 in a latent of 1024" in out
    assert f"mtp        1 module(s), {count_mtp_params(m):,} parameters, not in the total" in out


# Published sizes: Nemotron 3 Nano report (arXiv:2512.20848): 31.6B total, about 3.6B active with the
# embeddings; the Super's name, 120B total, 12B active (Llama 4 Scout: tests/models/test_model_catalog.py).
@pytest.mark.parametrize("name, total_b, active_b, within_b", [
    ("nemotron-3-nano-30b-a3b", 31.6, 3.6, 0.05),
    ("nemotron-3-super-120b-a12b", 120.0, 12.0, 0.8),
])
def test_published_sizes(name, total_b, active_b, within_b):
    c = count_params(catalog()[name])
    assert c.total / 1e9 == pytest.approx(total_b, abs=within_b)
    assert c.active / 1e9 == pytest.approx(active_b, abs=within_b)


@pytest.mark.parametrize("model", ["nemotron-3-nano-30b-a3b", "llama-4-scout"])
def test_plan_works_on_p6_b200(cli, tmp_path, model):
    f = tmp_path / "plan.json"
    code, out, err = cli("plan", "--model", model, "--instance", "ml.p6-b200.48xlarge", "--out", str(f))
    assert code == 0, err
    assert out.startswith(f"{model} on ") and "tokens/s" in out
    from trainplan.plan import load_plan

    plan = load_plan(f)
    assert plan.estimate.tokens_per_s > 0 and plan.job.model == catalog()[model]
