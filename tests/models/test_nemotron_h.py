"""Nemotron-H (issue 24): Mamba-2 blocks, attention blocks and MLP blocks, each costed as what it is.

Hand-derived expectations: the Mamba-2 FLOPs from Dao & Gu 2024 (arXiv:2405.21060) sec. 6, the SSD
algorithm's four steps on chunks of Q tokens; weights from HF NemotronHMamba2Mixer (transformers 5.24).
"""

import json

import pytest

from trainplan.costs.activations import ActivationContext, layer_activations
from trainplan.costs.flops import mamba2_scan_per_token, model_flops
from trainplan.errors import TrainplanError
from trainplan.models import catalog, count_params, hf_config, resolve, spec_from_config
from trainplan.models.layers import DENSE, FULL, MAMBA2, NO_MIXER, NO_MLP, layer_pattern

SMALL = {"model_type": "nemotron_h", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
         "head_dim": 64, "intermediate_size": 512, "vocab_size": 1000, "mamba_num_heads": 8,
         "mamba_head_dim": 32, "ssm_state_size": 16, "n_groups": 2, "chunk_size": 64,
         "hybrid_override_pattern": "M-M*-"}


def _small():
    return spec_from_config(dict(SMALL), name="small", where="small.json")


def test_the_pattern_gives_one_kind_per_block():
    kinds = [(k.attention, k.mlp) for k in layer_pattern(_small())]
    assert kinds == [(MAMBA2, NO_MLP), (NO_MIXER, DENSE), (MAMBA2, NO_MLP), (FULL, NO_MLP), (NO_MIXER, DENSE)]
    listed = dict(SMALL, layers_block_type=["mamba", "mlp", "mamba", "attention", "mlp"])
    del listed["hybrid_override_pattern"]
    assert layer_pattern(spec_from_config(listed, name="small", where="small.json")) == layer_pattern(_small())


def test_mamba2_layer_flops_follow_the_ssd_algorithm():
    m = _small()
    h, heads, p, n, g, q = 256, 8, 32, 16, 2, 64
    inner, conv = heads * p, heads * p + 2 * g * n
    mf = model_flops(m)
    mamba = next(k for k in mf.layers if k.attention == MAMBA2)
    # in_proj: h -> z (inner), x B C (conv channels), dt (heads); out_proj: inner -> h; 2 FLOP per weight
    assert mamba.linear_per_token == 2 * h * (inner + conv + heads) + 2 * inner * h
    # diagonal blocks (causal, Q/2 keys: C B^T per group, times x per head), chunk states, state
    # passing once per chunk, output from states
    scan = g * n * q + heads * p * q + 2 * heads * n * p + 2 * heads * n * p / q + 2 * heads * n * p
    assert mamba2_scan_per_token(m) == pytest.approx(scan)
    for s in (1024, 8192):  # linear in the sequence: the same per token at any length
        assert mamba.attn_pair_flops * mamba.keys_per_query(s) == pytest.approx(scan)
    none = next(k for k in mf.layers if k.attention == NO_MIXER)
    assert none.attn_pair_flops * none.keys_per_query(4096) == 0
    assert none.linear_per_token == 2 * 2 * h * 512  # relu2: up and down only


def test_mamba2_layer_keeps_its_projections_conv_scan_output_and_states():
    m = _small()
    e, inner, conv, heads = 2, 256, 256 + 64, 8
    for tp in (1, 2):
        kept = layer_activations(m, False, ActivationContext(seq_len=4096, tp=tp), "none", MAMBA2, False)
        assert kept.qkv == pytest.approx(e * ((inner + conv + heads) + conv) / tp)
        ssm_state = 4 * heads * 32 * 16 / 64  # fp32 H x P x N per 64-token chunk
        conv_state = e * conv * 3 / 4096  # kernel - 1 tokens of each conv channel per sequence
        assert kept.attn_core == pytest.approx((2 * 4 * heads + e * inner + 4 * 2 + ssm_state + conv_state) / tp)
        assert kept.mlp_input == kept.mlp_hidden == 0  # a mixer block has no MLP
    mlp_only = layer_activations(m, False, ActivationContext(seq_len=4096), "none", NO_MIXER, True)
    assert mlp_only.qkv == mlp_only.attn_core == mlp_only.attn_input == 0 and mlp_only.mlp_hidden > 0
    # one norm per block: one norm input (bf16) and its fp32 1/rms, where a two-norm layer keeps two
    assert mlp_only.residual == pytest.approx(e * 256 + 4)


def test_config_json_with_infinity_is_read_as_transformers_reads_it(tmp_path):
    config = dict(hf_config("nemotron-h-8b"), time_step_limit=[0.0, float("inf")], time_step_min=0.001)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert "Infinity" in path.read_text()
    assert count_params(resolve(str(path))).total == count_params(catalog()["nemotron-h-8b"]).total
    # a number the planner uses must be finite: one line naming the field
    path.write_text(json.dumps(dict(config, hidden_size=float("inf"))))
    with pytest.raises(TrainplanError, match="field 'hidden_size' must be a positive integer"):
        resolve(str(path))


def test_an_unknown_block_is_refused_in_one_line_naming_the_letters():
    for bad in (dict(SMALL, hybrid_override_pattern="MX*-"), dict(SMALL, layers_block_type=["mamba", "ssm"])):
        with pytest.raises(TrainplanError, match="block '(X|ssm)' is not one of M, \\*, -, E") as e:
            spec_from_config(bad, name="x", where="x.json")
        assert "\n" not in str(e.value)


def test_plan_works_for_nemotron_h_56b_on_p6_b200(cli, tmp_path):
    f = tmp_path / "plan.json"
    code, out, err = cli("plan", "--model", "nemotron-h-56b", "--instance", "ml.p6-b200.48xlarge", "--out", str(f))
    assert code == 0, err
    assert "nemotron-h-56b" in out and "mamba2" in out  # the band says no measured run had Mamba-2
    from trainplan.plan import load_plan

    plan = load_plan(f)
    assert plan.estimate.tokens_per_s > 0 and plan.job.model == catalog()["nemotron-h-56b"]


def test_the_trainer_and_the_megatron_exporter_refuse_mamba_naming_megatron_bridge():
    from trainplan.export.megatron import model_args
    from trainplan.supports import check_own_model

    m = catalog()["nemotron-h-8b"]
    for refuse in (check_own_model, model_args):
        with pytest.raises(TrainplanError) as e:
            refuse(m)
        assert "Mamba-2" in str(e.value) and "--stack megatron_bridge" in str(e.value)
        assert "\n" not in str(e.value)


def test_plan_json_keeps_the_configs_infinity_and_refuses_it_elsewhere(cli, tmp_path):
    config = dict(hf_config("nemotron-h-8b"), time_step_limit=[0.0, float("inf")])
    (tmp_path / "config.json").write_text(json.dumps(config))
    f = tmp_path / "plan.json"
    code, _, err = cli("plan", "--model", str(tmp_path / "config.json"), "--instance", "ml.p6-b200.48xlarge",
                       "--out", str(f))
    assert code == 0, err
    from trainplan.plan import load_plan

    assert load_plan(f).hf_config["time_step_limit"] == [0.0, float("inf")]
    d = json.loads(f.read_text())
    d["workload"]["seq_len"] = float("inf")
    f.write_text(json.dumps(d))
    with pytest.raises(TrainplanError, match="Infinity is not a JSON number"):
        load_plan(f)


def _record(**model):
    from trainplan.validation.dataset import DEV_DATASET, load_dataset

    _, cases = load_dataset(DEV_DATASET)
    r = json.loads(json.dumps(cases[0].record))
    r["model"] = dict(name="Nemotron-H 8B", family="nemotron_h", num_layers=52, hidden_size=4096,
                      num_attention_heads=32, num_kv_heads=8, ffn_hidden_size=21504, vocab_size=131072, mlp="relu2",
                      attention="gqa", tied_embeddings=False, **model)
    r["hardware"] = dict(r["hardware"], gpu="h100-sxm", num_gpus=8, gpus_per_node=8)
    r["train"] = dict(r["train"], seq_len=8192, micro_batch=1, global_batch=8, tp=1, dp=8, sharding="dist_optimizer",
                      framework="megatron_bridge", precision=None, sequence_parallel=False)
    return r


def test_a_validation_record_with_a_layer_pattern_is_the_catalog_model():
    from trainplan.validation.dataset import to_case

    pattern = hf_config("nemotron-h-8b")["hybrid_override_pattern"]
    case = to_case(_record(layer_pattern=pattern, arch_extra={"mamba_num_heads": 128, "head_dim": 128}))
    assert case.skipped_reason is None, case.skipped_reason
    assert layer_pattern(case.job.model) == layer_pattern(catalog()["nemotron-h-8b"])
    assert count_params(case.job.model).total == count_params(catalog()["nemotron-h-8b"]).total
    assert any("mamba_state_dim 128" in a for a in case.assumptions)  # a default it took says so
    short = to_case(_record(layer_pattern=pattern[:-1], arch_extra={"mamba_num_heads": 128}))
    assert "layer_pattern must be a string of one letter per layer (52)" in short.skipped_reason
    no_heads = to_case(_record(layer_pattern=pattern))
    assert "mamba_num_heads is needed" in no_heads.skipped_reason


@pytest.mark.parametrize("instance", ["ml.p5.48xlarge", "ml.p4d.24xlarge", "ml.p6-b200.48xlarge"])
def test_mlp_only_blocks_cost_no_attention_where_the_rate_is_a_formula(cli, instance):
    # An MLP-only block attends to no key: on a GPU without a measured attention table the formula's
    # rate is 0 there too, and 0 FLOPs / 0 FLOP/s once stopped every estimate of Nemotron-H on p5
    # (tests/fuzz/test_fuzz_loaders.py found it)
    code, out, err = cli("estimate", "--model", "nemotron-h-8b", "--instance", instance, "--dp-shard", "8",
                         "--ac", "full", "--json")
    assert code == 0, err
    assert json.loads(out)["estimate"]["tokens_per_s"] > 0
