"""Adapters of the hybrid state-space decoders: Nemotron-H and Nemotron 3 (Mamba-2, attention, MLP
and MoE blocks, MTP modules) and Jamba (Mamba-1 and attention layers, dense and MoE MLPs); and the
one reading of a Nemotron block pattern (hybrid_blocks), which validation records share.

As in adapters.py, each reads exactly the fields its transformers class reads, with its defaults.
"""

from __future__ import annotations

from trainplan.errors import TrainplanError
from trainplan.models.checks import LIMITS
from trainplan.models.config_reader import GATED_ACT, ConfigReader
from trainplan.models.layers import DENSE, FULL, MAMBA, MAMBA2, MOE, NO_MIXER, NO_MLP, NOPE
from trainplan.models.spec import Mamba1Spec, Mamba2Spec, MoESpec

__all__ = ["hybrid_blocks", "jamba", "nemotron_h"]


# Nemotron-H block letters (hybrid_override_pattern) and layers_block_type names, as
# NemotronHConfig._pattern_to_list maps them (older config.json files write "mamba" and "attention",
# which transformers remaps) -> (mixer, MLP) of the one block
_NEMOTRON_BLOCKS = {
    "M": (MAMBA2, NO_MLP), "*": (FULL, NO_MLP), "-": (NO_MIXER, DENSE), "E": (NO_MIXER, MOE),
    "mamba": (MAMBA2, NO_MLP), "linear_attention": (MAMBA2, NO_MLP),
    "attention": (FULL, NO_MLP), "full_attention": (FULL, NO_MLP), "mlp": (NO_MIXER, DENSE), "moe": (NO_MIXER, MOE),
}


def hybrid_blocks(blocks, where: str) -> list[tuple[str, str]]:
    """(mixer, MLP) of each Nemotron-H block, from its letters (M, *, -, E) or layers_block_type names;
    the one reading of a block pattern (the adapter's and a validation record's layer_pattern)."""
    unknown = sorted(set(blocks) - set(_NEMOTRON_BLOCKS))
    if unknown:
        raise TrainplanError(f"{where}: nemotron_h block {unknown[0]!r} is not one of M, *, -, E (mamba, attention, "
                             "mlp, moe); fix the pattern")
    return [_NEMOTRON_BLOCKS[b] for b in blocks]


def _nemotron_moe(c: ConfigReader) -> MoESpec:
    """The MoE of Nemotron 3's E blocks (HF NemotronHMoE): n_routed_experts squared-ReLU experts of
    moe_intermediate_size without biases or gate, one shared expert MLP of
    moe_shared_expert_intermediate_size (whatever n_shared_experts says; a width of 0 falls back to
    intermediate_size, as NemotronHMLP does), a bias-free fp32 router with sigmoid scores over n_group
    groups whose e_score_correction_bias is a buffer (DeepSeek-V3's aux-free balancing: not counted),
    and with moe_latent_size the experts behind fc1/fc2_latent_proj (LatentMoE)."""
    return MoESpec(
        num_experts=c.integer(("n_routed_experts", "num_local_experts"), 8),
        experts_per_token=c.integer("num_experts_per_tok", 2),
        expert_ffn_size=c.integer("moe_intermediate_size", 7688),
        num_shared_experts=1,
        shared_expert_ffn_size=c.integer("moe_shared_expert_intermediate_size", 7688, minimum=0)
        or c.integer("intermediate_size", 21504),
        num_groups=c.integer("n_group", 1), topk_groups=c.integer("topk_group", 1),
        router_score="sigmoid", load_balance="aux_free",
        latent_size=c.optional_int("moe_latent_size", None) or 0,
    )


def nemotron_h(c: ConfigReader) -> dict:
    """Nemotron-H and Nemotron 3 (arXiv:2504.03624, arXiv:2512.20848; transformers 5.24
    configuration_nemotron_h.py / modeling_nemotron_h.py): each layer is one block, a pre-RMSNorm and
    one mixer: Mamba-2 (M), attention (*: GQA without biases, whatever attention_bias says), a
    squared-ReLU MLP (-) or a MoE (E: _nemotron_moe). The pattern is layers_block_type or, in older
    files, hybrid_override_pattern; its length is the layer count. The MTP modules
    (num_nextn_predict_layers, Nemotron 3 Super) are not built by transformers: see _nemotron_mtp."""
    listed = c.data.get("layers_block_type", c.data.get("layer_types"))
    pattern = c.data.get("hybrid_override_pattern")
    blocks = listed if listed is not None else list(pattern) if isinstance(pattern, str) else None
    if not blocks or not isinstance(blocks, list) or any(not isinstance(b, str) for b in blocks):
        raise TrainplanError(f"{c.where}: a nemotron_h config.json needs hybrid_override_pattern (a string of M, *, "
                             "-, E) or layers_block_type (a list); fix the config.json")
    kinds = hybrid_blocks(blocks, c.where)
    declared = c.data.get("num_hidden_layers")
    if declared is not None and declared != len(kinds):
        raise TrainplanError(f"{c.where}: num_hidden_layers {declared!r} differs from the {len(kinds)} blocks of its "
                             "pattern; fix the config.json")
    heads = c.integer("num_attention_heads", 32)
    mamba = Mamba2Spec(
        num_heads=c.integer(("mamba_num_heads",), 128), head_dim=c.integer("mamba_head_dim", 64),
        state_size=c.integer("ssm_state_size", 128), n_groups=c.integer(("n_groups", "mamba_n_groups"), 8),
        conv_kernel=c.integer(("conv_kernel", "mamba_d_conv"), 4),
        chunk_size=c.integer(("chunk_size", "mamba_chunk_size"), 128),
        conv_bias=c.flag("use_conv_bias", True), proj_bias=c.flag("use_bias", False),
    ) if any(k[0] == MAMBA2 for k in kinds) else None
    moe = _nemotron_moe(c) if any(k[1] == MOE for k in kinds) else None
    attention = tuple(k[0] for k in kinds)
    mtp, mtp_blocks = _nemotron_mtp(c)
    return {
        "model_type": c.model_type, "num_layers": len(kinds), "hidden_size": c.integer("hidden_size", 4096),
        "num_heads": heads, "num_kv_heads": c.integer("num_key_value_heads", 8),
        "head_dim": c.integer("head_dim", 128), "vocab_size": c.integer("vocab_size", 131072),
        "max_position_embeddings": c.integer("max_position_embeddings", 4096),
        "ffn_size": c.integer("intermediate_size", 21504),  # the '-' blocks' (Nemotron 3 has none)
        "mlp": c.choice("mlp_hidden_act", {"relu2": "relu2"}, "relu2"),
        "mlp_bias": c.flag("mlp_bias", False), "tied_embeddings": c.flag("tie_word_embeddings", False),
        "norms_per_layer": 1, "attention_layers": attention, "mamba": mamba, "moe": moe,
        "mlp_layers": tuple(k[1] for k in kinds), "mtp_layers": mtp,
        "mtp_attention_layers": tuple(k[0] for k in mtp_blocks), "mtp_mlp_layers": tuple(k[1] for k in mtp_blocks),
    }


def _every(c: ConfigReader, what: str, period_default: int, offset_default: int, n: int) -> tuple[bool, ...]:
    """Per layer, whether i % {what}_layer_period == {what}_layer_offset (JambaConfig's rule, whose
    validate_architecture refuses an offset not below its period)."""
    period = c.integer(f"{what}_layer_period", period_default)
    offset = c.integer(f"{what}_layer_offset", offset_default, minimum=0)
    if offset >= period:
        raise TrainplanError(f"{c.where}: {what}_layer_offset {offset} must be smaller than {what}_layer_period "
                             f"{period}; fix the config.json")
    return tuple(i % period == offset for i in range(n))


def jamba(c: ConfigReader) -> dict:
    """Jamba (arXiv:2403.19887; Jamba-1.5 arXiv:2408.12570; transformers 5.24 configuration_jamba.py /
    modeling_jamba.py, JambaConfig defaults = Jamba-v0.1): attention on the layers where
    i % attn_layer_period == attn_layer_offset, a Mamba-1 mixer (JambaMambaMixer, with RMSNorms on dt,
    B and C) on the others; the MLP is MoE (num_experts, top num_experts_per_tok, softmax router
    without bias) where i % expert_layer_period == expert_layer_offset and a dense SwiGLU MLP of
    intermediate_size elsewhere, each layer behind two RMSNorms. JambaAttention applies no positional
    encoding (no RoPE anywhere in the model): its layers are NoPE and the model's position_embedding
    is none. use_mamba_kernels picks an implementation, not weights: not read."""
    b = {
        "model_type": c.model_type, "num_layers": c.integer("num_hidden_layers", 32),
        "hidden_size": c.integer("hidden_size", 4096), "num_heads": c.integer("num_attention_heads", 32),
        "vocab_size": c.integer("vocab_size", 65536),
        "max_position_embeddings": c.integer("max_position_embeddings", 262144),
    }
    # null: one kv head per query head (JambaConfig.__post_init__)
    kv_null = "num_key_value_heads" in c.data and c.data["num_key_value_heads"] is None
    b["num_kv_heads"] = b["num_heads"] if kv_null else c.integer("num_key_value_heads", 8)
    n, h = b["num_layers"], b["hidden_size"]
    if n > LIMITS["num_layers"]:  # check_spec's bound, before the per-layer patterns are built
        raise TrainplanError(f"{c.where}: num_layers {n:,} is beyond the limit of {LIMITS['num_layers']:,}")
    attention = _every(c, "attn", 8, 4, n)
    experts = c.integer(("num_experts", "num_local_experts"), 16)
    routed = _every(c, "expert", 2, 1, n) if experts > 1 else (False,) * n  # 1 expert: JambaMLP
    rank = c.data.get("mamba_dt_rank", "auto")
    dt_rank = -(-h // 16) if rank == "auto" else c.integer("mamba_dt_rank")  # math.ceil(hidden / 16)
    mamba = Mamba1Spec(
        inner=c.integer("mamba_expand", 2) * h, state_size=c.integer("mamba_d_state", 16), dt_rank=dt_rank,
        conv_kernel=c.integer("mamba_d_conv", 4), conv_bias=c.flag("mamba_conv_bias", True),
        proj_bias=c.flag("mamba_proj_bias", False),
    ) if not all(attention) else None
    ffn = c.integer("intermediate_size", 14336)
    moe = MoESpec(
        num_experts=experts, experts_per_token=c.integer("num_experts_per_tok", 2), expert_ffn_size=ffn,
        dense_layers=tuple(i for i in range(n) if not routed[i]),
        aux_loss_coef=c.number("router_aux_loss_coef", 0.001),
    ) if any(routed) else None
    return dict(
        b, head_dim=c.head_dim(b, None), ffn_size=ffn if not all(routed) else 0,
        mlp=c.choice("hidden_act", GATED_ACT, "silu"), tied_embeddings=c.flag("tie_word_embeddings", False),
        position_embedding="none", moe=moe, mamba1=mamba,
        attention_layers=tuple(NOPE if a else MAMBA for a in attention),
    )


def _nemotron_mtp(c: ConfigReader) -> tuple[int, list[tuple[str, str]]]:
    """(modules, the blocks of one) of Nemotron 3's multi-token prediction: num_nextn_predict_layers
    modules of mtp_layers_block_type blocks (or the older mtp_hybrid_override_pattern letters;
    NemotronHConfig's default: attention then MoE). Transformers skips their weights (mtp.*)."""
    modules = c.integer("num_nextn_predict_layers", 0, minimum=0)
    if not modules:
        return 0, []
    default = ["full_attention", "moe"]
    listed = c.data.get("mtp_layers_block_type")
    pattern = c.data.get("mtp_hybrid_override_pattern")
    blocks = default if listed is None else listed
    if blocks == default and isinstance(pattern, str):  # transformers reads the letters only then
        blocks = list(pattern)
    if not blocks or not isinstance(blocks, list) or any(not isinstance(b, str) for b in blocks):
        raise TrainplanError(f"{c.where}: mtp_layers_block_type must be a list of block names (or "
                             "mtp_hybrid_override_pattern a string of M, *, -, E); fix the config.json")
    return modules, hybrid_blocks(blocks, f"{c.where} MTP")
