"""The pipeline split (models/stages.py): one answer for the memory model and the trainer."""

import pytest

from trainplan.costs.states import stage_params
from trainplan.errors import TrainplanError
from trainplan.models import resolve
from trainplan.models.stages import (
    Uneven,
    balanced_split,
    check_split,
    chunk_layers,
    max_stage_layers,
    pipeline_chunks,
    rank_chunks,
    stage_layers,
)


def test_chunks_are_consecutive_and_front_loaded():
    assert chunk_layers(5, 2) == (range(3), range(3, 5))
    assert chunk_layers(126, 16)[0] == range(8) and chunk_layers(126, 16)[-1] == range(119, 126)
    assert chunk_layers(10, 4) == (range(3), range(3, 6), range(6, 8), range(8, 10))


def test_interleaved_ranks_loop_over_the_chunks():
    assert rank_chunks(0, 4, 2) == [0, 4] and rank_chunks(3, 4, 2) == [3, 7]
    assert stage_layers(8, 2, 2) == ((0, 1, 4, 5), (2, 3, 6, 7))
    for n, pp, vp in ((61, 4, 2), (13, 4, 2), (126, 8, 3), (80, 4, 1)):
        ranks = stage_layers(n, pp, vp)
        assert sorted(i for r in ranks for i in r) == list(range(n))
        # the layer count per rank does not depend on vp; rank 0 holds the most
        assert [len(r) for r in ranks] == [len(r) for r in stage_layers(n, pp, 1)]
        assert len(ranks[0]) == max_stage_layers(n, pp)


def test_interleaved_ranks_hold_the_layers_the_memory_model_prices():
    # DeepSeek-V3 (61 layers, 0-2 dense): pp=4, vp=2 cuts 8 chunks of 8,8,8,8,8,7,7,7 layers and
    # rank 0 holds chunks 0 and 4; stage_params prices exactly those layers.
    m = resolve("deepseek-v3")
    assert stage_layers(61, 4, 2)[0] == tuple(range(8)) + tuple(range(32, 40))
    st = stage_params(m, 1, 8, 4, 2)
    assert [s.layers for s in st] == list(stage_layers(61, 4, 2))
    assert [s.moe_layers for s in st] == [13, 15, 15, 15]


def test_first_and_last_stage_counts_follow_megatron():
    # --decoder-first/last-pipeline-num-layers: 126 layers, pp=16, first=last=6 -> 114 over 14
    # middle ranks is not even (Megatron refuses); first=last=7 leaves 8 per middle rank.
    u = Uneven(first=7, last=7)
    ranks = stage_layers(126, 16, 1, u)
    assert [len(r) for r in ranks] == [7] + [8] * 14 + [7]
    assert ranks[1][0] == 7 and ranks[-1][-1] == 125
    with pytest.raises(TrainplanError, match="middle"):
        check_split(126, 16, 1, Uneven(first=6, last=6))
    # with vp every rank's count divides by vp; chunk (v, r) holds count / vp layers, in chunk order
    u2 = Uneven(first=4, last=4)
    check_split(20, 3, 2, u2)
    assert [len(c) for c in pipeline_chunks(20, 3, 2, u2)] == [2, 6, 2, 2, 6, 2]
    assert stage_layers(20, 3, 2, u2)[0] == (0, 1, 10, 11)
    with pytest.raises(TrainplanError, match="divide by vp"):
        check_split(21, 3, 2, Uneven(first=3, last=4))


def test_embedding_and_loss_count_as_layers():
    # Llama 3 405B on 16 stages x 8 chunks (Llama 3 paper sec. 3.3.2): (126 + 2) / 128 = 1 layer per
    # chunk; rank 0's first chunk holds only the embedding, the last rank's last chunk only the loss.
    u = Uneven(embedding=True, loss=True)
    check_split(126, 16, 8, u)
    chunks = pipeline_chunks(126, 16, 8, u)
    assert len(chunks[0]) == 0 and len(chunks[-1]) == 0 and all(len(c) == 1 for c in chunks[1:-1])
    assert [len(r) for r in stage_layers(126, 16, 8, u)] == [7] + [8] * 14 + [7]
    assert max_stage_layers(126, 16, 8, u) == 8
    with pytest.raises(TrainplanError, match="pp_embedding_in_split"):
        check_split(126, 16, 8)  # the even split has fewer layers than chunks
    with pytest.raises(TrainplanError, match="must divide by pp"):
        check_split(126, 16, 8, Uneven(embedding=True))
    with pytest.raises(TrainplanError, match="cannot be combined"):
        check_split(126, 16, 1, Uneven(first=7, loss=True))


def test_uneven_split_reaches_memory_and_layout_round_trip():
    from trainplan.layout import parse_layout

    m = resolve("llama-3.1-405b")
    u = Uneven(embedding=True, loss=True)
    st = stage_params(m, 8, 1, 16, 8, u)
    even = stage_params(m, 8, 1, 16, 1)
    # rank 0 holds one layer less than the even split's rank 0 (8), the middle ranks 8
    assert st[0].num_layers == 7 and st[0].dense < even[0].dense and st[1].num_layers == 8
    text = "bf16 ac=selective mb=1 ga=16 dp=1x128(zero1) tp=8 pp=16 interleaved/v8 pp_embedding_in_split=true " \
           "pp_loss_in_split=true"
    lay = parse_layout(text)
    assert lay.uneven == u and lay.short() == text
    assert "pp_first_stage_layers" not in lay.to_dict()  # unset uneven fields leave plan.json as before


def test_balanced_split_counts_the_ends_only_when_the_layers_alone_do_not_divide():
    assert balanced_split(126, 16, 8) == Uneven(embedding=True, loss=True)
    assert balanced_split(126, 8, 8) == Uneven(embedding=True, loss=True)  # 128 / 64 = 2 per chunk
    assert balanced_split(96, 8, 12) == Uneven()  # divides: the even split
    assert balanced_split(125, 8, 1) == Uneven()  # neither divides: the even (front-loaded) split
