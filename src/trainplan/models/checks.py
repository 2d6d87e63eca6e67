"""What makes a ModelSpec an architecture that can exist, and how long a sequence it can take.

Every edge that builds a spec (a HF config.json through the adapters, a plan.json, a validation
record) calls check_spec: sizes are positive and bounded, attention heads split into key/value
groups, a token's experts are among the experts. Types are the reader's business (ConfigReader,
parsing.check_types); this is about values and how they relate.

Every edge that fixes a sequence length (plan, estimate, fit, trace, a plan.json) and the search's
longest-sequence bound ask context_limit / check_context: a learned position table is a hard
limit; a RoPE model past max_position_embeddings needs --allow-long-context, and the plan then
says so (Workload.long_context).
"""

from __future__ import annotations

from dataclasses import asdict

from trainplan.errors import TrainplanError
from trainplan.models.spec import (
    MLP_KINDS,
    NORMS,
    POSITION_EMBEDDINGS,
    LinearAttentionSpec,
    Mamba1Spec,
    Mamba2Spec,
    MLASpec,
    ModelSpec,
    MoESpec,
)
from trainplan.parsing import check_types

# Sanity bounds, far past the largest published decoders (Llama 3.1 405B: 126 layers, hidden
# 16384, 128 heads, FFN 53248; DeepSeek-V3: 256 routed experts; Gemma 3: 262144-token vocabulary;
# Llama 4 Scout: a 10M-token context). They keep every derived count finite and every per-layer
# loop short; a config beyond them is a typo, not a model.
LIMITS = {
    "num_layers": 4096, "hidden_size": 1 << 20, "num_heads": 1 << 16, "num_kv_heads": 1 << 16,
    "head_dim": 1 << 16, "ffn_size": 1 << 24, "vocab_size": 1 << 24, "max_position_embeddings": 1 << 30,
    "sliding_window": 1 << 30, "attention_chunk_size": 1 << 30, "norms_per_layer": 16, "mtp_layers": 64,
    "num_experts": 1 << 16, "expert_ffn_size": 1 << 24, "num_shared_experts": 1 << 10,
    "shared_expert_ffn_size": 1 << 24, "latent_size": 1 << 20, "kv_lora_rank": 1 << 20, "q_lora_rank": 1 << 20,
    "qk_nope_head_dim": 1 << 16, "qk_rope_head_dim": 1 << 16, "v_head_dim": 1 << 16,
}


def check_spec(m: ModelSpec, where: str) -> ModelSpec:
    """`m` unchanged, or a one-line TrainplanError naming `where` (the file) and the rule broken."""

    def bad(msg: str) -> TrainplanError:
        return TrainplanError(f"{where}: {msg}")

    # Types first: a spec built in code from a record (validation) has not been through a reader.
    d = asdict(m)
    check_types(ModelSpec, d, where)
    for k, cls in (("moe", MoESpec), ("mla", MLASpec), ("linear_attention", LinearAttentionSpec),
                   ("mamba", Mamba2Spec), ("mamba1", Mamba1Spec)):
        if d[k] is not None:
            check_types(cls, d[k], f"{where}.{k}")

    def size(name: str, v, minimum: int = 1) -> None:
        if v < minimum:
            raise bad(f"{name} must be {'positive' if minimum == 1 else f'>= {minimum}'}, got {v}")
        if v > LIMITS[name]:
            raise bad(f"{name} {v:,} is beyond the limit of {LIMITS[name]:,}")

    for k in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim", "vocab_size"):
        size(k, getattr(m, k))
    for k in ("ffn_size", "max_position_embeddings", "norms_per_layer", "mtp_layers"):
        size(k, getattr(m, k), 0)
    if m.num_heads % m.num_kv_heads:
        raise bad(f"{m.num_heads} attention heads do not split into {m.num_kv_heads} key/value head groups "
                  "(num_attention_heads must be a multiple of num_key_value_heads)")
    for k, allowed in (("mlp", MLP_KINDS), ("norm", NORMS), ("position_embedding", POSITION_EMBEDDINGS)):
        if getattr(m, k) not in allowed:
            raise bad(f"{k} {getattr(m, k)!r} is not one of {', '.join(allowed)}")
    if m.position_embedding == "learned" and not m.max_position_embeddings:
        raise bad("learned position embeddings need max_position_embeddings (the size of their table)")
    if m.sliding_window is not None:
        size("sliding_window", m.sliding_window)
    if not 0 <= m.sliding_window_layers <= m.num_layers:
        raise bad(f"sliding_window_layers must be between 0 and num_layers ({m.num_layers}), got {m.sliding_window_layers}")
    if m.sliding_window_layers and m.sliding_window is None:
        raise bad("sliding_window_layers > 0 needs a sliding_window")
    if m.attention_layers or m.attention_chunk_size is not None or m.linear_attention is not None \
            or m.mamba is not None or m.mamba1 is not None or m.mlp_layers or m.mtp_mlp_layers \
            or m.mtp_attention_layers:
        _check_attention_layers(m, size, bad)
    if m.moe is not None:
        _check_moe(m, size, bad)
    elif not m.ffn_size:
        raise bad("a dense model needs ffn_size (intermediate_size) > 0")
    if m.mla is not None:
        a = m.mla
        for k in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            size(k, getattr(a, k))
        if a.q_lora_rank is not None:
            size("q_lora_rank", a.q_lora_rank)
    return m


def _check_attention_layers(m: ModelSpec, size, bad) -> None:
    """The per-layer attention pattern names a known variant for every layer, with its bound."""
    from trainplan.models.layers import (
        ATTENTION,
        CHUNKED,
        DENSE,
        LINEAR,
        MAMBA,
        MAMBA2,
        MLA,
        MOE,
        NO_MLP,
        SLIDING,
    )

    if m.attention_layers and len(m.attention_layers) != m.num_layers:
        raise bad(f"attention_layers lists {len(m.attention_layers)} layers, the model has {m.num_layers}")
    unknown = sorted(set(m.attention_layers) - set(ATTENTION))
    if unknown:
        raise bad(f"attention variant {unknown[0]!r} is not one of {', '.join(ATTENTION)}")
    if (MLA in m.attention_layers) != (m.mla is not None and bool(m.attention_layers)):
        raise bad("attention_layers lists 'mla' exactly when the model has MLA ranks (mla)")
    if m.attention_chunk_size is not None:
        size("attention_chunk_size", m.attention_chunk_size)
    if (LINEAR in m.attention_layers) != (m.linear_attention is not None):
        raise bad("attention_layers lists 'linear' exactly when the model has linear_attention sizes")
    if m.linear_attention is not None:
        a = m.linear_attention
        for k in ("num_key_heads", "num_value_heads", "key_head_dim", "value_head_dim", "conv_kernel"):
            if not 1 <= getattr(a, k) <= 1 << 16:
                raise bad(f"linear_attention.{k} must be between 1 and 65536, got {getattr(a, k)}")
    if (MAMBA2 in m.attention_layers) != (m.mamba is not None):
        raise bad("attention_layers lists 'mamba2' exactly when the model has Mamba-2 sizes (mamba)")
    if m.mamba is not None:
        a = m.mamba
        for k in ("num_heads", "head_dim", "state_size", "n_groups", "conv_kernel", "chunk_size"):
            if not 1 <= getattr(a, k) <= 1 << 16:
                raise bad(f"mamba.{k} must be between 1 and 65536, got {getattr(a, k)}")
        if a.num_heads % a.n_groups:
            raise bad(f"{a.num_heads} Mamba-2 heads do not split into {a.n_groups} groups (n_groups)")
    if (MAMBA in m.attention_layers) != (m.mamba1 is not None):
        raise bad("attention_layers lists 'mamba' exactly when the model has Mamba-1 sizes (mamba1)")
    if m.mamba1 is not None:
        for k in ("inner", "state_size", "dt_rank", "conv_kernel"):
            if not 1 <= getattr(m.mamba1, k) <= 1 << 20:
                raise bad(f"mamba1.{k} must be between 1 and 1048576, got {getattr(m.mamba1, k)}")
    if m.mlp_layers:
        if len(m.mlp_layers) != m.num_layers:
            raise bad(f"mlp_layers lists {len(m.mlp_layers)} layers, the model has {m.num_layers}")
        if set(m.mlp_layers) - {DENSE, MOE, NO_MLP}:
            raise bad(f"mlp_layers entries must be {DENSE!r}, {MOE!r} or {NO_MLP!r}")
        if (MOE in m.mlp_layers) != (m.moe is not None):
            raise bad(f"mlp_layers lists {MOE!r} exactly when the model has MoE sizes (moe)")
    if m.mtp_attention_layers or m.mtp_mlp_layers:
        blocks = list(zip(m.mtp_attention_layers, m.mtp_mlp_layers))
        if len(m.mtp_attention_layers) != len(m.mtp_mlp_layers) or not m.mtp_layers:
            raise bad("mtp_attention_layers and mtp_mlp_layers list the same blocks, of mtp_layers > 0 modules")
        main = set(zip(m.attention_layers, m.mlp_layers))
        for a, f in blocks:  # an MTP block reuses the sizes of the model's blocks of its kind
            if (a, f) not in main:
                raise bad(f"MTP block ({a}, {f}) is not a kind of block the model has: "
                          f"{', '.join(f'({x}, {y})' for x, y in sorted(main))}")
    if CHUNKED in m.attention_layers and m.attention_chunk_size is None:
        raise bad("chunked attention layers need attention_chunk_size")
    if SLIDING in m.attention_layers and (m.sliding_window is None
                                          or m.attention_layers.count(SLIDING) != m.sliding_window_layers):
        raise bad("sliding attention layers need sliding_window, and sliding_window_layers = their count")


def _check_moe(m: ModelSpec, size, bad) -> None:
    e = m.moe
    size("num_experts", e.num_experts)
    size("expert_ffn_size", e.expert_ffn_size)
    size("num_shared_experts", e.num_shared_experts, 0)
    size("shared_expert_ffn_size", e.shared_expert_ffn_size, 0)
    size("latent_size", e.latent_size, 0)
    if not 1 <= e.experts_per_token <= e.num_experts:
        raise bad(f"top-{e.experts_per_token} routing needs 1 <= experts per token <= the {e.num_experts} experts")
    # Past the last layer these are legal, as in transformers (a config sliced to fewer layers keeps
    # first_k_dense_replace and mlp_only_layers): every layer is then dense.
    if e.first_dense_layers < 0 or e.moe_layer_freq < 1 or any(i < 0 for i in e.dense_layers):
        raise bad(f"first_dense_layers and dense_layers must be >= 0 and moe_layer_freq >= 1, got "
                  f"{e.first_dense_layers}, {list(e.dense_layers)[:8]} and {e.moe_layer_freq}")
    if e.num_groups < 1 or e.num_experts % e.num_groups:
        raise bad(f"{e.num_experts} experts do not split into {e.num_groups} groups")
    if not 1 <= e.topk_groups <= e.num_groups:
        raise bad(f"topk_groups must be between 1 and the {e.num_groups} expert groups, got {e.topk_groups}")
    if e.experts_per_token > e.topk_groups * (e.num_experts // e.num_groups):
        raise bad(f"top-{e.experts_per_token} routing cannot pick from {e.topk_groups} groups of "
                  f"{e.num_experts // e.num_groups} experts")
    if m.num_dense_layers and not m.ffn_size:
        raise bad(f"{m.num_dense_layers} dense layers need ffn_size (intermediate_size) > 0")


def context_limit(m: ModelSpec, allow_long_context: bool = False) -> int | None:
    """The longest sequence that may be planned for `m`; None when nothing limits it (no
    max_position_embeddings known, or RoPE with allow_long_context)."""
    if not m.max_position_embeddings:
        return None
    if m.position_embedding == "learned" or not allow_long_context:
        return m.max_position_embeddings
    return None


def beyond_context(m: ModelSpec, seq_len: int) -> bool:
    """Whether seq_len is past the model's max_position_embeddings (the plan's long_context mark)."""
    return bool(m.max_position_embeddings) and seq_len > m.max_position_embeddings


def check_context(m: ModelSpec, seq_len: int, allow_long_context: bool = False) -> None:
    """Refuse a sequence past the model's positions, unless RoPE and allow_long_context."""
    limit = context_limit(m, allow_long_context)
    if limit is None or seq_len <= limit:
        return
    if m.position_embedding == "learned":
        raise TrainplanError(
            f"seq_len {seq_len:,} is past the {limit:,} positions of {m.name}'s learned position table "
            f"(a hard limit); use a sequence of at most {limit:,}"
        )
    raise TrainplanError(
        f"seq_len {seq_len:,} is past {m.name}'s max_position_embeddings ({limit:,}); RoPE extrapolates "
        f"with a quality loss only if asked: pass --allow-long-context, or use at most {limit:,}"
    )
