"""The runtime's own Llama-family model: parameter counts equal the planner's, the loss is a
proper cross-entropy, chunking changes nothing, init does not depend on wrappers or layout."""

import math
from dataclasses import replace

import pytest
import torch

from trainplan.models.params import count_params
from trainplan.models.spec import MoESpec
from trainplan.runtime.demo import DEMO_MODEL
from trainplan.runtime.init import canonical_name, fill
from trainplan.runtime.loss import lm_loss
from trainplan.runtime.model import Decoder

TINY = replace(DEMO_MODEL, num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2, head_dim=16, ffn_size=128)
MOE = replace(TINY, moe=MoESpec(num_experts=4, experts_per_token=2, expert_ffn_size=32, num_shared_experts=1,
                                shared_expert_ffn_size=32, first_dense_layers=1, router_bias=True))
VARIANT = replace(TINY, mlp="gelu", norm="layernorm", position_embedding="learned", max_position_embeddings=128,
                  qkv_bias=True, o_bias=True, mlp_bias=True, qk_norm=True, tied_embeddings=False)


@pytest.mark.parametrize("spec", [TINY, MOE, VARIANT], ids=["dense", "moe", "gelu-layernorm-learned-bias-qknorm"])
def test_parameter_count_equals_planner(spec):
    with torch.device("meta"):
        m = Decoder(spec, 64)
    assert sum(p.numel() for p in m.parameters()) == count_params(spec).total


@pytest.mark.parametrize("spec", [TINY, MOE, VARIANT], ids=["dense", "moe", "variant"])
def test_initial_loss_is_uniform_cross_entropy(spec):
    # Small init (std 0.02) makes logits near zero: the loss starts near ln(vocab).
    m = Decoder(spec, 64)
    m.init_weights(seed=0)
    x = torch.randint(0, spec.vocab_size, (2, 64))
    loss = m(x, torch.roll(x, -1, dims=1))
    assert abs(loss.item() - math.log(spec.vocab_size)) < 0.1
    loss.backward()
    assert all(p.grad is not None for p in m.parameters())  # every expert gets a gradient too


def test_chunked_loss_equals_full_loss_and_gradients():
    torch.manual_seed(0)
    h = torch.randn(2, 64, 32, requires_grad=True)
    w = torch.randn(300, 32, requires_grad=True)
    y = torch.randint(0, 300, (2, 64))
    full = lm_loss(h, w, y, chunks=1)
    gh, gw = torch.autograd.grad(full, (h, w))
    chunked = lm_loss(h, w, y, chunks=8)
    ch, cw = torch.autograd.grad(chunked, (h, w))
    torch.testing.assert_close(chunked, full)
    torch.testing.assert_close(ch, gh)
    torch.testing.assert_close(cw, gw)


def test_init_ignores_wrapper_names_and_depends_on_seed():
    assert canonical_name("layers.0._checkpoint_wrapped_module._orig_mod.attention.wq.weight") == \
        "layers.0.attention.wq.weight"
    a, b, c = torch.empty(8, 8), torch.empty(8, 8), torch.empty(8, 8)
    fill(a, "layers.0.attention.wq.weight", 1, "normal")
    fill(b, "layers.0._checkpoint_wrapped_module.attention.wq.weight", 1, "normal")
    fill(c, "layers.0.attention.wq.weight", 2, "normal")
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert a.abs().max() <= 3 * 0.02 + 1e-7  # clipped at 3 std


def test_same_seed_same_model():
    m1, m2 = Decoder(TINY, 64), Decoder(TINY, 64)
    m1.init_weights(3)
    m2.init_weights(3)
    for (n, p), (_, q) in zip(m1.named_parameters(), m2.named_parameters()):
        assert torch.equal(p, q), n
