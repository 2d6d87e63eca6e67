"""A config.json trainplan cannot use is a one-line error naming the file and the field."""

import json

import pytest

from trainplan.errors import TrainplanError
from trainplan.models import ADAPTERS, hf_config, names, resolve

LLAMA = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 4, "intermediate_size": 96}
SUPPORTED = ", ".join(sorted(ADAPTERS))  # the registry (models/adapters.py); each is checked against
# transformers in test_params_vs_transformers.py


def _write(tmp_path, data, name="config.json"):
    f = tmp_path / name
    f.write_text(data if isinstance(data, str) else json.dumps(data))
    return f


def _error(arg: str) -> str:
    with pytest.raises(TrainplanError) as e:
        resolve(arg)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_malformed_json_names_file_line_and_column(tmp_path):
    f = _write(tmp_path, '{"model_type": "llama",\n "hidden_size": }')
    assert _error(str(f)) == (
        f"model config '{f}' is not valid JSON (line 2, column 17: Expecting value)"
    )


def test_json_that_is_not_an_object(tmp_path):
    f = _write(tmp_path, "[1, 2]")
    assert _error(str(f)) == f"model config '{f}' must hold a JSON object, got list"


def test_unknown_model_type_lists_the_supported_ones(tmp_path):
    f = _write(tmp_path, dict(LLAMA, model_type="falcon"))
    assert _error(str(f)) == f"{f}: model_type 'falcon' is not supported; supported: {SUPPORTED}"


def test_missing_model_type(tmp_path):
    f = _write(tmp_path, {k: v for k, v in LLAMA.items() if k != "model_type"})
    assert _error(str(f)) == (
        f"{f}: missing required field 'model_type' (a string); supported: {SUPPORTED}"
    )


def test_missing_required_field_names_it_and_the_file(tmp_path):
    f = _write(tmp_path, {k: v for k, v in LLAMA.items() if k != "hidden_size"})
    assert _error(str(f)) == (
        f"{f}: missing required field 'hidden_size' for model_type 'llama'; add it to the config.json"
    )


def test_missing_field_with_alternative_spellings(tmp_path):
    f = _write(tmp_path, dict(LLAMA, model_type="mixtral", num_experts_per_tok=2))
    assert _error(str(f)) == (
        f"{f}: missing required field 'num_local_experts' (or 'num_experts') for model_type "
        "'mixtral'; add it to the config.json"
    )


@pytest.mark.parametrize("field, value, expected", [
    ("num_hidden_layers", "32", "a positive integer"),
    ("num_hidden_layers", 0, "a positive integer"),
    ("vocab_size", True, "a positive integer"),
    ("hidden_size", 64.0, "a positive integer"),
    ("tie_word_embeddings", "false", "true or false"),
])
def test_wrongly_typed_field(tmp_path, field, value, expected):
    f = _write(tmp_path, dict(LLAMA, **{field: value}))
    assert _error(str(f)) == (
        f"{f}: field {field!r} must be {expected}, got {value!r}; fix the config.json"
    )


def test_unsupported_activation_is_named(tmp_path):
    f = _write(tmp_path, dict(LLAMA, hidden_act="relu"))
    assert _error(str(f)) == (
        f"{f}: hidden_act 'relu' is not supported for model_type 'llama'; supported: "
        "gelu, gelu_fast, gelu_new, gelu_pytorch_tanh, silu, swish"
    )


def test_layer_types_of_the_wrong_length(tmp_path):
    f = _write(tmp_path, dict(LLAMA, model_type="gemma2", layer_types=["full_attention"]))
    msg = _error(str(f))
    assert msg.startswith(f"{f}: field 'layer_types' must be a list of 2 entries")


def test_unknown_name_suggests_the_nearest():
    msg = _error("mixtral-8x7")
    assert msg.startswith("unknown model 'mixtral-8x7': did you mean 'mixtral-8x7b'? known: ")
    assert msg.endswith(f"{names()[-1]}. Or give the path of a HF config.json.")  # the known names, sorted


def test_path_that_does_not_exist(tmp_path):
    missing = tmp_path / "nope" / "config.json"
    assert _error(str(missing)) == (
        f"model config '{missing}' does not exist; give a catalog name (trainplan models) "
        "or the path of a config.json"
    )


def test_directory_without_config_json(tmp_path):
    assert _error(str(tmp_path)) == (
        f"directory '{tmp_path}' holds no config.json; give a catalog name or the path of a "
        "config.json"
    )


def test_directory_and_file_resolve_to_the_same_spec(tmp_path):
    d = tmp_path / "tiny-llama"
    d.mkdir()
    f = _write(d, LLAMA)
    assert resolve(str(d)) == resolve(str(f))
    assert resolve(str(d)).name == "tiny-llama"
    assert hf_config(str(d)) == LLAMA


def test_absent_optional_fields_take_the_transformers_defaults(tmp_path):
    # LlamaConfig: num_key_value_heads = num_attention_heads, head_dim = hidden / heads,
    # silu, no biases, untied, max_position_embeddings 2048
    m = resolve(str(_write(tmp_path, LLAMA)))
    assert (m.num_kv_heads, m.head_dim, m.mlp, m.tied_embeddings) == (4, 16, "swiglu", False)
    assert (m.qkv_bias, m.o_bias, m.mlp_bias, m.max_position_embeddings) == (False, False, False, 2048)


def test_catalog_names_are_case_insensitive():
    assert resolve("Llama-3.1-8B") is resolve("llama-3.1-8b")
    assert hf_config("Qwen3-8B") == hf_config("qwen3-8b")


# ---- values that no architecture has (models/checks.py) ----------------------------------------
MIXTRAL = dict(LLAMA, model_type="mixtral", num_key_value_heads=4, num_local_experts=8, num_experts_per_tok=2)


@pytest.mark.parametrize("config, message", [
    (dict(LLAMA, num_attention_heads=32, num_key_value_heads=5, head_dim=16),
     "32 attention heads do not split into 5 key/value head groups"),
    (dict(MIXTRAL, num_experts_per_tok=9), "top-9 routing needs 1 <= experts per token <= the 8 experts"),
    (dict(LLAMA, hidden_size=1 << 21), "hidden_size 2,097,152 is beyond the limit of 1,048,576"),
    (dict(LLAMA, num_hidden_layers=10**6), "num_layers 1,000,000 is beyond the limit of 4,096"),
    (dict(LLAMA, num_attention_heads=128), "hidden_size 64 is not a multiple of num_attention_heads 128"),
    (dict(LLAMA, num_attention_heads=128, head_dim=0), "field 'head_dim' must be a positive integer, got 0"),
    ({"model_type": "gpt2", "n_embd": 100, "n_head": 3, "n_layer": 2, "vocab_size": 50},
     "n_embd 100 is not a multiple of n_head 3"),
    (dict(LLAMA, model_type="qwen3_moe", num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
          mlp_only_layers=[-1]), "dense_layers must be >= 0"),
    (dict(LLAMA, model_type="deepseek_v3", num_key_value_heads=4, kv_lora_rank=8, qk_nope_head_dim=8, qk_rope_head_dim=8,
          v_head_dim=8, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=16, n_group=3,
          first_k_dense_replace=1),
     "8 experts do not split into 3 groups"),
])
def test_impossible_architecture_is_one_line(tmp_path, config, message):
    f = _write(tmp_path, config)
    msg = _error(str(f))
    assert msg.startswith(f"{f}: ") and message in msg


def test_negative_hidden_size_never_reaches_an_estimate(tmp_path):
    # config.json and plan.json both refuse it (it used to predict negative tokens/s)
    f = _write(tmp_path, dict(LLAMA, hidden_size=-64))
    assert "'hidden_size' must be a positive integer, got -64" in _error(str(f))


def test_the_catalog_passes_its_own_checks():
    from trainplan.models import catalog
    from trainplan.models.checks import check_spec

    for name, m in catalog().items():
        assert check_spec(m, name) is m
