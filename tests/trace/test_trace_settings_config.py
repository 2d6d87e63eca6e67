"""Trace settings and config slicing: pure Python, no torch needed."""

import subprocess
import sys

import pytest

from trainplan.errors import TrainplanError
from trainplan.models import hf_config
from trainplan.trace.config import default_layers, layer_kinds, slice_config
from trainplan.trace.settings import TraceSettings


def test_unknown_precision_is_refused_with_the_known_ones():
    with pytest.raises(TrainplanError, match=r"trace: unknown precision 'fp4'; the tracer runs: bf16, fp16, bf16_pure"):
        TraceSettings.make(precision="fp4")


def test_unknown_policy_is_refused():
    with pytest.raises(TrainplanError, match=r"trace: unknown checkpointing policy 'some'; known: none, selective, full, partial"):
        TraceSettings(ac="some")


def test_non_positive_sizes_are_refused():
    with pytest.raises(TrainplanError, match="trace: seq_len must be a positive integer, got 0"):
        TraceSettings(seq_len=0)


def test_fp8_alias_maps_to_tensorwise():
    assert TraceSettings.make(precision="fp8").precision == "fp8_tensorwise"


DEEPSEEK = hf_config("deepseek-v3")  # 61 layers, first_k_dense_replace 3


def test_deepseek_kinds_and_slice_keep_one_dense_and_one_moe_layer():
    kinds = layer_kinds(DEEPSEEK)
    assert kinds[:3] == ["dense"] * 3 and set(kinds[3:]) == {"moe"} and len(kinds) == 61
    sliced = slice_config(DEEPSEEK, 2)
    assert sliced["num_hidden_layers"] == 2 and layer_kinds(sliced) == ["dense", "moe"]
    assert DEEPSEEK["first_k_dense_replace"] == 3  # the input is not modified


def test_sliding_window_layers_keep_both_attention_kinds():
    cfg = {**hf_config("gemma-2-9b"), "num_hidden_layers": 6,
           "layer_types": ["sliding_attention"] * 5 + ["full_attention"]}
    sliced = slice_config(cfg, 2)
    assert layer_kinds(sliced) == ["dense/sliding_attention", "dense/full_attention"]


NEMOTRON_H = hf_config("nemotron-h-8b")  # 52 blocks: 24 Mamba-2 (M), 4 attention (*), 24 MLP (-)


def test_nemotron_h_blocks_are_sliced_one_of_each_kind():
    """#24: the tracer builds one block of each kind (the catalog's hybrid_override_pattern letters,
    which transformers turns into layer_types itself), named by the spec's own layer kinds."""
    kinds = layer_kinds(NEMOTRON_H)
    assert len(kinds) == 52 and kinds[:2] == ["none/mamba2", "dense/none"] and kinds.count("none/full") == 4
    assert default_layers(NEMOTRON_H) == 3 and default_layers(DEEPSEEK) == 2
    sliced = slice_config(NEMOTRON_H, 3)
    assert sliced["hybrid_override_pattern"] == "M-*" and sliced["num_hidden_layers"] == 3
    assert layer_kinds(sliced) == ["none/mamba2", "dense/none", "none/full"]
    listed = {k: v for k, v in NEMOTRON_H.items() if k != "hybrid_override_pattern"} | {
        "layers_block_type": ["mamba", "mlp", "mamba", "attention", "mlp"], "num_hidden_layers": 5}
    assert slice_config(listed, 3)["layers_block_type"] == ["mamba", "mlp", "attention"]


def test_patterns_given_by_an_interval_are_sliced_to_hold_both_kinds():
    """Qwen3-Next (full attention every 4th layer) and Llama 4 (NoPE every 4th) give their patterns
    by an interval: a 2-layer slice once held linear (chunked) layers only; the interval shrinks to the
    slice. A Llama 4 config.json is traced as its text model (llama4_text)."""
    from trainplan.trace.config import load_config

    qwen = load_config("qwen3-next-80b-a3b")
    assert layer_kinds(slice_config(qwen, 2)) == ["moe/linear", "moe/full"]
    scout = load_config("llama-4-scout")
    assert scout["model_type"] == "llama4_text" and scout["num_hidden_layers"] == 48
    assert layer_kinds(slice_config(scout, 2)) == ["moe/chunked", "moe/nope"]


def test_hybrid_calibration_kinds_leave_the_other_families_alone():
    """A hybrid model's one-part blocks are fitted as their own kinds; every other family's layers keep
    the dense / moe kinds and the corrections they had (no sequence-length feature outside Mamba-2)."""
    from trainplan.calibration.activations import correction, family, features, kind
    from trainplan.costs.activations import saved_kinds
    from trainplan.models import resolve

    spec = resolve("nemotron-h-8b")
    assert family(spec) == "hybrid_ssm"
    assert [kind(False, b) for b in saved_kinds(spec)[:5]] == ["mamba2", "mlp", "mamba2", "mlp", "mamba2"]
    assert correction(spec, False, "none", block=saved_kinds(spec)[0], seq_len=2048) > 0
    llama = resolve("llama-3.1-8b")
    assert kind(False) == "dense" and kind(True) == "moe"
    assert correction(llama, False, "none", seq_len=2048) == correction(llama, False, "none")
    assert features(llama, False, 2048)["ssm_state_per_seq"] == 0


def test_planner_and_trace_import_without_torch():
    """trainplan.trace and the trace command import torch only inside functions."""
    code = ("import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None\n"
            "import trainplan.trace, trainplan.commands.trace, trainplan.calibration.activations\n"
            "from trainplan.trace._deps import require_torch\n"
            "try:\n    require_torch()\nexcept Exception as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "trainplan trace needs torch and transformers" in out
    assert "pip install 'trainplan[torch]'" in out


def test_llama4_maverick_default_slice_holds_every_kind():
    """#24: Maverick's NoPE layers (no_rope_layer_interval 4) are all MoE (interleave_moe_layer_step 2,
    meta-llama/Llama-4-Maverick-17B-128E config.json): one layer per kind (3) slices its NoPE layer
    onto a dense one, so the default slice is the 4 layers that hold dense/chunked, moe/chunked, moe/nope."""
    from trainplan.trace.config import load_config

    cfg = load_config("llama-4-maverick")
    assert set(layer_kinds(cfg)) == {"dense/chunked", "moe/chunked", "moe/nope"}
    assert "moe/nope" not in layer_kinds(slice_config(cfg, 3))
    k = default_layers(cfg)
    assert k == 4 and set(layer_kinds(slice_config(cfg, k))) == set(layer_kinds(cfg))
