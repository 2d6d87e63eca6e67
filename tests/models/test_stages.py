"""The pipeline split (models/stages.py): one answer for the memory model and the trainer."""

from trainplan.costs.states import stage_params
from trainplan.models import resolve
from trainplan.models.stages import chunk_layers, max_stage_layers, rank_chunks, stage_layers


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
