"""count_params equals the Hugging Face model built on the meta device, exactly.

Every catalog entry, plus small configs that reach the branches the catalog does not (absent
fields taking the transformers defaults, biases, mlp_only_layers, q_lora_rank null, Qwen2-MoE,
Gemma 3). Meta tensors take no memory, so a 671B model builds in about a second.
"""

import json

import pytest

from trainplan.models import ADAPTERS, catalog, count_params, hf_config, spec_from_config

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.torch


# model_types transformers builds under another class: Kimi K2's config.json names DeepseekV3ForCausalLM;
# a Llama 4 config.json's language model is its text_config (Llama4ForCausalLM).
HF_CLASS_OF = {"kimi_k2": "deepseek_v3"}


def _hf_counts(config_json: str) -> tuple[int, int, int, tuple[int, ...]]:
    """(total, embedding incl. learned positions, lm_head, per-layer totals) of the HF model."""
    config = json.loads(config_json)
    if config["model_type"] == "llama4":
        config = dict(config["text_config"], model_type="llama4_text")
    config["model_type"] = HF_CLASS_OF.get(config["model_type"], config["model_type"])
    cfg = transformers.AutoConfig.for_model(**config)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    total = sum(p.numel() for p in model.parameters())  # tied weights are yielded once
    base = model.base_model
    emb = model.get_input_embeddings().weight.numel()
    if hasattr(base, "wpe"):  # GPT-2 learned positions
        emb += base.wpe.weight.numel()
    head = model.get_output_embeddings().weight
    lm_head = 0 if head is model.get_input_embeddings().weight else head.numel()
    layers = base.layers if hasattr(base, "layers") else base.h if hasattr(base, "h") else model.model.layers
    per_layer = tuple(sum(p.numel() for p in layer.parameters()) for layer in layers)
    return total, emb, lm_head, per_layer


def _check(spec, config: dict) -> None:
    total, emb, lm_head, per_layer = _hf_counts(json.dumps(config, sort_keys=True))
    c = count_params(spec)
    assert c.total == total
    assert c.embedding == emb
    assert c.lm_head == lm_head
    assert tuple(x.total for x in c.layers) == per_layer


@pytest.mark.parametrize("name", sorted(catalog()))
def test_catalog_entry_matches_transformers_exactly(name):
    _check(catalog()[name], hf_config(name))


TINY = {"vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
        "intermediate_size": 96}

# Configs that take the other branches of the adapters; absent keys take the HF defaults.
BRANCHES = {
    "llama-minimal": dict(TINY, model_type="llama"),
    "llama-biases-tied": dict(TINY, model_type="llama", attention_bias=True, mlp_bias=True,
                              tie_word_embeddings=True, num_key_value_heads=2, head_dim=24),
    "mistral-minimal": dict(TINY, model_type="mistral", num_key_value_heads=2),
    "mixtral-minimal": dict(TINY, model_type="mixtral", num_key_value_heads=2,
                            num_local_experts=4, num_experts_per_tok=2),
    "qwen2-minimal-tied": dict(TINY, model_type="qwen2", num_key_value_heads=2,
                               tie_word_embeddings=True),
    "qwen3-minimal": dict(TINY, model_type="qwen3", num_key_value_heads=2),
    "qwen3-attention-bias": dict(TINY, model_type="qwen3", num_key_value_heads=2, head_dim=32,
                                 attention_bias=True),
    "qwen3_moe-dense-layers": dict(TINY, model_type="qwen3_moe", num_key_value_heads=2,
                                   num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                                   decoder_sparse_step=2, mlp_only_layers=[3]),
    "qwen2_moe": dict(TINY, model_type="qwen2_moe", num_key_value_heads=2, num_experts=8,
                      num_experts_per_tok=2, moe_intermediate_size=32,
                      shared_expert_intermediate_size=48, mlp_only_layers=[0]),
    "gemma2-minimal": dict(TINY, model_type="gemma2", num_key_value_heads=2, head_dim=16),
    "gemma3_text": dict(TINY, model_type="gemma3_text", num_key_value_heads=2, head_dim=16,
                        num_hidden_layers=7),
    "deepseek_v3-no-q-lora-bias": dict(TINY, model_type="deepseek_v3", num_key_value_heads=4,
                                       q_lora_rank=None, kv_lora_rank=16, qk_nope_head_dim=8,
                                       qk_rope_head_dim=8, v_head_dim=8, n_routed_experts=8,
                                       num_experts_per_tok=2, moe_intermediate_size=16,
                                       n_shared_experts=2, first_k_dense_replace=1, n_group=2,
                                       topk_group=1, attention_bias=True),
    "llama4_text-interleaved": dict(TINY, model_type="llama4_text", num_key_value_heads=2, head_dim=16,
                                    num_local_experts=4, interleave_moe_layer_step=2, intermediate_size_mlp=80,
                                    attention_bias=True, attention_chunk_size=8),
    "llama4-moe-layers-listed": {"model_type": "llama4", "text_config": dict(
        TINY, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, moe_layers=[0, 3],
        intermediate_size_mlp=72, no_rope_layers=[1, 0, 1, 0])},
    "glm4_moe-qk-norm-bias": dict(TINY, model_type="glm4_moe", num_key_value_heads=2, head_dim=24,
                                  n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=16,
                                  n_shared_experts=2, first_k_dense_replace=1, use_qk_norm=True,
                                  attention_bias=True),
    "glm4_moe-minimal": dict(TINY, model_type="glm4_moe", num_key_value_heads=2, n_routed_experts=8,
                             num_experts_per_tok=2, moe_intermediate_size=16),
    "kimi_k2-minimal": dict(TINY, model_type="kimi_k2", num_key_value_heads=4, q_lora_rank=16,
                            kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8,
                            n_routed_experts=12, num_experts_per_tok=2, moe_intermediate_size=16,
                            n_shared_experts=1, first_k_dense_replace=1, n_group=1, topk_group=1,
                            num_nextn_predict_layers=0),
    "qwen3_next-hybrid": dict(TINY, model_type="qwen3_next", num_key_value_heads=2, head_dim=16, num_experts=8,
                              num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=24,
                              linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
                              linear_value_head_dim=12, linear_conv_kernel_dim=4, mlp_only_layers=[1],
                              attention_bias=True),
    # every block kind (M, -, *) with the non-default biases; time_step_limit as transformers writes it
    "nemotron_h-pattern-biases": dict(TINY, model_type="nemotron_h", num_key_value_heads=2, head_dim=16,
                                      mamba_num_heads=8, mamba_head_dim=12, ssm_state_size=16, n_groups=2,
                                      hybrid_override_pattern="M-M*-", use_bias=True, mlp_bias=True,
                                      use_conv_bias=False, num_hidden_layers=5,
                                      time_step_limit=[0.0, float("inf")]),
    # Mamba-1 and attention layers, MoE and dense MLPs at other offsets, the non-default biases, an explicit
    # dt rank, tied embeddings; and the JambaConfig defaults of every Mamba size (dt rank "auto")
    "jamba-offsets-biases-tied": dict(TINY, model_type="jamba", num_key_value_heads=2, num_hidden_layers=6,
                                      attn_layer_period=3, attn_layer_offset=1, expert_layer_period=3,
                                      expert_layer_offset=0, num_experts=4, num_experts_per_tok=2, mamba_d_state=8,
                                      mamba_d_conv=3, mamba_expand=3, mamba_dt_rank=5, mamba_proj_bias=True,
                                      mamba_conv_bias=False, tie_word_embeddings=True),
    "jamba-minimal": dict(TINY, model_type="jamba", num_key_value_heads=2, num_hidden_layers=8),
    # Nemotron 3 MoE blocks (E): latent projections with mlp_bias, the blocks named as layers_block_type
    # writes them, MTP modules (which transformers skips: not in the count)
    "nemotron_h-moe-latent-biases": dict(TINY, model_type="nemotron_h", num_key_value_heads=2, head_dim=16,
                                         mamba_num_heads=8, mamba_head_dim=12, ssm_state_size=16, n_groups=2,
                                         layers_block_type=["mamba", "moe", "attention", "moe", "mlp"],
                                         n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=24,
                                         moe_shared_expert_intermediate_size=40, moe_latent_size=20, mlp_bias=True,
                                         num_nextn_predict_layers=1, num_hidden_layers=5),
    # a shared expert of width 0 is built at intermediate_size (NemotronHMLP), no latent, grouped routing
    "nemotron_h-moe-shared-fallback": dict(TINY, model_type="nemotron_h", num_key_value_heads=2, head_dim=16,
                                           hybrid_override_pattern="*E*E", n_routed_experts=8,
                                           num_experts_per_tok=2, moe_intermediate_size=24, n_group=2,
                                           topk_group=1, moe_shared_expert_intermediate_size=0,
                                           num_hidden_layers=4),
    "gpt_oss-minimal": dict(TINY, model_type="gpt_oss", num_key_value_heads=2, head_dim=16,
                            num_local_experts=4),
    "gpt2-minimal": {"model_type": "gpt2", "vocab_size": 1000, "n_embd": 64, "n_layer": 3,
                     "n_head": 4},
    "gpt2-untied-inner": {"model_type": "gpt2", "vocab_size": 1000, "n_embd": 64, "n_layer": 2,
                          "n_head": 4, "n_inner": 80, "n_positions": 128,
                          "tie_word_embeddings": False},
}


def test_every_adapter_is_checked_against_transformers():
    # each model_type the registry reads is built by a catalog entry or a branch case above
    checked = {hf_config(n)["model_type"] for n in catalog()} | {c["model_type"] for c in BRANCHES.values()}
    assert checked == set(ADAPTERS)


@pytest.mark.parametrize("case", sorted(BRANCHES))
def test_adapter_branch_matches_transformers_exactly(case):
    config = BRANCHES[case]
    spec = spec_from_config(config, name=case, where=f"{case}.json")
    _check(spec, config)
