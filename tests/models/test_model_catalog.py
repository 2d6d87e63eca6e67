"""The built-in catalog: names, sources, published sizes, and the plan.json round trip."""

import json
import re

import pytest

from trainplan.models import ADAPTERS, catalog, count_params, hf_config, names
from trainplan.models.spec import spec_from_dict, spec_to_dict

ISSUE_2_MODELS = [
    "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "llama-3.2-1b", "llama-3.2-3b",
    "mistral-7b", "mixtral-8x7b", "mixtral-8x22b", "qwen2.5-7b", "qwen2.5-72b", "qwen3-8b",
    "qwen3-32b", "qwen3-30b-a3b", "qwen3-235b-a22b", "gemma-2-9b", "gemma-2-27b", "deepseek-v3",
    "gpt-oss-120b", "gpt3-175b",
]
# Layers that differ from one another (issue 24); released sizes whose config.json could be sourced.
ISSUE_24_MODELS = ["llama-4-maverick", "glm-4.5", "glm-4.5-air", "kimi-k2", "qwen3-next-80b-a3b",
                   "nemotron-h-8b", "nemotron-h-56b", "jamba-1.5-mini", "jamba-1.5-large",
                   "nemotron-3-nano-30b-a3b", "nemotron-3-super-120b-a12b", "llama-4-scout"]


def test_catalog_holds_the_issue_2_and_24_models():
    assert sorted(names()) == sorted(ISSUE_2_MODELS + ISSUE_24_MODELS)


@pytest.mark.parametrize("name", ISSUE_2_MODELS + ISSUE_24_MODELS)
def test_entry_is_named_sourced_and_supported(name):
    assert re.fullmatch(r"[a-z0-9][a-z0-9.-]*", name)
    m = catalog()[name]
    assert m.source.startswith("https://")
    assert hf_config(name)["model_type"] in ADAPTERS
    assert "_source" not in hf_config(name)  # hf_config is a loadable config.json


@pytest.mark.parametrize("name", ISSUE_2_MODELS + ISSUE_24_MODELS)
def test_spec_survives_the_plan_json_round_trip(name):
    m = catalog()[name]
    assert spec_from_dict(json.loads(json.dumps(spec_to_dict(m)))) == m


# Published sizes, in billions (total, active per token), each from the model's own report:
#   Mixtral of Experts (arXiv 2401.04088), section 2.1: 47B total, 13B active;
#   DeepSeek-V3 report (arXiv 2412.19437), abstract: 671B total, 37B activated (MTP excluded);
#   Qwen3 report (arXiv 2505.09388), Table 2: 30B/3B and 235B/22B;
#   gpt-oss-120b model card (OpenAI 2025), Table 1: 116.83B total, 5.13B active, counting the
#   unembedding but not the embedding (so ours, counting both, is 5.13B + 0.58B);
#   Llama 3.1 model card: 8.03B (HF hub "8.03B params"); GPT-3 (arXiv 2005.14165) Table 2.1: 175.0B.
@pytest.mark.parametrize("name, total_b, active_b", [
    ("mixtral-8x7b", 46.70, 12.88),
    ("deepseek-v3", 671.03, 37.55),
    ("qwen3-30b-a3b", 30.53, 3.35),
    ("qwen3-235b-a22b", 235.09, 22.19),
    ("gpt-oss-120b", 116.83, 5.13 + 0.58),
    ("llama-3.1-8b", 8.03, 8.03),
    ("gpt3-175b", 174.60, 174.60),
])
def test_published_sizes(name, total_b, active_b):
    c = count_params(catalog()[name])
    assert c.total / 1e9 == pytest.approx(total_b, abs=0.006)
    assert c.active / 1e9 == pytest.approx(active_b, abs=0.006)


# Sizes the model cards round (billions, total and active per token): Llama 4 Maverick model card
# (meta-llama/Llama-4-Maverick-17B-128E README): 400B total, 17B active; Llama 4 Scout model card
# (meta-llama/Llama-4-Scout-17B-16E README): 109B total, 17B active (the totals count the vision
# encoder, which the text model here leaves out: Scout's text part is 1.1% under); Kimi K2 README
# (moonshotai/Kimi-K2-Instruct): 1T total, 32B activated; GLM-4.5 README (zai-org/GLM-4.5): Air
# 106B total, 12B active (the card counts neither the embedding nor the head in the active ones).
@pytest.mark.parametrize("name, total_b, active_b, rel", [
    ("llama-4-maverick", 400, 17, 0.02),
    ("llama-4-scout", 109, 17, 0.02),
    ("kimi-k2", 1000, 32, 0.03),
])
def test_published_rounded_sizes(name, total_b, active_b, rel):
    c = count_params(catalog()[name])
    assert c.total / 1e9 == pytest.approx(total_b, rel=rel)
    assert c.active / 1e9 == pytest.approx(active_b, rel=rel)


def test_qwen3_next_published_size_exactly():
    # Qwen/Qwen3-Coder-Next (Qwen3-Next-80B-A3B's architecture): 79,674,391,296 parameters in its
    # safetensors headers, 3,874,929,408 once the inactive experts' tensors are taken out
    c = count_params(catalog()["qwen3-next-80b-a3b"])
    assert (c.total, c.active) == (79_674_391_296, 3_874_929_408)


def test_nemotron_h_published_sizes():
    # Nemotron-H report (arXiv:2504.03624) names the models by size: 8B and 56B; each is a mixer or an
    # MLP per block, so every parameter is active
    for name, total_b in (("nemotron-h-8b", 8.1), ("nemotron-h-56b", 56.3)):
        c = count_params(catalog()[name])
        assert c.total / 1e9 == pytest.approx(total_b, abs=0.05)
        assert c.active == c.total


def test_glm_4_5_air_published_size():
    c = count_params(catalog()["glm-4.5-air"])
    assert c.total / 1e9 == pytest.approx(106, abs=1)
    assert (c.active - c.embedding - c.lm_head) / 1e9 == pytest.approx(12, abs=0.5)


def test_deepseek_v3_mtp_module_is_the_checkpoints_14b():
    # DeepSeek-V3 README (deepseek-ai/DeepSeek-V3): 685B on the hub = 671B main model + 14B MTP
    # module, whose checkpoint stores its own copies of the shared embedding and output head.
    from trainplan.models.params import count_mtp_params

    m = catalog()["deepseek-v3"]
    c = count_params(m)
    assert (count_mtp_params(m) + c.embedding + c.lm_head) / 1e9 == pytest.approx(14, abs=0.6)
    assert (c.total + count_mtp_params(m) + c.embedding + c.lm_head) / 1e9 == pytest.approx(685, abs=0.6)


def test_llama_3_1_8b_exact_count():
    # the exact figure transformers reports for meta-llama/Llama-3.1-8B (safetensors metadata)
    assert count_params(catalog()["llama-3.1-8b"]).total == 8_030_261_248


def test_deepseek_v3_structure():
    m = catalog()["deepseek-v3"]
    assert (m.num_dense_layers, m.num_moe_layers, m.mtp_layers) == (3, 58, 1)
    assert (m.moe.num_groups, m.moe.topk_groups, m.moe.num_shared_experts) == (8, 4, 1)
    layers = count_params(m).layers
    assert layers[2].experts == 0 and layers[3].experts == 256 * 3 * 7168 * 2048
    assert layers[3].active_experts == 8 * 3 * 7168 * 2048


def test_sliding_windows_follow_the_layer_pattern():
    def window(name):
        m = catalog()[name]
        return m.sliding_window, m.sliding_window_layers

    assert window("gpt-oss-120b") == (128, 18)  # layers 0, 2, ..., 34 banded
    assert window("gemma-2-9b") == (4096, 21)
    assert catalog()["mistral-7b"].sliding_window is None  # v0.3 dropped the window
    assert catalog()["qwen2.5-7b"].sliding_window is None  # use_sliding_window: false


def test_active_equals_total_for_dense_models():
    for name, m in catalog().items():
        c = count_params(m)
        assert (c.active == c.total) == (m.moe is None), name
