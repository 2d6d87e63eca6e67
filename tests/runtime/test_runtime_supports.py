"""The trainer runs the settings the planner costs (trainplan/supports.py), checked on the torch side:
the loss chunk count is the planner's, the cross-entropy kind selects the loss, torch's context
parallel exchanges key/value by all-gather (the preset's cp_comm), and a plan the trainer cannot
honour is refused before any process group exists."""

from pathlib import Path

import pytest
import torch

from trainplan.costs.overheads import loss_chunks
from trainplan.errors import TrainplanError
from trainplan.layout import Layout
from trainplan.models import resolve
from trainplan.runtime.loss import chunks_for, lm_loss
from trainplan.stacks import stack

pytestmark = [pytest.mark.torch]


def test_the_chunked_loss_uses_the_priced_chunk_count():
    m = resolve("llama-3.1-8b")
    # ceil(128256 / 4096) = 32 chunks, the count costs/overheads.logits_bytes divides the tokens by
    assert chunks_for(Layout(chunked_loss=True), m.vocab_size, m.hidden_size) == 32
    assert loss_chunks(m.vocab_size, m.hidden_size) == 32
    assert chunks_for(Layout(), m.vocab_size, m.hidden_size) == 1  # the preset's plain loss
    with pytest.raises(TrainplanError, match="fused"):
        chunks_for(Layout(compiled_loss=True), m.vocab_size, m.hidden_size)


def test_chunked_and_plain_losses_agree_and_chunks_cover_the_tokens(monkeypatch):
    from trainplan.runtime import loss

    torch.manual_seed(0)
    h = torch.randn(2, 13, 8, requires_grad=True)
    w = torch.randn(50, 8, requires_grad=True)
    y = torch.randint(0, 50, (2, 13))
    seen = []
    real = loss.checkpoint
    monkeypatch.setattr(loss, "checkpoint", lambda fn, hc, *a, **k: seen.append(len(hc)) or real(fn, hc, *a, **k))
    chunked = lm_loss(h, w, y, chunks=7)
    assert seen == [4] * 6 + [2]  # 26 tokens in ceil(26 / 7) = 4 per chunk, as the planner counts
    plain = lm_loss(h, w, y)
    assert chunked.item() == pytest.approx(plain.item(), rel=1e-6)
    (g_chunked,) = torch.autograd.grad(chunked, w)
    (g_plain,) = torch.autograd.grad(plain, w)
    assert torch.allclose(g_chunked, g_plain, rtol=1e-5, atol=1e-7)


def test_context_parallel_exchanges_by_all_gather_as_the_preset_says():
    from torch.distributed.tensor.experimental._context_parallel._attention import (
        _cp_options,
        _RotateMethod,
    )

    import trainplan.runtime.context  # noqa: F401 - importing the trainer's CP must not change it

    assert stack("trainplan").execution.cp_comm == "allgather"
    assert _cp_options.rotate_method == _RotateMethod.ALL_GATHER


@pytest.mark.parametrize("layout, words", [
    ({"ep": 2}, "multi-head latent attention"),
    ({}, "gpt-oss-120b uses attention sinks, sliding-window attention"),  # data parallel, but not --hf
    ({"execution": {"tp_comm_overlap": True}}, "tp_comm_overlap"),
    ({"execution": {"cuda_graphs": True}}, "cuda_graphs"),
    ({"execution": {"power_limit_w": 600}}, "power_limit_w"),
])
def test_the_trainer_refuses_before_any_process_group(tmp_path, layout, words):
    import torch.distributed as dist

    from trainplan.runtime.demo import demo_plan
    from trainplan.runtime.trainer import RunOptions, train

    model = resolve("deepseek-v3") if "ep" in layout else None if layout else resolve("gpt-oss-120b")
    kw = dict(layout)
    if "execution" in kw:
        kw["execution"] = stack("trainplan").execution.with_(**kw["execution"])
    plan = demo_plan(2, **kw, **({"model": model} if model else {}))
    with pytest.raises(TrainplanError, match=words):
        train(plan, RunOptions(out=Path(tmp_path)))
    assert not dist.is_initialized()
