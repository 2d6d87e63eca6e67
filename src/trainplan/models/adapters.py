"""One adapter per Hugging Face `model_type`: config.json dict -> ModelSpec.

Each adapter reads exactly the fields the transformers model class of that type reads, with the
same defaults when a field is absent (transformers 5.x configuration_*.py / modeling_*.py), so
that count_params(spec) equals the parameter count of the HF model built from the same config.
Architecture is never guessed from ratios: the activation, biases, tying and head_dim are read.
The hybrid state-space decoders (Nemotron-H / Nemotron 3, Jamba) have their adapters in
hybrid_adapters.py; the ADAPTERS table here names every model_type.
"""

from __future__ import annotations

from collections.abc import Callable

from trainplan.errors import TrainplanError
from trainplan.models.checks import LIMITS, check_spec
from trainplan.models.config_reader import GATED_ACT, PLAIN_ACT, ConfigReader
from trainplan.models.hybrid_adapters import jamba, nemotron_h
from trainplan.models.layers import (
    CHUNKED,
    DENSE,
    FULL,
    LINEAR,
    NOPE,
    SLIDING,
    ffn_kinds,
)
from trainplan.models.rope import check_rope
from trainplan.models.spec import (
    LinearAttentionSpec,
    MLASpec,
    ModelSpec,
    MoESpec,
)


def _base(c: ConfigReader, *, kv_default: int | None, max_pos_default: int) -> dict:
    """Sizes every decoder config has (LlamaConfig names); kv_default None means = heads. The layer
    count is bounded here, before an adapter walks the layers (Llama 4's MoE and RoPE patterns once
    looped over num_hidden_layers 10**12 before check_spec could refuse it)."""
    heads = c.integer("num_attention_heads")
    layers = c.integer("num_hidden_layers")
    if layers > LIMITS["num_layers"]:
        raise TrainplanError(f"{c.where}: num_layers {layers:,} is beyond the limit of {LIMITS['num_layers']:,} "
                             "(num_hidden_layers); fix the config.json")
    return {
        "model_type": c.model_type,
        "num_layers": layers,
        "hidden_size": c.integer("hidden_size"),
        "num_heads": heads,
        "num_kv_heads": c.integer("num_key_value_heads", kv_default or heads),
        "vocab_size": c.integer("vocab_size"),
        "max_position_embeddings": c.integer("max_position_embeddings", max_pos_default),
    }


def _sliding(c: ConfigReader, base: dict, window: int | None, pattern: Callable[[int], bool]):
    """(sliding_window, how many layers use it, and which when not all do: attention_layers);
    layer_types wins over the per-type pattern."""
    if window is None:
        return {"sliding_window": None, "sliding_window_layers": 0}
    n_layers = base["num_layers"]
    types = c.layer_types(n_layers)
    if types is not None:
        windowed = tuple(t == "sliding_attention" for t in types)
    else:
        windowed = tuple(pattern(i) for i in range(n_layers))
    n = sum(windowed)
    out = {"sliding_window": window if n else None, "sliding_window_layers": n}
    if 0 < n < n_layers:  # local and global layers mixed: say which is which (models/layers.py)
        out["attention_layers"] = tuple(SLIDING if w else FULL for w in windowed)
    return out


def _every_layer(_: int) -> bool:
    return True


def _alternate(i: int) -> bool:  # Gemma 2, gpt-oss: layers 0, 2, 4, ... use the window
    return i % 2 == 0


# ---- dense decoders -------------------------------------------------------------------------
def llama(c: ConfigReader) -> dict:
    b = _base(c, kv_default=None, max_pos_default=2048)
    bias = c.flag("attention_bias", False)
    return dict(
        b, head_dim=c.head_dim(b, None), ffn_size=c.integer("intermediate_size"),
        mlp=c.choice("hidden_act", GATED_ACT, "silu"),
        tied_embeddings=c.flag("tie_word_embeddings", False),
        qkv_bias=bias, o_bias=bias, mlp_bias=c.flag("mlp_bias", False),
    )


def mistral(c: ConfigReader, window_default: int | None = 4096) -> dict:
    b = _base(c, kv_default=8, max_pos_default=131072)
    window = c.optional_int("sliding_window", window_default)
    return dict(
        b, head_dim=c.head_dim(b, None), ffn_size=c.integer("intermediate_size"),
        mlp=c.choice("hidden_act", GATED_ACT, "silu"),
        tied_embeddings=c.flag("tie_word_embeddings", False),
        **_sliding(c, b, window, _every_layer),
    )


def _qwen_window(c: ConfigReader, b: dict) -> dict:
    """Qwen2/Qwen3: the window applies only with use_sliding_window, from max_window_layers on."""
    if not c.flag("use_sliding_window", False):
        return _sliding(c, b, None, _every_layer)
    first = c.integer("max_window_layers", 28, minimum=0)
    return _sliding(c, b, c.optional_int("sliding_window", 4096), lambda i: i >= first)


def qwen2(c: ConfigReader) -> dict:
    b = _base(c, kv_default=32, max_pos_default=32768)
    return dict(
        b, head_dim=c.head_dim(b, None), ffn_size=c.integer("intermediate_size"),
        mlp=c.choice("hidden_act", GATED_ACT, "silu"),
        tied_embeddings=c.flag("tie_word_embeddings", False),
        qkv_bias=True,  # Qwen2Attention: q, k, v always carry a bias; o_proj never does
        **_qwen_window(c, b),
    )


def qwen3(c: ConfigReader) -> dict:
    b = _base(c, kv_default=32, max_pos_default=32768)
    bias = c.flag("attention_bias", False)
    return dict(
        b, head_dim=c.head_dim(b, 128), ffn_size=c.integer("intermediate_size"),
        mlp=c.choice("hidden_act", GATED_ACT, "silu"),
        tied_embeddings=c.flag("tie_word_embeddings", False),
        qkv_bias=bias, o_bias=bias, qk_norm=True, **_qwen_window(c, b),
    )


def gemma2(c: ConfigReader) -> dict:
    b = _base(c, kv_default=4, max_pos_default=8192)
    bias = c.flag("attention_bias", False)
    return dict(
        b, head_dim=c.head_dim(b, 256), ffn_size=c.integer("intermediate_size"),
        # Gemma's MLP reads hidden_activation; hidden_act is a legacy duplicate.
        mlp=c.choice("hidden_activation", GATED_ACT, "gelu_pytorch_tanh"),
        tied_embeddings=c.flag("tie_word_embeddings", True),
        qkv_bias=bias, o_bias=bias, norms_per_layer=4,  # pre/post attention, pre/post MLP
        **_sliding(c, b, c.optional_int("sliding_window", 4096), _alternate),
    )


def gemma3_text(c: ConfigReader) -> dict:
    b = _base(c, kv_default=4, max_pos_default=131072)
    bias = c.flag("attention_bias", False)
    period = c.integer(("sliding_window_pattern", "_sliding_window_pattern"), 6)
    return dict(
        b, head_dim=c.head_dim(b, 256), ffn_size=c.integer("intermediate_size"),
        mlp=c.choice("hidden_activation", GATED_ACT, "gelu_pytorch_tanh"),
        tied_embeddings=c.flag("tie_word_embeddings", True),
        qkv_bias=bias, o_bias=bias, qk_norm=True, norms_per_layer=4,
        # five local layers, then one global (Gemma 3 report, section 2.2)
        **_sliding(c, b, c.optional_int("sliding_window", 4096), lambda i: (i + 1) % period != 0),
    )


def gpt2(c: ConfigReader) -> dict:
    """GPT-2 naming; also GPT-3-style dense GPTs (learned positions, LayerNorm with bias)."""
    hidden = c.integer("n_embd")
    heads = c.integer("n_head")
    if hidden % heads:  # GPT2Attention splits n_embd into n_head equal heads, and raises otherwise
        raise TrainplanError(f"{c.where}: n_embd {hidden} is not a multiple of n_head {heads}; fix the config.json")
    n_inner = c.optional_int("n_inner", None)
    return {
        "model_type": c.model_type, "num_layers": c.integer("n_layer"), "hidden_size": hidden,
        "num_heads": heads, "num_kv_heads": heads, "head_dim": hidden // heads,
        "ffn_size": 4 * hidden if n_inner is None else n_inner,
        "vocab_size": c.integer("vocab_size"),
        "mlp": c.choice("activation_function", PLAIN_ACT, "gelu_new"), "norm": "layernorm",
        "tied_embeddings": c.flag("tie_word_embeddings", True),
        "position_embedding": "learned", "max_position_embeddings": c.integer("n_positions", 1024),
        "qkv_bias": True, "o_bias": True, "mlp_bias": True,  # Conv1D layers all carry a bias
    }


# ---- mixture of experts ---------------------------------------------------------------------
def mixtral(c: ConfigReader) -> dict:
    d = mistral(c, window_default=None)  # MixtralConfig: no window unless the config sets one
    d["moe"] = MoESpec(
        num_experts=c.integer(("num_local_experts", "num_experts")),
        experts_per_token=c.integer("num_experts_per_tok"),
        expert_ffn_size=d["ffn_size"],
        aux_loss_coef=c.number("router_aux_loss_coef", 0.0),
    )
    d["ffn_size"] = 0  # every layer is MoE; intermediate_size is the expert size
    return d


def _qwen_moe(c: ConfigReader, d: dict, **extra) -> dict:
    """Qwen2/Qwen3-MoE rule: every decoder_sparse_step-th layer is MoE, except mlp_only_layers."""
    moe = MoESpec(
        num_experts=c.integer(("num_experts", "num_local_experts")),
        experts_per_token=c.integer("num_experts_per_tok"),
        expert_ffn_size=c.integer("moe_intermediate_size"),
        moe_layer_freq=c.integer("decoder_sparse_step", 1),
        dense_layers=c.int_list("mlp_only_layers", []),
        aux_loss_coef=c.number("router_aux_loss_coef", 0.0),
        **extra,
    )
    dense = ffn_kinds(moe, d["num_layers"]).count(DENSE)
    d["ffn_size"] = c.integer("intermediate_size") if dense else 0
    d["moe"] = moe
    return d


def qwen3_moe(c: ConfigReader) -> dict:
    b = _base(c, kv_default=4, max_pos_default=32768)
    bias = c.flag("attention_bias", False)
    d = dict(
        b, head_dim=c.head_dim(b, None), mlp=c.choice("hidden_act", GATED_ACT, "silu"),
        tied_embeddings=c.flag("tie_word_embeddings", False),
        qkv_bias=bias, o_bias=bias, qk_norm=True, **_qwen_window(c, b),
    )
    return _qwen_moe(c, d)


def qwen2_moe(c: ConfigReader) -> dict:
    b = _base(c, kv_default=16, max_pos_default=32768)
    shared = c.integer("shared_expert_intermediate_size", minimum=0)
    d = dict(
        b, head_dim=c.head_dim(b, None), mlp=c.choice("hidden_act", GATED_ACT, "silu"),
        tied_embeddings=c.flag("tie_word_embeddings", False),
        qkv_bias=c.flag("qkv_bias", True), **_qwen_window(c, b),
    )
    # one shared expert of shared_expert_intermediate_size, scaled by a sigmoid gate Linear(h, 1)
    return _qwen_moe(c, d, num_shared_experts=1 if shared else 0, shared_expert_ffn_size=shared,
                     shared_expert_gate=bool(shared))


def deepseek_v3(c: ConfigReader) -> dict:
    """DeepSeek-V3 (arXiv 2412.19437): MLA attention, first_k_dense_replace dense layers, one
    shared expert, sigmoid routing restricted to topk_group of n_group expert groups, MTP."""
    b = _base(c, kv_default=128, max_pos_default=4096)
    bias = c.flag("attention_bias", False)
    mla = MLASpec(
        q_lora_rank=c.optional_int("q_lora_rank", 1536),
        kv_lora_rank=c.integer("kv_lora_rank"),
        qk_nope_head_dim=c.integer("qk_nope_head_dim"),
        qk_rope_head_dim=c.integer("qk_rope_head_dim"),
        v_head_dim=c.integer("v_head_dim"),
    )
    n_shared = c.integer("n_shared_experts", 1, minimum=0)
    expert_ffn = c.integer("moe_intermediate_size")
    moe = MoESpec(
        num_experts=c.integer(("n_routed_experts", "num_local_experts")),
        experts_per_token=c.integer("num_experts_per_tok"),
        expert_ffn_size=expert_ffn,
        num_shared_experts=n_shared,
        shared_expert_ffn_size=n_shared * expert_ffn,  # HF builds the shared experts as one MLP
        first_dense_layers=c.integer("first_k_dense_replace", 3, minimum=0),
        # HF keeps e_score_correction_bias as a buffer, not a parameter: not counted.
        router_score_correction_bias=False,
        num_groups=c.integer("n_group", 8),
        topk_groups=c.integer("topk_group", 4),
        router_score=c.choice("scoring_func", {"sigmoid": "sigmoid", "softmax": "softmax"}, "sigmoid"),
        # noaux_tc: the auxiliary-loss-free balancing of the V3 report (section 2.1.2)
        load_balance=c.choice("topk_method", {"noaux_tc": "aux_free", "greedy": "aux_loss",
                                              "group_limited_greedy": "aux_loss"}, "noaux_tc"),
    )
    return dict(
        b, head_dim=mla.qk_nope_head_dim + mla.qk_rope_head_dim,  # q/k head; v uses v_head_dim
        ffn_size=c.integer("intermediate_size") if moe.first_dense_layers else 0,
        mlp=c.choice("hidden_act", GATED_ACT, "silu"),
        tied_embeddings=c.flag("tie_word_embeddings", False),
        qkv_bias=bias, o_bias=bias, moe=moe, mla=mla,
        mtp_layers=c.integer(("num_nextn_predict_layers", "num_mtp_layers"), 1, minimum=0),
    )


def gpt_oss(c: ConfigReader) -> dict:
    """gpt-oss (OpenAI 2025 model card): biases everywhere, a learned attention-sink logit per
    head, dense and 128-token banded attention alternating, every layer MoE with biased experts."""
    b = _base(c, kv_default=8, max_pos_default=131072)
    bias = c.flag("attention_bias", True)
    d = dict(
        b, head_dim=c.head_dim(b, 64), ffn_size=0,
        mlp=c.choice("hidden_act", GATED_ACT, "silu"),  # clamped SwiGLU, still gate * up
        tied_embeddings=c.flag("tie_word_embeddings", False),
        qkv_bias=bias, o_bias=bias, attention_sinks=True,
        **_sliding(c, b, c.optional_int("sliding_window", 128), _alternate),
    )
    d["moe"] = MoESpec(
        num_experts=c.integer(("num_local_experts", "num_experts")),
        experts_per_token=c.integer(("num_experts_per_tok", "experts_per_token"), 4),
        expert_ffn_size=c.integer("intermediate_size"),
        router_bias=True, expert_bias=True,
        aux_loss_coef=c.number("router_aux_loss_coef", 0.0),
    )
    return d


def llama4_text(c: ConfigReader) -> dict:
    """Llama 4 text decoder (transformers 5.24 configuration_llama4.py / modeling_llama4.py,
    Llama4TextConfig defaults): MoE on the layers `moe_layers` lists (default every
    interleave_moe_layer_step-th), a dense MLP of intermediate_size_mlp on the others; each MoE layer
    has one shared expert of intermediate_size beside the routed ones, a bias-free router, top-k
    sigmoid scores. Attention: layers with RoPE attend inside chunks of attention_chunk_size
    (layer_types chunked_attention), the NoPE layers (no_rope_layers 0: every
    no_rope_layer_interval-th) globally. The L2 qk-norm has no weight: no parameters."""
    b = _base(c, kv_default=8, max_pos_default=4096 * 32)
    n = b["num_layers"]
    bias = c.flag("attention_bias", False)
    step = c.integer("interleave_moe_layer_step", 1)
    listed = c.data.get("moe_layers")
    moe_layers = set(c.int_list("moe_layers", [])) if listed is not None else None
    moe = MoESpec(
        num_experts=c.integer("num_local_experts", 16),
        experts_per_token=c.integer("num_experts_per_tok", 1),
        expert_ffn_size=c.integer("intermediate_size", 8192),
        num_shared_experts=1, shared_expert_ffn_size=c.integer("intermediate_size", 8192),
        # an explicit moe_layers list overrides the step (Llama4TextConfig.__post_init__)
        moe_layer_freq=1 if moe_layers is not None else step,
        dense_layers=tuple(i for i in range(n) if i not in moe_layers) if moe_layers is not None else (),
        router_score="sigmoid",
        aux_loss_coef=c.number("router_aux_loss_coef", 0.001),
    )
    dense = ffn_kinds(moe, n).count(DENSE)
    return dict(
        b, head_dim=c.head_dim(b, 128), ffn_size=c.integer("intermediate_size_mlp", 16384) if dense else 0,
        mlp=c.choice("hidden_act", GATED_ACT, "silu"),
        tied_embeddings=c.flag("tie_word_embeddings", False),
        qkv_bias=bias, o_bias=bias, moe=moe, **_llama4_attention(c, n),
    )


def _llama4_attention(c: ConfigReader, n: int) -> dict:
    """attention_layers of Llama 4: chunked (RoPE layers with a chunk size), nope (no RoPE: global),
    full (RoPE without a chunk size, or layer_types full_attention)."""
    interval = c.integer("no_rope_layer_interval", 4)
    rope = c.int_list("no_rope_layers", []) or tuple(int((i + 1) % interval != 0) for i in range(n))
    if len(rope) != n or any(x not in (0, 1) for x in rope):
        raise TrainplanError(f"{c.where}: no_rope_layers must list {n} entries of 0 or 1; fix the config.json")
    chunk = c.optional_int("attention_chunk_size", 8192)
    types = c.data.get("layer_types")
    if types is None:
        types = ["chunked_attention" if r and chunk is not None else "full_attention" for r in rope]
    allowed = {"chunked_attention", "full_attention"}
    if not isinstance(types, list) or len(types) != n or any(t not in allowed for t in types):
        raise TrainplanError(f"{c.where}: layer_types must list {n} entries, each 'chunked_attention' or "
                             "'full_attention'; fix the config.json")
    if "chunked_attention" in types and chunk is None:
        raise TrainplanError(f"{c.where}: chunked_attention layers need attention_chunk_size; fix the config.json")
    layers = tuple(CHUNKED if t == "chunked_attention" else FULL if r else NOPE for t, r in zip(types, rope))
    return {"attention_layers": layers, "attention_chunk_size": chunk if CHUNKED in layers else None}


def language_model(config: dict) -> dict:
    """The decoder's own config dict: a Llama 4 config.json's text part (Llama4ForConditionalGeneration
    holds it under text_config; AutoModelForCausalLM builds it as llama4_text), else the config."""
    text = config.get("text_config")
    if config.get("model_type") == "llama4" and isinstance(text, dict):
        return {**text, "model_type": "llama4_text"}
    return config


def llama4(c: ConfigReader) -> dict:
    """A Llama 4 config.json (Llama4ForConditionalGeneration): its text part (language_model)."""
    text = language_model(c.data)
    if text is c.data:
        raise TrainplanError(f"{c.where}: a llama4 config.json needs its text_config object (the language "
                             "model's sizes); give the model's own config.json")
    d = llama4_text(ConfigReader(text, f"{c.where} text_config", "llama4_text"))
    return dict(d, model_type=c.model_type)


def glm4_moe(c: ConfigReader) -> dict:
    """GLM-4.5 / 4.6 (transformers 5.24 configuration_glm4_moe.py / modeling_glm4_moe.py): GQA with
    biases on q, k, v only (attention_bias) and optional qk RMSNorms (use_qk_norm), the first
    first_k_dense_replace layers dense, then MoE with n_shared_experts shared experts (one MLP of
    n_shared_experts x moe_intermediate_size) and a sigmoid router whose e_score_correction_bias is a
    buffer (not counted), as in DeepSeek-V3; MTP modules (num_nextn_predict_layers) not built."""
    b = _base(c, kv_default=8, max_pos_default=131072)
    n_shared = c.integer("n_shared_experts", 1, minimum=0)
    expert_ffn = c.integer("moe_intermediate_size", 1408)
    moe = MoESpec(
        num_experts=c.integer(("n_routed_experts", "num_local_experts"), 128),
        experts_per_token=c.integer("num_experts_per_tok", 8),
        expert_ffn_size=expert_ffn,
        num_shared_experts=n_shared,
        shared_expert_ffn_size=n_shared * expert_ffn,
        first_dense_layers=c.integer("first_k_dense_replace", 1, minimum=0),
        num_groups=c.integer("n_group", 1),
        topk_groups=c.integer("topk_group", 1),
        router_score="sigmoid",
        load_balance="aux_free",  # e_score_correction_bias: DeepSeek-V3's bias-based balancing
    )
    return dict(
        b, head_dim=c.head_dim(b, None),
        ffn_size=c.integer("intermediate_size", 10944) if moe.first_dense_layers else 0,
        mlp=c.choice("hidden_act", GATED_ACT, "silu"),
        tied_embeddings=c.flag("tie_word_embeddings", False),
        qkv_bias=c.flag("attention_bias", False), qk_norm=c.flag("use_qk_norm", False), moe=moe,
        mtp_layers=c.integer(("num_nextn_predict_layers", "num_mtp_layers"), 1, minimum=0),
    )


def qwen3_next(c: ConfigReader) -> dict:
    """Qwen3-Next (transformers 5.24 configuration_qwen3_next.py / modeling_qwen3_next.py): layer_types
    (default: every full_attention_interval-th layer full attention, the others linear attention) mix
    gated DeltaNet layers with gated attention (q_proj doubled for the output gate, per-head q/k
    RMSNorm); the MLP is Qwen2-MoE's (one shared expert behind a sigmoid gate) on every
    decoder_sparse_step-th layer except mlp_only_layers, dense of intermediate_size elsewhere."""
    b = _base(c, kv_default=2, max_pos_default=32768)
    n = b["num_layers"]
    bias = c.flag("attention_bias", False)
    interval = c.integer("full_attention_interval", 4)
    types = c.data.get("layer_types")
    if types is None:
        types = ["linear_attention" if (i + 1) % interval else "full_attention" for i in range(n)]
    allowed = {"linear_attention", "full_attention"}
    if not isinstance(types, list) or len(types) != n or any(t not in allowed for t in types):
        raise TrainplanError(f"{c.where}: layer_types must list {n} entries, each 'linear_attention' or "
                             "'full_attention'; fix the config.json")
    layers = tuple(LINEAR if t == "linear_attention" else FULL for t in types)
    linear = LinearAttentionSpec(
        num_key_heads=c.integer("linear_num_key_heads", 16), num_value_heads=c.integer("linear_num_value_heads", 32),
        key_head_dim=c.integer("linear_key_head_dim", 128), value_head_dim=c.integer("linear_value_head_dim", 128),
        conv_kernel=c.integer("linear_conv_kernel_dim", 4),
    ) if LINEAR in layers else None
    shared = c.integer("shared_expert_intermediate_size", 512, minimum=0)
    d = dict(
        b, head_dim=c.head_dim(b, 256), mlp=c.choice("hidden_act", GATED_ACT, "silu"),
        tied_embeddings=c.flag("tie_word_embeddings", False),
        qkv_bias=bias, o_bias=bias, qk_norm=True, attention_output_gate=True,
        attention_layers=layers if linear is not None else (), linear_attention=linear,
    )
    # HF builds the shared expert and its gate whatever its width (Qwen3NextSparseMoeBlock)
    return _qwen_moe(c, d, num_shared_experts=1, shared_expert_ffn_size=shared, shared_expert_gate=True)


ADAPTERS: dict[str, Callable[[ConfigReader], dict]] = {
    "llama": llama,
    "mistral": mistral,
    "mixtral": mixtral,
    "qwen2": qwen2,
    "qwen2_moe": qwen2_moe,
    "qwen3": qwen3,
    "qwen3_moe": qwen3_moe,
    "gemma2": gemma2,
    "gemma3_text": gemma3_text,
    "deepseek_v3": deepseek_v3,
    # Kimi K2 is DeepSeek-V3's architecture with its own model_type (moonshotai/Kimi-K2-Instruct
    # config.json, architectures DeepseekV3ForCausalLM); transformers has no kimi_k2 class.
    "kimi_k2": deepseek_v3,
    "glm4_moe": glm4_moe,
    "llama4": llama4,
    "llama4_text": llama4_text,
    "qwen3_next": qwen3_next,
    "nemotron_h": nemotron_h,
    "jamba": jamba,
    "gpt_oss": gpt_oss,
    "gpt2": gpt2,
}


def spec_from_config(config: dict, *, name: str, where: str, source: str = "") -> ModelSpec:
    """Build the ModelSpec of one HF config.json dict; `where` names the file in errors."""
    if not isinstance(config, dict):
        raise TrainplanError(
            f"{where}: a config.json must hold a JSON object, got {type(config).__name__}"
        )
    model_type = config.get("model_type")
    if not isinstance(model_type, str):
        raise TrainplanError(
            f"{where}: missing required field 'model_type' (a string); supported: "
            f"{', '.join(sorted(ADAPTERS))}"
        )
    if model_type not in ADAPTERS:
        raise TrainplanError(
            f"{where}: model_type {model_type!r} is not supported; supported: "
            f"{', '.join(sorted(ADAPTERS))}"
        )
    fields = ADAPTERS[model_type](ConfigReader(config, where, model_type))
    spec = check_spec(ModelSpec(name=name, source=source, **fields), where)
    if spec.position_embedding == "rope":
        check_rope(config, where)
    return spec
