"""`trainplan trace` on Jamba's Hugging Face code (transformers 5.24 modeling_jamba.py) on fake tensors,
per layer kind: what the memory model says of each kind, and where the traced code is not the code a
training run uses.

Without mamba_ssm and causal_conv1d (CPU, fake tensors), JambaMambaMixer falls back to its reference
PyTorch scan (mamba_selective_scan), which materialises per token the discretised A and B in fp32 for
every (channel, state) and keeps each step's fp32 state for the backward: the tracer compares it with
that path's accounting (costs/activations._mamba1_reference); mamba_ssm's kernel, which the planner
counts (costs/activations._mamba1), recomputes them (Gu & Dao 2023 sec. 3.3.2).
"""

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.torch

TINY = {"model_type": "jamba", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 96, "vocab_size": 256, "num_hidden_layers": 8, "num_experts": 4,
        "mamba_d_state": 16, "mamba_expand": 2}
S = 32


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    from trainplan.cli import main

    path = tmp_path_factory.mktemp("jamba") / "config.json"
    path.write_text(json.dumps(TINY))
    out = tmp_path_factory.mktemp("out") / "trace.json"
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
        code = main(["trace", "--model", str(path), "--seq-len", str(S), "--layers", "3", "--ac", "none", "--json"])
    assert code == 0
    out.write_text(buf.getvalue())
    return json.loads(buf.getvalue())


def test_every_kind_is_traced_and_compared(traced):
    kinds = traced["traced"]["activation_bytes_per_layer_by_kind"]
    assert sorted(kinds) == ["dense/mamba|ac=none", "dense/nope|ac=none", "moe/mamba|ac=none"]
    assert sorted(traced["relative_difference"]["activation_bytes_per_layer_by_kind"]) == sorted(kinds)
    assert traced["traced"]["params"] == traced["analytic"]["params"]
    assert any(n.startswith("Mamba-1 layers: the trace ran transformers' PyTorch scan") for n in traced["notes"])


def test_attention_and_moe_parts_match_the_memory_model_within_3_percent(traced):
    t = traced["traced"]["activation_bytes_per_layer_by_kind"]
    a = traced["analytic"]["activation_bytes_per_layer_by_kind"]
    # the NoPE attention layer with its dense SwiGLU MLP: the gqa_swiglu calibration of HF eager code
    assert traced["relative_difference"]["activation_bytes_per_layer_by_kind"]["dense/nope|ac=none"][
        "calibrated"] == pytest.approx(0, abs=0.03)
    # the MoE block, as the difference of two Mamba layers that differ only in it
    moe_t = t["moe/mamba|ac=none"] - t["dense/mamba|ac=none"]
    moe_a = a["moe/mamba|ac=none"]["model"] - a["dense/mamba|ac=none"]["model"]
    assert moe_a == pytest.approx(moe_t, rel=0.03)


def test_mamba_layers_match_the_reference_scan_and_the_planner_counts_the_kernel(traced):
    t = traced["traced"]["activation_bytes_per_layer_by_kind"]
    rel = traced["relative_difference"]["activation_bytes_per_layer_by_kind"]
    for kind in ("dense/mamba|ac=none", "moe/mamba|ac=none"):  # costs/activations._mamba1_reference
        assert rel[kind]["model"] == pytest.approx(0, abs=0.03)
        assert rel[kind]["calibrated"] == pytest.approx(0, abs=0.03)
    from trainplan.costs.activations import ActivationContext, layer_activations
    from trainplan.models import spec_from_config
    from trainplan.models.layers import MAMBA

    m = spec_from_config(TINY, name="tiny", where="tiny.json")
    kernel = layer_activations(m, False, ActivationContext(seq_len=S), "none", MAMBA, True).total * S
    d, n = 2 * 64, 16
    # the kernel recomputes in backward what the reference loop keeps: exp(dt A) and dt B in fp32
    # (4 + 4 bytes per channel and state) and each step's fp32 state (4) and bf16 copy (2), per token
    assert t["dense/mamba|ac=none"] - kernel >= (8 + 4 * (S - 1) / S + 2) * d * n * S
