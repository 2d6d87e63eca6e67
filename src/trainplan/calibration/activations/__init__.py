"""Activation calibration: what the analytic per-layer accounting (costs/activations.py) misses
against a trace of the real model code, as data.

`hf_eager.json` (schema `trainplan-activation-calibration/1`) holds, per architecture family and
checkpointing policy and layer kind, coefficients c of a linear correction in bytes per token:

    traced = layer_activations(spec, moe_layer, ctx, policy).total + sum_i c_i * x_i(spec, moe_layer)

with the features x_i of FEATURES below. They were fitted on traces of the Hugging Face eager code
(bf16, flash attention, no TP/SP/CP) at the shapes and settings stored in the file, with
leave-one-shape-out cross-validated error. Regenerate: `python -m trainplan.trace.calibrate`.

Pure Python: costs/memory.py may call `correction()` without torch.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

SCHEMA = "trainplan-activation-calibration/1"
FILE = Path(__file__).with_name("hf_eager.json")
FEATURES = ("hidden", "q_dim", "kv_dim", "ffn", "topk_expert_ffn", "topk_hidden", "experts", "topk", "heads",
            "kv_heads", "q_lora", "kv_lora", "rope", "heads_nope", "heads_v", "one")
FAMILIES = ("dense_mha", "gqa_swiglu", "moe", "mla")


def family(spec) -> str:
    """dense_mha | gqa_swiglu | moe | mla, from the spec's fields (never from ratios)."""
    if spec.mla is not None:
        return "mla"
    if spec.moe is not None:
        return "moe"
    if spec.gated_mlp:
        return "gqa_swiglu"
    return "dense_mha"


def features(spec, moe_layer: bool) -> dict[str, float]:
    """Per-layer shape features (elements per token) the correction is linear in."""
    h = spec.hidden_size
    a = spec.mla
    moe = spec.moe if moe_layer else None
    return {
        "hidden": h,
        "q_dim": spec.num_heads * (a.qk_nope_head_dim + a.qk_rope_head_dim) if a else spec.q_dim,
        "kv_dim": 0 if a else spec.kv_dim,
        "ffn": (moe.shared_expert_ffn_size if moe.num_shared_experts else 0) if moe else spec.ffn_size,
        "topk_expert_ffn": moe.experts_per_token * moe.expert_ffn_size if moe else 0,
        "topk_hidden": moe.experts_per_token * h if moe else 0,
        "experts": moe.num_experts if moe else 0,
        "topk": moe.experts_per_token if moe else 0,
        "heads": spec.num_heads,
        "kv_heads": 0 if a else spec.num_kv_heads,
        "q_lora": (a.q_lora_rank or 0) if a else 0,
        "kv_lora": a.kv_lora_rank if a else 0,
        "rope": a.qk_rope_head_dim if a else 0,
        "heads_nope": spec.num_heads * a.qk_nope_head_dim if a else 0,
        "heads_v": spec.num_heads * a.v_head_dim if a else 0,
        "one": 1,
    }


@functools.cache
def load(path: str | None = None) -> dict:
    p = Path(path) if path else FILE
    data = json.loads(p.read_text())
    assert data.get("schema") == SCHEMA, f"{p}: not {SCHEMA}"
    return data


def correction(spec, moe_layer: bool, policy: str, data: dict | None = None) -> float:
    """Bytes per token to add to the analytic layer for this family/policy/kind (0 if not calibrated)."""
    data = data or (load() if FILE.exists() else {"families": {}})
    kind = "moe" if moe_layer else "dense"
    entry = data["families"].get(family(spec), {}).get(policy, {}).get(kind)
    if entry is None and not moe_layer:
        # a dense layer of an MoE model (Jamba's, Llama 4's every other layer): the moe fit traced MoE
        # layers only; the dense layer is what family() names for a model without experts and its MLP
        dense = "gqa_swiglu" if spec.gated_mlp else "dense_mha"
        entry = data["families"].get(dense, {}).get(policy, {}).get(kind)
    if entry is None:
        return 0.0
    x = features(spec, moe_layer)
    return sum(c * x[f] for f, c in entry["coefficients"].items())
