"""Selective checkpointing in the runtime is the policy the planner prices: torchtitan's per-op SAC
(keep attention and every other matmul; costs/flops.py steps 9-13, costs/activations.py)."""

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from torch.utils.checkpoint import CheckpointPolicy

from trainplan.runtime.parallel import selective_policy

MM = torch.ops.aten.mm.default
SAVE, RECOMPUTE = CheckpointPolicy.MUST_SAVE, CheckpointPolicy.PREFER_RECOMPUTE


def test_every_second_matmul_is_recomputed_in_forward_and_recompute_alike():
    policy = selective_policy()
    fwd, rec = SimpleNamespace(is_recompute=False), SimpleNamespace(is_recompute=True)
    # a Llama layer's 7 projections: q k v o gate up down
    assert [policy(fwd, MM) for _ in range(7)] == [SAVE, RECOMPUTE] * 3 + [SAVE]
    # the recompute pass numbers its matmuls the same way, so it re-runs exactly k, o, up
    assert [policy(rec, MM) for _ in range(7)] == [SAVE, RECOMPUTE] * 3 + [SAVE]


def test_attention_is_kept_and_element_wise_ops_are_recomputed():
    policy = selective_policy()
    ctx = SimpleNamespace(is_recompute=False)
    assert policy(ctx, torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default) == SAVE
    assert policy(ctx, torch.ops.aten.silu.default) == RECOMPUTE
    assert policy(ctx, torch.ops.aten.mul.Tensor) == RECOMPUTE


def test_selective_block_gives_the_gradients_of_no_checkpointing():
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.SiLU(), torch.nn.Linear(16, 8),
                                torch.nn.Linear(8, 8))
    x = torch.randn(4, 8)
    block(x).square().sum().backward()
    want = [p.grad.clone() for p in block.parameters()]
    block.zero_grad()
    wrapped = checkpoint_wrapper(block, preserve_rng_state=False,
                                 context_fn=lambda: create_selective_checkpoint_contexts(selective_policy()))
    wrapped(x).square().sum().backward()
    for g, w in zip((p.grad for p in block.parameters()), want):
        torch.testing.assert_close(g, w)
