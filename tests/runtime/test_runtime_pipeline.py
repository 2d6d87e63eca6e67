"""Pipeline cutting (runtime/pipeline.py) and the model's stage/position hooks, on one process."""

from dataclasses import replace

import torch
import torch.nn.functional as F

from trainplan.costs.states import stage_params
from trainplan.models.stages import Uneven, rank_chunks
from trainplan.runtime.demo import DEMO_MODEL
from trainplan.runtime.model import Decoder
from trainplan.runtime.pipeline import rank_view, split_decoder

SPEC = replace(DEMO_MODEL, num_layers=5, hidden_size=64, num_heads=4, num_kv_heads=2, head_dim=16, ffn_size=128,
               tied_embeddings=False)


def test_each_rank_builds_the_layers_the_memory_model_prices():
    # One split (models/stages.py) for the trainer and the memory model, interleaved included.
    spec = replace(SPEC, num_layers=7)
    with torch.device("meta"):
        meta = Decoder(spec, 32)
    pp, vp = 2, 2
    for r, priced in enumerate(stage_params(spec, 1, 1, pp, vp)):
        built = [int(k) for part in split_decoder(meta, rank_chunks(r, pp, vp), pp, vp) for k in part.layers]
        assert tuple(built) == priced.layers
    assert [len(s.layers) for s in stage_params(spec, 1, 1, pp, vp)] == [4, 3]


def test_embedding_and_loss_in_the_split_leave_end_chunks_without_layers():
    # Megatron's account_for_embedding/loss_in_pipeline_split (models/stages.py): 6 layers + 2 on
    # 2 ranks x 2 chunks = 2 per chunk; chunk 0 builds only the embedding + 1 layer, chunk 3 one
    # layer + the head. The chunks chained still compute the whole model.
    torch.manual_seed(0)
    spec = replace(SPEC, num_layers=6)
    whole = Decoder(spec, 32)
    whole.init_weights(seed=0)
    with torch.device("meta"):
        meta = Decoder(spec, 32)
    ends = Uneven(embedding=True, loss=True)
    parts = split_decoder(meta, [0, 1, 2, 3], 2, 2, ends)
    assert [list(p.layers) for p in parts] == [["0"], ["1", "2"], ["3", "4"], ["5"]]
    for r, priced in enumerate(stage_params(spec, 1, 1, 2, 2, ends)):
        assert tuple(int(k) for c in rank_chunks(r, 2, 2) for k in parts[c].layers) == priced.layers
    h = x = torch.randint(0, spec.vocab_size, (2, 32))
    for p in parts:
        p.to_empty(device="cpu")
        p.init_weights(seed=0)
        h = p(h)
    y = torch.roll(x, -1, dims=1)
    assert torch.allclose(F.cross_entropy(h.float().flatten(0, -2), y.flatten()), whole(x, y), rtol=1e-6)


def test_chunks_chained_equal_the_whole_model_and_keep_its_names():
    torch.manual_seed(0)
    whole = Decoder(SPEC, 32)
    whole.init_weights(seed=0)
    with torch.device("meta"):
        meta = Decoder(SPEC, 32)
    parts = split_decoder(meta, [0, 1, 2], 3)  # pp=3
    for p in parts:
        p.to_empty(device="cpu")
        p.init_weights(seed=0)  # seeded by name: the same values as the whole model's
    x = torch.randint(0, SPEC.vocab_size, (2, 32))
    y = torch.roll(x, -1, dims=1)
    h = x
    for p in parts:
        h = p(h)
    loss = F.cross_entropy(h.float().flatten(0, -2), y.flatten())
    assert torch.allclose(loss, whole(x, y), rtol=1e-6)
    view = rank_view(parts)
    assert [n for n, _ in view.named_parameters()] == [n for n, _ in whole.named_parameters()]
    assert parts[1].tok_embeddings is None and parts[1].norm is None and list(parts[1].layers) == ["2", "3"]


def test_positions_default_to_the_sequence_order():
    # Context parallel passes each rank's absolute positions; arange must be the default exactly.
    m = Decoder(SPEC, 32)
    m.init_weights(seed=0)
    x = torch.randint(0, SPEC.vocab_size, (1, 32))
    y = torch.roll(x, -1, dims=1)
    assert torch.equal(m(x, y), m(x, y, positions=torch.arange(32)))
    # Rotary attention depends on relative positions only: a shift changes nothing, a stretch does
    # (logits compared: at init attention is near uniform and the loss barely moves).
    base = m(x)
    assert torch.allclose(base, m(x, positions=torch.arange(32) + 5), atol=1e-6)
    assert (base - m(x, positions=torch.arange(32) * 2)).abs().max() > 1e-5


def test_tied_embedding_gets_an_equal_head_copy_on_the_last_stage():
    tied = replace(SPEC, tied_embeddings=True)
    with torch.device("meta"):
        meta = Decoder(tied, 32)
    first, last = split_decoder(meta, [0, 1], 2)
    for p in (first, last):
        p.to_empty(device="cpu")
        p.init_weights(seed=0)
    assert first.output is None and last.tok_embeddings is None
    assert torch.equal(first.tok_embeddings.weight, last.output.weight)
