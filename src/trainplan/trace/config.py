"""Hugging Face config.json handling for the tracer: load, slice to K layers, name layer kinds.

A trace builds only K decoder layers (default 2) and extrapolates to the full depth. Layers are not
all alike (DeepSeek's first dense layers, Qwen-MoE's mlp_only_layers, Gemma/gpt-oss sliding-window
layers), so every layer gets a *kind* ("dense", "moe", "moe/sliding_attention", ...), the K-layer
slice is chosen to contain every kind of the full model where K allows, and the full depth is the
sum over its layers of the traced bytes of that layer's kind.
"""

from __future__ import annotations

import copy

from trainplan.errors import TrainplanError

# Keys that hold the number of decoder layers (first one present wins).
_DEPTH_KEYS = ("num_hidden_layers", "n_layer", "num_layers")


def load_config(model: str) -> dict:
    """A config dict from a catalog name, a config.json path or a folder holding one."""
    from trainplan.models import hf_config
    from trainplan.models.adapters import language_model

    return language_model(hf_config(model))


# Patterns a config gives by an interval, unless a per-layer list (the second key) is there:
# Qwen3-Next's full attention on every full_attention_interval-th layer, Llama 4's NoPE layers
# (transformers' Qwen3NextConfig and Llama4TextConfig derive their layer lists from these)
_INTERVALS = {"qwen3_next": ("full_attention_interval", "layer_types"),
              "llama4_text": ("no_rope_layer_interval", "no_rope_layers")}


def depth_key(cfg: dict) -> str:
    for k in _DEPTH_KEYS:
        if isinstance(cfg.get(k), int):
            return k
    raise TrainplanError(
        f"model config has no layer count ({' / '.join(_DEPTH_KEYS)}); add num_hidden_layers"
    )


def num_layers(cfg: dict) -> int:
    return cfg[depth_key(cfg)]


def layer_kinds(cfg: dict) -> list[str]:
    """The kind of every decoder layer: dense, MoE or none (a Mamba-2 or attention block without an
    MLP) as the planner's spec says (models/layers.py, one rule for the parameter counts, the memory
    model, the trainer and the tracer), plus the attention kind from the config's own `layer_types`
    when layers differ, or else the spec's mixer when the config gives the pattern by a rule (Jamba:
    Mamba-1 or NoPE attention by period); a Nemotron-H block is named by the spec's kind alone."""
    from trainplan.models import spec_from_config
    from trainplan.models.layers import layer_kinds as ffn
    from trainplan.models.layers import layer_pattern

    spec = spec_from_config(cfg, name="trace", where="trace config")
    if spec.mlp_layers:  # one-part blocks (Nemotron-H): the spec's own kind of each, e.g. none/mamba2
        return [f"{k.mlp}/{k.attention}" for k in layer_pattern(spec)]
    kinds = list(ffn(spec))
    types = cfg.get("layer_types")
    mixers = [k.attention for k in layer_pattern(spec)]
    if isinstance(types, list) and len(set(types)) > 1:
        kinds = [f"{k}/{t}" for k, t in zip(kinds, types, strict=False)]
    elif len(set(mixers)) > 1:  # a pattern the config gives by rule, not as a list (Jamba's periods)
        kinds = [f"{k}/{a}" for k, a in zip(kinds, mixers, strict=True)]
    return kinds


def default_layers(cfg: dict) -> int:
    """Layers a trace builds unless told: the fewest (at least 2, at least one per kind) whose
    slice_config holds every kind of the full model, so that nothing is extrapolated from another
    kind. One per kind is not always enough: Llama 4 Maverick's NoPE layers (every 4th) are all MoE
    (every 2nd), and a 3-layer slice puts its NoPE layer on a dense one (dense/nope, a kind the model
    lacks, and no moe/nope); 4 layers hold dense/chunked, moe/chunked and moe/nope."""
    want = set(layer_kinds(cfg))
    first = max(2, len(want))
    n = num_layers(cfg)
    return next((k for k in range(first, n) if set(layer_kinds(slice_config(cfg, k))) >= want),
                max(first, n))  # else the whole model, which holds them all


# Jamba's layers: attention where i % attn_layer_period == attn_layer_offset, MoE where
# i % expert_layer_period == expert_layer_offset (JambaConfig.layers_block_type, layers_num_experts)
_PERIODIC = "jamba"


def _periodic_slice(out: dict, k: int, full: list[str]) -> dict:
    """The smallest periods and offsets whose k layers hold the kinds of the full model and no other
    (else also others; or out as it is when k layers cannot hold them all)."""
    import itertools

    want = set(full)
    pairs = [(p, o) for p in range(1, k + 1) for o in range(p)]
    trials = [dict(out, attn_layer_period=ap, attn_layer_offset=ao, expert_layer_period=ep, expert_layer_offset=eo)
              for (ap, ao), (ep, eo) in itertools.product(pairs, pairs)]
    held = [set(layer_kinds(t)) for t in trials]
    exact = [t for t, h in zip(trials, held) if h == want]
    more = [t for t, h in zip(trials, held) if h > want]
    return (exact or more or [out])[0]


def slice_config(cfg: dict, k: int) -> dict:
    """A copy of cfg with k decoder layers that contain as many of the full model's kinds as fit.

    The shapes of every layer are untouched; only which layer is dense/MoE/sliding changes, so a
    traced layer of a kind has exactly the bytes of a full-model layer of that kind.
    """
    out = copy.deepcopy(cfg)
    out[depth_key(cfg)] = k
    full = layer_kinds(cfg)
    if k >= len(full):
        return out
    if "first_k_dense_replace" in cfg and (cfg.get("first_k_dense_replace") or 0) > 0:
        has_moe = any(x.startswith("moe") for x in full)
        fkd = cfg["first_k_dense_replace"]
        out["first_k_dense_replace"] = min(fkd, k - 1) if (has_moe and k >= 2) else min(k, fkd)
    if cfg.get("mlp_only_layers"):
        has_moe = any(x.startswith("moe") for x in full)
        out["mlp_only_layers"] = [0] if (has_moe and k >= 2) else list(range(k))
    # the per-layer lists (and Nemotron-H's block letters): the distinct kinds in order, repeated
    for key in ("layer_types", "layers_block_type", "hybrid_override_pattern"):
        types = cfg.get(key)
        if isinstance(types, (list, str)):
            distinct = list(dict.fromkeys(types))
            sliced = [distinct[i % len(distinct)] for i in range(k)]
            out[key] = "".join(sliced) if isinstance(types, str) else sliced
    if "max_window_layers" in cfg and isinstance(cfg.get("max_window_layers"), int):
        out["max_window_layers"] = min(cfg["max_window_layers"], k)
    interval = _INTERVALS.get(cfg.get("model_type"))
    if interval and not isinstance(cfg.get(interval[1]), list) and len({x.split("/")[-1] for x in full}) > 1:
        out[interval[0]] = k  # the slice's last layer is the other kind, the ones before it the first
    if cfg.get("model_type") == _PERIODIC:  # its periods, stated or JambaConfig's defaults
        out = _periodic_slice(out, k, full)
    return out


def hf_config_object(cfg: dict):
    """transformers PretrainedConfig from a dict; an unknown model_type is a one-line error."""
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    mt = cfg.get("model_type")
    if not isinstance(mt, str):
        raise TrainplanError("model config has no model_type; add the Hugging Face model_type (e.g. \"llama\")")
    if mt not in CONFIG_MAPPING:
        import transformers

        raise TrainplanError(
            f"model_type {mt!r} is not known to transformers {transformers.__version__}; "
            "upgrade transformers or use a config of a supported architecture"
        )
    kw = {k: v for k, v in cfg.items() if k not in ("model_type", "architectures", "transformers_version",
                                                     "auto_map", "quantization_config")}
    try:
        return AutoConfig.for_model(mt, **kw)
    except (TypeError, ValueError) as e:
        raise TrainplanError(f"model config for {mt!r} is not accepted by transformers: {e}") from None
