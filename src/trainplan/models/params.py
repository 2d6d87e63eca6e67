"""Exact parameter counts from a ModelSpec, component by component.

Counts equal those of the Hugging Face model built from the same config.json on the meta device
(tests/models/test_params_vs_transformers.py checks every catalog entry transformers can build).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainplan.models.layers import (
    LINEAR,
    MAMBA,
    MAMBA2,
    NO_MIXER,
    LayerKind,
    layer_pattern,
    mtp_kinds,
)
from trainplan.models.spec import ModelSpec


@dataclass(frozen=True, slots=True)
class LayerParams:
    attention: int  # q, k, v, o projections (+ MLA down/up projections and norms, qk-norms, sinks)
    mlp: int  # dense MLP, or shared experts + router in an MoE layer
    experts: int  # all routed experts of the layer (0 in dense layers)
    active_experts: int  # the top-k routed experts one token goes through
    norms: int

    @property
    def total(self) -> int:
        return self.attention + self.mlp + self.experts + self.norms

    @property
    def active(self) -> int:
        return self.attention + self.mlp + self.active_experts + self.norms


@dataclass(frozen=True, slots=True)
class ParamCounts:
    embedding: int  # token (+ learned position) embeddings
    lm_head: int  # 0 when tied to the embedding
    final_norm: int
    layers: tuple[LayerParams, ...]

    @property
    def total(self) -> int:
        return self.embedding + self.lm_head + self.final_norm + sum(x.total for x in self.layers)

    @property
    def active(self) -> int:
        """Parameters one token uses.

        Convention: embedding + lm_head + attention + dense or shared-expert MLP + router + the
        top-k routed experts + norms. The whole embedding table counts (as in the Mixtral and
        DeepSeek-V3 papers' "active parameters"), although a token reads only one row of it.
        """
        return self.embedding + self.lm_head + self.final_norm + sum(x.active for x in self.layers)

    @property
    def non_embedding(self) -> int:
        return self.total - self.embedding - self.lm_head

    @property
    def experts(self) -> int:
        return sum(x.experts for x in self.layers)

    def to_dict(self) -> dict:
        return {
            "total": self.total,
            "active": self.active,
            "embedding": self.embedding,
            "lm_head": self.lm_head,
            "final_norm": self.final_norm,
            "non_embedding": self.non_embedding,
            "experts": self.experts,
            "per_layer": [
                {"attention": x.attention, "mlp": x.mlp, "experts": x.experts, "norms": x.norms,
                 "total": x.total, "active": x.active}
                for x in self.layers
            ],
        }


def _norm(m: ModelSpec, dim: int) -> int:
    return dim * (2 if m.norm == "layernorm" else 1)


def _mlp(m: ModelSpec, d_ff: int, bias: bool, width: int | None = None) -> int:
    """One MLP of d_ff between `width` features (default hidden_size; a latent expert's: latent_size)."""
    h = width or m.hidden_size
    mats = 3 if m.gated_mlp else 2
    b = (2 * d_ff + h if m.gated_mlp else d_ff + h) if bias else 0
    return mats * h * d_ff + b


def moe_linear_params(m: ModelSpec) -> int:
    """The MoE layer's weights outside the routed experts and the router: the shared-expert MLP
    (biased with mlp_bias, as Nemotron-H's; the other adapters' MoE models have none), its sigmoid
    gate (qwen2_moe), and LatentMoE's projections hidden -> latent -> hidden (HF NemotronHMoE
    fc1_latent_proj / fc2_latent_proj, biased with mlp_bias)."""
    moe, h = m.moe, m.hidden_size
    shared = _mlp(m, moe.shared_expert_ffn_size, m.mlp_bias) if moe.num_shared_experts else 0
    shared += h if moe.shared_expert_gate else 0
    if moe.latent_size:
        shared += 2 * h * moe.latent_size + ((moe.latent_size + h) if m.mlp_bias else 0)
    return shared


def _linear_attention(m: ModelSpec) -> int:
    """Gated DeltaNet (HF Qwen3NextGatedDeltaNet): in_proj_qkvz (h -> 2 key_dim + 2 value_dim: q, k,
    v and the output gate z), in_proj_ba (h -> 2 value heads: beta and the decay's input), a depthwise
    conv1d over q, k, v (no bias), dt_bias and A_log per value head, a gated RMSNorm of one value head
    width, out_proj (value_dim -> h); no biases."""
    a, h = m.linear_attention, m.hidden_size
    conv = (2 * a.key_dim + a.value_dim) * a.conv_kernel
    return (h * (2 * a.key_dim + 2 * a.value_dim) + h * 2 * a.num_value_heads + conv
            + 2 * a.num_value_heads + a.value_head_dim + a.value_dim * h)


def _mamba2(m: ModelSpec) -> int:
    """Mamba-2 mixer (HF NemotronHMamba2Mixer): in_proj (h -> z, x, B, C and dt: d_inner + conv_dim +
    heads), a depthwise conv1d over x, B, C (conv_kernel taps, a bias with use_conv_bias), dt_bias,
    A_log and D per head, a gated RMSNorm of d_inner, out_proj (d_inner -> h); in_proj and out_proj
    carry biases with use_bias."""
    a, h = m.mamba, m.hidden_size
    proj = a.inner + a.conv_dim + a.num_heads
    conv = a.conv_dim * a.conv_kernel + (a.conv_dim if a.conv_bias else 0)
    bias = (proj + h) if a.proj_bias else 0
    return h * proj + conv + 3 * a.num_heads + a.inner + a.inner * h + bias


def _mamba1(m: ModelSpec) -> int:
    """Mamba-1 mixer (HF JambaMambaMixer): in_proj (h -> x and z, 2 d_inner), a depthwise conv1d over x
    (conv_kernel taps, a bias with mamba_conv_bias), x_proj (d_inner -> dt_rank + 2 state_size, no
    bias), dt_proj (dt_rank -> d_inner, with its bias), A_log (d_inner x state_size) and D (d_inner),
    out_proj (d_inner -> h); in_proj and out_proj carry biases with mamba_proj_bias; Jamba's RMSNorms
    of dt, B and C weigh dt_rank + 2 state_size."""
    a, h = m.mamba1, m.hidden_size
    d, n, r = a.inner, a.state_size, a.dt_rank
    proj = h * 2 * d + d * h + ((2 * d + h) if a.proj_bias else 0)
    conv = d * a.conv_kernel + (d if a.conv_bias else 0)
    ssm = d * (r + 2 * n) + r * d + d + d * n + d
    return proj + conv + ssm + ((r + 2 * n) if a.dt_bc_norms else 0)


def _attention(m: ModelSpec, kind: LayerKind | None = None) -> int:
    h = m.hidden_size
    if kind is not None and kind.attention == LINEAR:
        return _linear_attention(m)
    if kind is not None and kind.attention == MAMBA2:
        return _mamba2(m)
    if kind is not None and kind.attention == MAMBA:
        return _mamba1(m)
    if kind is not None and kind.attention == NO_MIXER:
        return 0
    if m.mla is not None:
        a = m.mla
        # DeepSeek-V2 paper, section 2.1.2: q = W_UQ norm(W_DQ h); [c_kv, k_rope] = W_DKV h;
        # [k_nope, v] = W_UKV norm(c_kv). attention_bias adds biases to the two down projections
        # and the output projection only (HF DeepseekV3Attention); norms are weight-only RMSNorm.
        qk_head = a.qk_nope_head_dim + a.qk_rope_head_dim
        if a.q_lora_rank is None:
            q = h * m.num_heads * qk_head
        else:
            q = h * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * m.num_heads * qk_head
            q += a.q_lora_rank if m.qkv_bias else 0
        kv = h * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank
        kv += (a.kv_lora_rank + a.qk_rope_head_dim) if m.qkv_bias else 0
        kv += a.kv_lora_rank * m.num_heads * (a.qk_nope_head_dim + a.v_head_dim)
        o = m.num_heads * a.v_head_dim * h + (h if m.o_bias else 0)
        return q + kv + o
    q_out = m.q_dim * (2 if m.attention_output_gate else 1)  # the gate comes out of q_proj
    p = h * q_out + 2 * h * m.kv_dim + m.q_dim * h
    if m.qkv_bias:
        p += q_out + 2 * m.kv_dim
    if m.o_bias:
        p += h
    if m.qk_norm:
        p += 2 * m.head_dim
    if m.attention_sinks:
        p += m.num_heads
    return p


def _layer(m: ModelSpec, kind: LayerKind) -> LayerParams:
    """One decoder layer of `kind`: the attention variants differ in their FLOPs, not their weights
    (Llama 4's NoPE layers drop the weightless L2 qk-norm only)."""
    h = m.hidden_size
    attn = _attention(m, kind)
    norms = m.norms_per_layer * _norm(m, h)
    moe = m.moe
    if not kind.is_moe:
        return LayerParams(attn, _mlp(m, kind.ffn_size, m.mlp_bias) if kind.ffn_size else 0, 0, 0, norms)
    one_expert = _mlp(m, moe.expert_ffn_size, moe.expert_bias, m.expert_dim)
    router = h * moe.num_experts + (moe.num_experts if moe.router_bias else 0)
    router += moe.num_experts if moe.router_score_correction_bias else 0
    return LayerParams(
        attention=attn,
        mlp=moe_linear_params(m) + router,
        experts=moe.num_experts * one_expert,
        active_experts=moe.experts_per_token * one_expert,
        norms=norms,
    )


def count_params(m: ModelSpec) -> ParamCounts:
    emb = m.vocab_size * m.hidden_size
    if m.position_embedding == "learned":
        emb += m.max_position_embeddings * m.hidden_size
    return ParamCounts(
        embedding=emb,
        lm_head=0 if m.tied_embeddings else m.vocab_size * m.hidden_size,
        final_norm=_norm(m, m.hidden_size),
        layers=tuple(_layer(m, k) for k in layer_pattern(m)),
    )


def count_mtp_params(m: ModelSpec) -> int:
    """Parameters of the multi-token-prediction modules, which transformers does not build (so
    count_params leaves them out). DeepSeek-V3 sec. 2.2: module k has RMSNorms of the hidden state
    and of the shared embedding's output, a projection M_k (2h -> h), one transformer block like the
    last layer (or the blocks the config lists: Nemotron 3 Super's attention and MoE blocks,
    layers.mtp_kinds), and a final norm before the shared output head; embedding and head are shared."""
    h = m.hidden_size
    return m.mtp_layers * (3 * _norm(m, h) + 2 * h * h) + sum(_layer(m, k).total for k in mtp_kinds(m))
