"""config.json values that no model has are refused where the file is read, in one line: heads
that do not divide the hidden size when head_dim is derived from them, and RoPE scaling of an
unknown shape (models/rope.py, rope_types.toml: the keys transformers' validators require)."""

import json

import pytest

from trainplan.errors import TrainplanError
from trainplan.models import resolve
from trainplan.models.library import hf_config
from trainplan.models.rope import rope_types

LLAMA = hf_config("llama-3.1-8b")  # hidden 4096, 32 heads, no head_dim: head_dim = 4096 // 32


def _refusal(tmp_path, config) -> str:
    f = tmp_path / "config.json"
    f.write_text(json.dumps(config))
    with pytest.raises(TrainplanError) as e:
        resolve(str(f))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{f}: ")
    return msg


@pytest.mark.parametrize("heads", [33, 31, 3, 4095])
def test_heads_that_do_not_divide_the_hidden_size_are_refused(tmp_path, heads):
    msg = _refusal(tmp_path, dict(LLAMA, num_attention_heads=heads, num_key_value_heads=heads))
    assert f"hidden_size 4096 is not a multiple of num_attention_heads {heads}" in msg


def test_an_explicit_head_dim_need_not_divide_the_hidden_size(tmp_path):
    # Qwen3-32B: hidden 5120, 64 heads of 128 (8192 features): the projection sets the width
    f = tmp_path / "config.json"
    f.write_text(json.dumps(dict(LLAMA, num_attention_heads=40, num_key_value_heads=8, head_dim=128)))
    assert resolve(str(f)).head_dim == 128


@pytest.mark.parametrize("kv", [7, 3, 64, 0, -8])
def test_kv_heads_must_divide_the_heads(tmp_path, kv):
    msg = _refusal(tmp_path, dict(LLAMA, num_key_value_heads=kv))
    assert "num_key_value_heads" in msg


@pytest.mark.parametrize("value, message", [
    ("yes", "field 'rope_scaling' must be an object with a rope_type"),
    (1.5, "field 'rope_scaling' must be an object"),
    ([8.0], "field 'rope_scaling' must be an object"),
    (True, "field 'rope_scaling' must be an object"),
    ({"rope_type": "banana", "factor": 8.0}, "type 'banana' is not a RoPE scaling"),
    ({"rope_type": ["llama3"]}, "is not a RoPE scaling"),
    ({"rope_type": "llama3", "factor": 8.0}, "needs 'low_freq_factor', 'high_freq_factor'"),
    ({"type": "linear"}, "needs 'factor'"),
    ({"rope_type": "linear", "factor": "8"}, "rope_scaling.factor must be a number"),
    ({"rope_type": "linear", "factor": 0.5}, "factor must be >= 1"),
    ({"rope_type": "yarn", "factor": 4, "beta_fast": "NaN"}, "rope_scaling.beta_fast must be a number"),
    ({"rope_type": "longrope", "short_factor": [], "long_factor": [1.0]}, "short_factor must be a list of numbers"),
])
def test_rope_scaling_of_an_unknown_shape_is_refused(tmp_path, value, message):
    assert message in _refusal(tmp_path, dict(LLAMA, rope_scaling=value))


def test_rope_parameters_of_transformers_5_are_checked_too(tmp_path):
    msg = _refusal(tmp_path, dict(LLAMA, rope_parameters={"full_attention": {"rope_type": "linear"}}))
    assert "rope_parameters.full_attention of type 'linear' needs 'factor'" in msg


@pytest.mark.parametrize("theta", [0, -1, "10000", None])
def test_rope_theta_is_a_positive_number(tmp_path, theta):
    if theta is None:  # absent or null: the model type's default
        f = tmp_path / "config.json"
        f.write_text(json.dumps(dict(LLAMA, rope_theta=None)))
        resolve(str(f))
        return
    assert "field 'rope_theta' must be a positive number" in _refusal(tmp_path, dict(LLAMA, rope_theta=theta))


def test_every_known_rope_type_reads_with_its_required_keys(tmp_path):
    for kind, rule in rope_types().items():
        value = {"rope_type": kind, **{k: [1.0] * 64 if k in rule.get("lists", []) else 2.0 for k in rule["required"]}}
        f = tmp_path / f"{kind}.json"
        f.write_text(json.dumps(dict(LLAMA, rope_scaling=value)))
        assert resolve(str(f)).num_heads == 32, kind


def test_learned_positions_ignore_rope_fields(tmp_path):
    gpt2 = {"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2, "vocab_size": 50, "rope_scaling": "yes"}
    f = tmp_path / "config.json"
    f.write_text(json.dumps(gpt2))
    assert resolve(str(f)).position_embedding == "learned"
