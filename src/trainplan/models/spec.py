"""ModelSpec: the architecture facts a plan needs, and exact parameter counts derived from them.

A ModelSpec is built from a Hugging Face config.json by an adapter (adapters.py, one per
`model_type`) or from the built-in catalog (catalog/*.json holds config.json facts). Nothing here
guesses architecture from ratios: every field is read from the config.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainplan.models import layers

MLP_KINDS = ("swiglu", "geglu", "gelu", "relu2")  # gated (3 matrices) first, then plain (2)
NORMS = ("rmsnorm", "layernorm")
# "rope": rotary, computed per position (extrapolates past max_position_embeddings, with quality
# loss); "learned": a table of max_position_embeddings rows (a hard limit); "none": no positional
# encoding at all, the recurrent mixers carry order (Jamba: no RoPE in its attention layers).
POSITION_EMBEDDINGS = ("rope", "learned", "none")


@dataclass(frozen=True, slots=True)
class MoESpec:
    """Mixture-of-experts FFN. Which layers have it: models/layers.py (is_moe_layer)."""

    num_experts: int  # routed experts per MoE layer
    experts_per_token: int  # top-k
    expert_ffn_size: int  # intermediate size of one routed expert
    num_shared_experts: int = 0
    shared_expert_ffn_size: int = 0  # intermediate size of the shared-expert MLP (all shared together)
    first_dense_layers: int = 0  # DeepSeek first_k_dense_replace
    moe_layer_freq: int = 1  # every n-th layer is MoE (1 = all, after the dense ones)
    router_bias: bool = False  # bias on the router linear (gpt-oss)
    expert_bias: bool = False  # biases inside each expert (gpt-oss)
    shared_expert_gate: bool = False  # a sigmoid gate Linear(hidden, 1) on the shared expert (qwen2_moe)
    router_score_correction_bias: bool = False  # DeepSeek-V3 e_score_correction_bias as a parameter
    dense_layers: tuple[int, ...] = ()  # explicit dense-FFN layer indices (Qwen mlp_only_layers)
    num_groups: int = 1  # DeepSeek n_group: experts are split into groups (one per node in EP) ...
    topk_groups: int = 1  # ... and a token is routed to experts of at most topk_group groups
    router_score: str = "softmax"  # "softmax" (Mixtral, Qwen) | "sigmoid" (DeepSeek-V3 scoring_func)
    # "aux_loss": Switch-style auxiliary loss of weight aux_loss_coef (HF router_aux_loss_coef; 0 = none);
    # "aux_free": DeepSeek-V3's per-expert selection bias, nudged after each step (topk_method noaux_tc)
    load_balance: str = "aux_loss"
    aux_loss_coef: float = 0.0
    # Nemotron 3 LatentMoE (HF moe_latent_size): the routed experts work in this width, behind a down
    # projection hidden -> latent before dispatch and an up projection latent -> hidden after the
    # combine (fc1/fc2_latent_proj); tokens are dispatched at it. 0: experts work in hidden_size.
    latent_size: int = 0


@dataclass(frozen=True, slots=True)
class MLASpec:
    """DeepSeek multi-head latent attention ranks and head dims."""

    q_lora_rank: int | None  # None = plain q projection
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


@dataclass(frozen=True, slots=True)
class LinearAttentionSpec:
    """Gated DeltaNet token mixer of the linear-attention layers (Yang et al. 2024, arXiv:2412.06464;
    Qwen3-Next's linear_attention layers): q and k of num_key_heads x key_head_dim, v of
    num_value_heads x value_head_dim, a causal depthwise convolution of conv_kernel taps over q, k, v."""

    num_key_heads: int
    num_value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int

    @property
    def key_dim(self) -> int:
        return self.num_key_heads * self.key_head_dim

    @property
    def value_dim(self) -> int:
        return self.num_value_heads * self.value_head_dim


@dataclass(frozen=True, slots=True)
class Mamba2Spec:
    """Mamba-2 mixer of the "mamba2" layers (Dao & Gu 2024, arXiv:2405.21060; HF NemotronHMamba2Mixer):
    num_heads SSM heads of head_dim channels (d_inner = num_heads x head_dim), B and C of state_size
    per group of heads (n_groups), a causal depthwise convolution of conv_kernel taps over x, B, C,
    the scan in chunks of chunk_size tokens."""

    num_heads: int
    head_dim: int
    state_size: int
    n_groups: int
    conv_kernel: int
    chunk_size: int
    conv_bias: bool = True  # use_conv_bias
    proj_bias: bool = False  # use_bias: in_proj and out_proj

    @property
    def inner(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        """Channels of the convolution: x (d_inner) and B, C (n_groups x state_size each)."""
        return self.inner + 2 * self.n_groups * self.state_size


@dataclass(frozen=True, slots=True)
class Mamba1Spec:
    """Mamba-1 selective-scan (S6) mixer of the "mamba" layers (Gu & Dao 2023, arXiv:2312.00752
    sec. 3, Algorithm 2; HF JambaMambaMixer, transformers 5.24 modeling_jamba.py): in_proj gives x and
    the gate z (inner channels each), a causal depthwise convolution of conv_kernel taps over x,
    x_proj gives dt (dt_rank wide) and B, C (state_size each, shared by all channels), dt_proj widens
    dt back to inner channels, each channel with a state of state_size."""

    inner: int  # d_inner = mamba_expand x hidden_size
    state_size: int  # mamba_d_state (N)
    dt_rank: int  # mamba_dt_rank (R)
    conv_kernel: int  # mamba_d_conv
    conv_bias: bool = True  # mamba_conv_bias
    proj_bias: bool = False  # mamba_proj_bias: in_proj and out_proj (dt_proj always has one)
    dt_bc_norms: bool = True  # Jamba's RMSNorms on dt, B and C after x_proj (not in Mamba itself)


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A decoder-only transformer, as a training planner needs it."""

    name: str
    model_type: str  # HF model_type ("llama", "qwen3_moe", "deepseek_v3", ...) or "gpt"
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int  # = num_heads for MHA
    head_dim: int  # per attention head (may differ from hidden/heads: Gemma, Qwen3)
    ffn_size: int  # dense-MLP intermediate size (0 when every layer is MoE)
    vocab_size: int
    mlp: str = "swiglu"  # "swiglu" | "geglu" (gated, 3 matrices) | "gelu" | "relu2" (2 matrices)
    norm: str = "rmsnorm"  # "rmsnorm" (weight only) | "layernorm" (weight + bias)
    tied_embeddings: bool = False
    position_embedding: str = "rope"  # POSITION_EMBEDDINGS: "rope" | "learned" | "none"
    max_position_embeddings: int = 0  # context length of the config (= learned position table size)
    qkv_bias: bool = False  # bias on q, k, v projections (Qwen2)
    o_bias: bool = False  # bias on the attention output projection
    mlp_bias: bool = False
    qk_norm: bool = False  # per-head RMSNorm on q and k (Qwen3, Gemma 3)
    norms_per_layer: int = 2  # Gemma 2/3 have 4 (pre/post attention, pre/post MLP)
    attention_sinks: bool = False  # one learned logit per head (gpt-oss)
    sliding_window: int | None = None
    sliding_window_layers: int = 0  # how many layers use the sliding window
    moe: MoESpec | None = None
    mla: MLASpec | None = None
    mtp_layers: int = 0  # DeepSeek multi-token-prediction modules (not built by transformers)
    source: str = ""  # where the facts came from (URL of the config.json, paper table)
    # Per-layer attention variant (models/layers.py ATTENTION keys) when the config gives a pattern
    # the fields above cannot say (Llama 4: chunked local layers and global NoPE layers); empty: every
    # layer is full attention (MLA with `mla`), the first sliding_window_layers windowed.
    attention_layers: tuple[str, ...] = ()
    attention_chunk_size: int | None = None  # tokens per chunk of the "chunked" layers (Llama 4)
    linear_attention: LinearAttentionSpec | None = None  # the "linear" layers' mixer (Qwen3-Next)
    attention_output_gate: bool = False  # q_proj also yields a sigmoid gate on the attention output (Qwen3-Next)
    mamba: Mamba2Spec | None = None  # the "mamba2" layers' mixer (Nemotron-H)
    mamba1: Mamba1Spec | None = None  # the "mamba" layers' mixer (Jamba)
    # Per-layer MLP variant (models/layers.py DENSE | MOE | NO_MLP) when the config says it per block
    # (Nemotron-H: a block is a mixer, an MLP or, in Nemotron 3, a MoE); empty: derived from `moe`
    # (layers.ffn_kinds).
    mlp_layers: tuple[str, ...] = ()
    # The blocks of one MTP module when the config lists them (Nemotron 3 Super's
    # mtp_layers_block_type, e.g. attention then MoE): each block's attention and MLP variant, as
    # attention_layers / mlp_layers; empty: one block like the last layer (DeepSeek-V3).
    mtp_attention_layers: tuple[str, ...] = ()
    mtp_mlp_layers: tuple[str, ...] = ()

    # ---- derived sizes -------------------------------------------------------------------
    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def gated_mlp(self) -> bool:
        return self.mlp in ("swiglu", "geglu")

    @property
    def num_moe_layers(self) -> int:
        return layers.layer_kinds(self).count(layers.MOE)

    @property
    def num_dense_layers(self) -> int:
        """Layers with a dense MLP (Nemotron-H's mixer-only blocks have none)."""
        return layers.layer_kinds(self).count(layers.DENSE)

    @property
    def expert_dim(self) -> int:
        """The width routed experts read and write, and tokens are dispatched at: the MoE latent
        size (Nemotron 3 LatentMoE) or hidden_size."""
        return (self.moe.latent_size or self.hidden_size) if self.moe is not None else self.hidden_size

    @property
    def is_moe(self) -> bool:
        return self.moe is not None


# Fields written to plan.json only when they differ from their default, so that the plan.json of a
# model the per-layer pattern adds nothing to stays as it was.
_OMITTED_AT_DEFAULT = {"attention_layers": (), "attention_chunk_size": None, "linear_attention": None,
                       "attention_output_gate": False, "mamba": None, "mamba1": None, "mlp_layers": (),
                       "mtp_attention_layers": (), "mtp_mlp_layers": ()}


def spec_to_dict(m: ModelSpec) -> dict:
    from dataclasses import asdict

    d = asdict(m)
    for k, default in _OMITTED_AT_DEFAULT.items():
        if d[k] == default:
            del d[k]
    if d["moe"] is not None and not d["moe"]["latent_size"]:
        del d["moe"]["latent_size"]  # as above: an MoE without a latent writes what it always did
    return d


def spec_from_dict(d: dict, where: str = "model") -> ModelSpec:
    """Parse a ModelSpec written by spec_to_dict (plan.json): unknown keys, wrong types and
    impossible architectures (check_spec) are refused."""
    from dataclasses import MISSING, fields

    from trainplan.errors import TrainplanError
    from trainplan.parsing import check_keys, check_types

    def build(cls, data, path):
        if not isinstance(data, dict):
            raise TrainplanError(f"{path} must be an object")
        names = {f.name for f in fields(cls)}
        required = {f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING}
        check_keys(data, names, path, required=required)
        check_types(cls, data, path)
        return data

    build(ModelSpec, d, where)
    kw = dict(d)
    kw["attention_layers"] = tuple(kw.get("attention_layers", ()))  # JSON gives a list
    for k in ("mlp_layers", "mtp_attention_layers", "mtp_mlp_layers"):
        kw[k] = tuple(kw.get(k, ()))
    if kw.get("moe") is not None:
        moe = dict(build(MoESpec, kw["moe"], f"{where}.moe"))
        moe["dense_layers"] = tuple(moe.get("dense_layers", ()))  # JSON gives a list
        kw["moe"] = MoESpec(**moe)
    if kw.get("mla") is not None:
        kw["mla"] = MLASpec(**build(MLASpec, kw["mla"], f"{where}.mla"))
    if kw.get("linear_attention") is not None:
        kw["linear_attention"] = LinearAttentionSpec(**build(LinearAttentionSpec, kw["linear_attention"],
                                                           f"{where}.linear_attention"))
    if kw.get("mamba") is not None:
        kw["mamba"] = Mamba2Spec(**build(Mamba2Spec, kw["mamba"], f"{where}.mamba"))
    if kw.get("mamba1") is not None:
        kw["mamba1"] = Mamba1Spec(**build(Mamba1Spec, kw["mamba1"], f"{where}.mamba1"))
    from trainplan.models.checks import check_spec

    return check_spec(ModelSpec(**kw), where)
