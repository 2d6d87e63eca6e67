"""FLOPs of one training step, from the architecture.

Convention (the one `Estimate.mfu` uses): **model FLOPs** = the matmuls a step must do, counted as
2 FLOP per multiply-add, with causal attention counted at half the s x s work (what a causal flash
kernel executes), the LM head included, embeddings (a lookup) excluded, and recompute excluded.
This is torchtitan's "6N + attention" with N = matmul parameters a token goes through, except that
torchtitan and Megatron (Narayanan et al. 2021 eq. 3) count the full s x s attention; pass
`causal=False` to get theirs. **Hardware FLOPs** add the recompute of the checkpointing policy.

Derivation, per token of a sequence of length s, one layer, forward pass:
  1. A linear layer with a K x N weight does M x K x N multiply-adds for M tokens: 2*K*N FLOP per
     token, i.e. 2 FLOP per weight.
  2. Attention projections: q (h -> heads*d), k and v (h -> kv_heads*d), o (heads*d -> h):
     2*h*(q_dim + 2*kv_dim) + 2*q_dim*h. MLA (DeepSeek-V2 sec. 2.1): q down/up (or plain q), the
     joint kv down projection h -> kv_lora + rope, the kv up projection kv_lora -> heads*(nope + v),
     and o: 2 FLOP per weight of each.
  3. Attention core: scores q.k^T cost 2*heads*d_qk per (query, key) pair, the weighted sum of
     values 2*heads*d_v. A query sees s keys without a mask, (s+1)/2 on average with a causal
     mask (~s/2), and with a causal sliding window w < s: (w*s - w^2/2)/s on average.
  4. MLP: 2 FLOP per weight: 2*h*ff*3 for gated (SwiGLU/GeGLU), 2*h*ff*2 otherwise.
  5. MoE layer: the router (2*h*E), the top-k routed experts a token goes through
     (k * expert MLP) and the shared experts (always on).
  6. LM head: 2*h*V per token (the loss itself is element-wise: non-GEMM work).
  7. Backward = 2 x forward (grad w.r.t. inputs and grad w.r.t. weights, each a matmul of the same
     size; the attention core's backward also does 2 x its forward: dQ, dK, dV with a recomputed
     P in flash attention are counted as recompute-free here, as all published MFU conventions do).
  8. Step = 3 x forward x tokens. Recompute adds forward work again: full checkpointing re-runs
     each layer's forward (not the LM head); Megatron's selective recompute re-runs the attention
     core (Korthikanti et al. 2022 sec. 4.2); `partial` re-runs ac_layers of each stage's layers.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from trainplan.models.spec import ModelSpec


@dataclass(frozen=True, slots=True)
class LayerFlops:
    """Forward FLOPs per token of one layer kind, split by what runs them.

    `gemms` lists (K, N, count, kind) of each linear: a token does 2*K*N FLOP in it; `kind` is
    'attn' (projections), 'mlp' (dense or shared MLP and router) or 'expert' (routed, per active
    expert: count = top-k). Shapes let compute.py pick an efficiency per GEMM.
    """

    gemms: tuple[tuple[int, int, int, str], ...]
    attn_pair_flops: int  # FLOP per (query, key) pair, all heads: 2*heads*(d_qk + d_v)
    window: int | None  # sliding window (keys per query) or None
    count: int  # how many layers of this kind

    @property
    def linear_per_token(self) -> int:
        return sum(2 * k * n * c for k, n, c, _ in self.gemms)


@dataclass(frozen=True, slots=True)
class ModelFlops:
    """Per-model constants, computed once per ModelSpec (cached)."""

    layers: tuple[LayerFlops, ...]
    head_per_token: int  # 2*h*V
    num_layers: int

    def linear_per_token(self) -> int:
        return sum(x.linear_per_token * x.count for x in self.layers)

    def attention_per_token(self, seq_len: int, causal: bool = True) -> float:
        return sum(x.attn_pair_flops * keys_per_query(seq_len, x.window, causal) * x.count
                   for x in self.layers)

    def forward_per_token(self, seq_len: int, causal: bool = True) -> float:
        return self.linear_per_token() + self.attention_per_token(seq_len, causal) + self.head_per_token

    def model_per_token(self, seq_len: int, causal: bool = True) -> float:
        """Model FLOPs per trained token: 3 x forward (step 7-8 above), no recompute."""
        return 3.0 * self.forward_per_token(seq_len, causal)


def keys_per_query(s: int, window: int | None, causal: bool = True) -> float:
    """Average keys a query attends to (step 3)."""
    if not causal:
        return float(s if window is None else min(s, window))
    if window is None or window >= s:
        return s / 2.0
    return (window * s - window * window / 2.0) / s


def _attention_gemms(m: ModelSpec) -> tuple[tuple[tuple[int, int, int, str], ...], int]:
    h = m.hidden_size
    if m.mla is not None:
        a = m.mla
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        if a.q_lora_rank is None:
            q = ((h, m.num_heads * qk, 1, "attn"),)
        else:
            q = ((h, a.q_lora_rank, 1, "attn"), (a.q_lora_rank, m.num_heads * qk, 1, "attn"))
        kv = ((h, a.kv_lora_rank + a.qk_rope_head_dim, 1, "attn"),
              (a.kv_lora_rank, m.num_heads * (a.qk_nope_head_dim + a.v_head_dim), 1, "attn"))
        o = ((m.num_heads * a.v_head_dim, h, 1, "attn"),)
        return q + kv + o, 2 * m.num_heads * (qk + a.v_head_dim)
    gemms = ((h, m.q_dim + 2 * m.kv_dim, 1, "attn"), (m.q_dim, h, 1, "attn"))
    return gemms, 2 * m.num_heads * 2 * m.head_dim


def _mlp_gemms(m: ModelSpec, ff: int, count: int, kind: str) -> tuple[tuple[int, int, int, str], ...]:
    h = m.hidden_size
    up = 2 * ff if m.gated_mlp else ff  # gate and up fused into one GEMM
    return ((h, up, count, kind), (ff, h, count, kind))


@functools.lru_cache(maxsize=256)
def model_flops(m: ModelSpec) -> ModelFlops:
    attn, pair = _attention_gemms(m)
    windowed = m.sliding_window_layers if m.sliding_window else 0
    kinds: list[LayerFlops] = []

    def add(gemms, count):
        # Split a kind into its sliding-window and full-attention layers (Gemma, gpt-oss).
        win = min(windowed, count)
        if win:
            kinds.append(LayerFlops(gemms, pair, m.sliding_window, win))
        if count - win:
            kinds.append(LayerFlops(gemms, pair, None, count - win))
        return win

    dense = m.num_dense_layers
    if dense:
        windowed -= add(attn + _mlp_gemms(m, m.ffn_size, 1, "mlp"), dense)
    if m.num_moe_layers:
        e = m.moe
        g = attn + ((m.hidden_size, e.num_experts, 1, "mlp"),)
        if e.num_shared_experts:
            g += _mlp_gemms(m, e.shared_expert_ffn_size, 1, "mlp")
        g += _mlp_gemms(m, e.expert_ffn_size, e.experts_per_token, "expert")
        add(g, m.num_moe_layers)
    return ModelFlops(tuple(kinds), 2 * m.hidden_size * m.vocab_size, m.num_layers)


def recompute_fraction(ac: str, ac_layers: int, layers_per_stage: int) -> float:
    """Fraction of the layers' forward re-run in backward under full-layer recompute (step 8)."""
    if ac in ("full", "offload"):
        return 1.0
    if ac == "partial":
        return min(1.0, ac_layers / max(1, layers_per_stage))
    return 0.0


def megatron_flops_per_step(batch: int, seq_len: int, layers: int, hidden: int, vocab: int) -> float:
    """Narayanan et al. 2021 eq. 3 (= Korthikanti et al. 2022 eq. 7 model FLOPs):
    72 B s l h^2 (1 + s/(6h) + V/(12 l h)), a GPT with a 4h GELU MLP and full (non-causal) attention."""
    B, s, l, h, V = batch, seq_len, layers, hidden, vocab
    return 72.0 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))
