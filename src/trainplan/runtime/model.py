"""A Llama-family decoder (dense or MoE) built from a plan's ModelSpec.

Written for this project so that the runtime executes exactly the architecture the planner counted
(`trainplan.models.params.count_params` equals `sum(p.numel())` here; tests/runtime checks it).
Module and parameter names follow torchtitan's Llama (`tok_embeddings`, `layers.N.attention.wq`,
`feed_forward.w1/w2/w3`, `norm`, `output`) so the tensor-parallel plan and the checkpoint keys read
the same as there. Built on the meta device; `init_weights` fills the parameters afterwards, so
that a model larger than one device's memory is never materialised whole.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from trainplan.models.layers import is_moe_layer
from trainplan.models.spec import ModelSpec
from trainplan.runtime.init import fill
from trainplan.runtime.loss import lm_loss


def _norm(spec: ModelSpec, dim: int) -> nn.Module:
    if spec.norm == "layernorm":
        return nn.LayerNorm(dim, eps=1e-5)
    return nn.RMSNorm(dim, eps=1e-6)


def rope_tables(head_dim: int, seq_len: int, theta: float = 500000.0, device=None, positions=None):
    """cos/sin tables for rotary embeddings (Su et al. 2021, RoFormer, eq. 34), shape (seq, head_dim/2),
    at positions 0..seq_len-1 or at the given `positions` (a context-parallel shard's own)."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    if positions is not None:
        t = positions.to(torch.float32)
    else:
        t = torch.arange(seq_len, device=device, dtype=torch.float32)
    freqs = torch.outer(t, inv)
    return freqs.cos(), freqs.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (batch, heads, seq, head_dim); rotates the two halves of each head (the HF/Llama layout)."""
    x1, x2 = x.float().chunk(2, dim=-1)
    cos, sin = cos[None, None], sin[None, None]
    out = torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return out.type_as(x)


def sequence_shard(h: torch.Tensor, mesh) -> torch.Tensor:
    """This tp rank's 1/tp of the sequence (dim 1) of a tensor every tp rank holds whole; backward
    all-gathers the shards' gradients (DTensor Replicate -> Shard(1), and back)."""
    from torch.distributed.tensor import DTensor, Replicate, Shard

    return DTensor.from_local(h, mesh, [Replicate()], run_check=False).redistribute(mesh, [Shard(1)]).to_local()


def sequence_gather(h: torch.Tensor, mesh) -> torch.Tensor:
    """The whole sequence from the tp ranks' shards (all-gather on dim 1), for a computation every
    tp rank then runs whole (the LM head and loss): backward keeps the rank's own slice of the
    (identical) gradient."""
    from torch.distributed.tensor import DTensor, Replicate, Shard

    return DTensor.from_local(h, mesh, [Shard(1)], run_check=False).redistribute(mesh, [Replicate()]).to_local()


class Attention(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        h, hd = spec.hidden_size, spec.head_dim
        self.head_dim = hd
        self.kv_repeat = spec.num_heads // spec.num_kv_heads
        self.wq = nn.Linear(h, spec.q_dim, bias=spec.qkv_bias)
        self.wk = nn.Linear(h, spec.kv_dim, bias=spec.qkv_bias)
        self.wv = nn.Linear(h, spec.kv_dim, bias=spec.qkv_bias)
        self.wo = nn.Linear(spec.q_dim, h, bias=spec.o_bias)
        self.q_norm = nn.RMSNorm(hd, eps=1e-6) if spec.qk_norm else None
        self.k_norm = nn.RMSNorm(hd, eps=1e-6) if spec.qk_norm else None

    def forward(self, x: torch.Tensor, rope) -> torch.Tensor:
        b, s, _ = x.shape
        # -1 heads: under tensor parallelism each rank holds a slice of the heads.
        q = self.wq(x).view(b, s, -1, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, s, -1, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, s, -1, self.head_dim).transpose(1, 2)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        if self.kv_repeat > 1:
            k = k.repeat_interleave(self.kv_repeat, dim=1)
            v = v.repeat_interleave(self.kv_repeat, dim=1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(o.transpose(1, 2).reshape(b, s, -1))


def activation(kind: str, a: torch.Tensor) -> torch.Tensor:
    """The MLP non-linearity of ModelSpec.mlp (dense MLPs and routed experts alike)."""
    if kind == "swiglu":
        return F.silu(a)
    if kind == "geglu":
        return F.gelu(a, approximate="tanh")
    if kind == "relu2":
        return F.relu(a).square()
    return F.gelu(a)


class FeedForward(nn.Module):
    """Gated (SwiGLU/GeGLU: w2(act(w1 x) * w3 x)) or plain (GELU/ReLU^2: w2(act(w1 x))) MLP."""

    def __init__(self, spec: ModelSpec, hidden: int, ffn: int, bias: bool):
        super().__init__()
        self.kind = spec.mlp
        self.w1 = nn.Linear(hidden, ffn, bias=bias)
        self.w2 = nn.Linear(ffn, hidden, bias=bias)
        self.w3 = nn.Linear(hidden, ffn, bias=bias) if spec.gated_mlp else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = activation(self.kind, self.w1(x))
        if self.w3 is not None:
            a = a * self.w3(x)
        return self.w2(a)


class Block(nn.Module):
    def __init__(self, spec: ModelSpec, index: int):
        super().__init__()
        m = spec.moe
        is_moe = is_moe_layer(m, index)
        self.attention_norm = _norm(spec, spec.hidden_size)
        self.attention = Attention(spec)
        self.ffn_norm = _norm(spec, spec.hidden_size)
        if is_moe:
            from trainplan.runtime.moe import MoE  # moe.py builds on this module's FeedForward

        self.feed_forward = MoE(spec) if is_moe else FeedForward(spec, spec.hidden_size, spec.ffn_size, spec.mlp_bias)

    def forward(self, x: torch.Tensor, rope) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), rope)
        return x + self.feed_forward(self.ffn_norm(x))


class Decoder(nn.Module):
    """Embeddings -> blocks -> final norm -> LM head and loss."""

    def __init__(self, spec: ModelSpec, max_seq_len: int):
        super().__init__()
        self.spec = spec
        self.max_seq_len = max_seq_len
        self.tok_embeddings = nn.Embedding(spec.vocab_size, spec.hidden_size)
        self.pos_embeddings = (nn.Embedding(spec.max_position_embeddings, spec.hidden_size)
                               if spec.position_embedding == "learned" else None)
        # A ModuleDict keyed by str(index), as torchtitan: keys stay stable if layers are removed.
        self.layers = nn.ModuleDict({str(i): Block(spec, i) for i in range(spec.num_layers)})
        self.norm = _norm(spec, spec.hidden_size)
        self.output = None if spec.tied_embeddings else nn.Linear(spec.hidden_size, spec.vocab_size, bias=False)
        self.loss_chunks = 1  # set by apply_loss (layout.chunked_loss)
        self.sp_mesh = None  # tp with sequence parallel (parallel.apply_tp): the residual stream is sharded over it

    def forward(self, tokens: torch.Tensor, labels: torch.Tensor | None = None,
                positions: torch.Tensor | None = None) -> torch.Tensor:
        """Mean next-token cross-entropy over the batch. The LM head runs inside forward (so FSDP
        has the weights gathered), chunked over the sequence when `loss_chunks` > 1.

        A pipeline stage (runtime/pipeline.py) is a Decoder with the parts it does not hold set to
        None: without `tok_embeddings` the input is the previous stage's hidden state, without
        `norm` the output is this stage's hidden state, and without labels the last stage returns
        the logits (the schedule's loss_fn takes the loss). `positions`: the absolute positions of
        the sequence entries (context parallel: each rank holds a load-balanced part of the
        sequence, runtime/context.py); default 0..seq-1."""
        sp = self.sp_mesh
        if self.tok_embeddings is not None:
            h = self.tok_embeddings(tokens)
            s = h.shape[1]
        else:  # a later pipeline stage: the previous stage's hidden state (its 1/tp shard under sp, exact:
            # tp divides the sequence, layout.check_layout)
            h = tokens
            s = h.shape[1] * (sp.size() if sp is not None else 1)
        rope = None
        if self.pos_embeddings is not None:
            h = h + self.pos_embeddings(positions if positions is not None else torch.arange(s, device=h.device))[None]
        elif self.spec.position_embedding != "learned":
            # Tables are recomputed per step (cheap next to the GEMMs) rather than kept as buffers,
            # so that meta-device construction and checkpoint keys stay free of non-parameters.
            # Attention sees the whole sequence (gathered under sp): the tables cover all of it.
            rope = rope_tables(self.spec.head_dim, s, device=h.device, positions=positions)
        if sp is not None and self.tok_embeddings is not None:
            h = sequence_shard(h, sp)
        for block in self.layers.values():
            h = block(h, rope)
        if self.norm is None:
            return h
        h = self.norm(h)
        if sp is not None:
            h = sequence_gather(h, sp)
        head = self.tok_embeddings.weight if self.output is None else self.output.weight
        if labels is None:
            return F.linear(h, head)
        return lm_loss(h, head, labels, self.loss_chunks)

    @torch.no_grad()
    def init_weights(self, seed: int) -> None:
        """Deterministic, layout-independent init (runtime/init.py): normal(0, 0.02) truncated at
        3 std for linears and embeddings, output projections (wo, w2) at 0.02/sqrt(2 * layers)
        (GPT-2 paper, section 2.3), norms to one, biases to zero."""
        std = 0.02
        out_std = std / math.sqrt(2 * self.spec.num_layers)
        for mname, mod in self.named_modules():
            for pname, p in mod.named_parameters(recurse=False):
                name = f"{mname}.{pname}" if mname else pname
                if self.spec.tied_embeddings and name == "output.weight":
                    # The last pipeline stage's copy of a tied embedding (pipeline.py): same values.
                    name = "tok_embeddings.weight"
                if isinstance(mod, (nn.RMSNorm, nn.LayerNorm)):
                    fill(p, name, seed, "ones" if pname == "weight" else "zeros")
                elif pname in ("bias", "b1", "b2", "b3"):  # b1..b3: the routed experts' biases (moe.py)
                    fill(p, name, seed, "zeros")
                else:
                    out = mname.endswith(("wo", "w2")) or pname == "w2"  # pname w2: stacked experts
                    fill(p, name, seed, "normal", out_std if out else std)
            for bname, buf in mod.named_buffers(recurse=False):
                if bname == "expert_bias":  # the aux-free routing bias starts at zero
                    buf.zero_()
