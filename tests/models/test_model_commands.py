"""`trainplan models` and `trainplan model`: the table, the JSON, the summary, the errors."""

import json

import pytest

from trainplan.models import catalog, count_params, names


def test_models_table_fits_80_columns_and_lists_every_model(cli):
    code, out, err = cli("models")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert max(len(x) for x in lines) <= 80
    assert lines[0].split() == ["name", "type", "layers", "hidden", "total", "B", "active", "B",
                                "context"]
    rows = {x.split()[0]: x.split() for x in lines[2:] if x and x[0] != "-" and ":" not in x}
    assert sorted(rows) == names()
    assert rows["mixtral-8x7b"] == ["mixtral-8x7b", "mixtral", "32", "4096", "46.70", "12.88",
                                    "32768"]


def test_models_json(cli):
    code, out, _ = cli("models", "--json")
    assert code == 0
    rows = json.loads(out)
    assert [r["name"] for r in rows] == names()
    q = next(r for r in rows if r["name"] == "qwen3-30b-a3b")
    assert q["params_total"] == count_params(catalog()["qwen3-30b-a3b"]).total
    assert q["context_length"] == 40960 and q["moe"] is True


def test_model_json_has_spec_and_counts(cli):
    code, out, _ = cli("model", "deepseek-v3", "--json")
    assert code == 0
    d = json.loads(out)
    c = count_params(catalog()["deepseek-v3"])
    assert d["name"] == "deepseek-v3"
    assert d["spec"]["mla"]["kv_lora_rank"] == 512 and d["spec"]["moe"]["num_experts"] == 256
    assert d["params"]["total"] == c.total and d["params"]["active"] == c.active
    assert d["params"]["embedding"] == 129280 * 7168
    assert len(d["params"]["per_layer"]) == 61
    assert d["params"]["per_layer"][0]["experts"] == 0


def test_model_from_a_config_path(cli, tmp_path):
    cfg = {"model_type": "qwen3", "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
           "intermediate_size": 96, "tie_word_embeddings": True}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    code, out, _ = cli("model", str(tmp_path / "config.json"), "--json")
    assert code == 0
    d = json.loads(out)
    assert d["spec"]["qk_norm"] is True and d["params"]["lm_head"] == 0
    # embedding 64000, per layer: q 64*64, k and v 64*32 each, o 64*64, qk-norms 2*16,
    # mlp 3*64*96, 2 norms of 64; final norm 64
    layer = 64 * 64 * 2 + 64 * 32 * 2 + 2 * 16 + 3 * 64 * 96 + 2 * 64
    assert d["params"]["total"] == 64000 + 2 * layer + 64


def test_model_summary_is_readable(cli):
    code, out, _ = cli("model", "gpt-oss-120b")
    assert code == 0
    assert out.startswith("gpt-oss-120b (gpt_oss)\n")
    assert "window     128 tokens on 18 layers" in out
    assert "moe        128 experts, top-4, expert ffn 2880; 36 MoE, 0 dense" in out
    assert "total        116,829,156,672 =   116.829 B" in out
    assert max(len(x) for x in out.splitlines()) <= 80


@pytest.mark.parametrize("argv, message", [
    (["model", "mixtral-8x7"], ("trainplan model: error: unknown model 'mixtral-8x7': did you mean "
                               "'mixtral-8x7b'? known: ")),
    (["model", "no/such/config.json"], ("trainplan model: error: model config 'no/such/config.json' "
                                       "does not exist")),
])
def test_model_errors_are_one_line_exit_2(cli, argv, message):
    code, out, err = cli(*argv)
    assert code == 2 and out == ""
    assert err.startswith(message) and err.count("\n") == 1
