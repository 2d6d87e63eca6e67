"""The search space: pruning rules, node-count grid, batch arithmetic, bisection helpers."""

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainplan.errors import TrainplanError
from trainplan.hardware import find_node
from trainplan.models import resolve
from trainplan.search import BatchSpec, parse_batch, space
from trainplan.search.engine import largest, smallest

B200 = find_node("ml.p6-b200.48xlarge")
GB200 = find_node("ml.p6e-gb200.36xlarge")


def test_tp_stays_inside_the_node_and_divides_the_heads():
    m = resolve("llama-3.1-70b")  # 64 heads, 8 kv heads
    assert space.tp_options(m, B200) == [1, 2, 4, 8]
    g = resolve("gemma-2-9b")
    assert all(g.num_heads % t == 0 for t in space.tp_options(g, B200))


def test_every_mesh_uses_every_gpu_and_hsdp_shards_inside_a_node():
    m = resolve("llama-3.1-405b")
    meshes = list(space.meshes(m, B200, 4, 8192))
    assert meshes
    for x in meshes:
        assert x.dp * x.tp * x.pp * x.cp == 32
        assert x.tp <= 8
        if x.dp_replicate > 1:
            assert x.sharding == "fsdp" and x.dp_shard * x.tp * x.cp == 8
        if x.dp == 1:
            assert x.sharding == "none"
    assert {x.cp for x in meshes} == {1, 2}  # at least 4096 tokens per CP rank
    assert {x.cp for x in space.meshes(m, B200, 4, 4096)} == {1}


def test_cp_opens_up_with_long_sequences_and_ep_only_for_moe():
    m = resolve("llama-3.1-8b")
    assert space.cp_options(131072) == [1, 2, 4, 8, 16, 32]
    assert space.cp_options(None)[-1] == space.MAX_CP
    assert {x.ep for x in space.meshes(m, B200, 1, 8192)} == {1}
    moe = resolve("qwen3-30b-a3b")
    assert max(x.ep for x in space.meshes(moe, B200, 1, 8192)) > 1


def test_moe_meshes_with_tp_try_every_expert_folding():
    moe = resolve("qwen3-30b-a3b")
    meshes = list(space.meshes(moe, B200, 1, 4096))
    assert {x.etp for x in meshes if x.tp == 1} == {None}  # no tp: the stack's (etp = 1 = tp)
    assert {x.etp for x in meshes if x.tp == 2} == {2, 1}
    assert {x.etp for x in meshes if x.tp == 4} == {4, 2, 1}
    # etp = 1 lets ep take the tp ranks too: ep = 8 on tp = 2 with dp_shard = 4
    assert any(x.ep == 8 and x.etp == 1 for x in meshes if x.tp == 2 and x.dp_shard == 4)
    assert not any(x.ep == 8 and x.etp == 2 for x in meshes if x.tp == 2 and x.dp_shard == 4)
    assert {x.etp for x in space.meshes(resolve("llama-3.1-8b"), B200, 1, 4096)} == {None}


def test_vp_gives_chunks_of_one_two_or_four_layers():
    assert space.vp_options(96, 8) == [2, 3, 6, 12]  # Nemotron-4 340B: NVIDIA runs vp=12
    # 126 layers do not divide over 8 ranks; 126 + embedding + loss = 128 do (models/stages.py)
    assert space.vp_options(126, 8) == [2, 4, 8, 16]
    assert space.vp_options(126, 16) == [2, 4, 8]  # Llama 3 405B: 16 stages x vp 8 (Llama 3 paper)
    assert space.vp_options(125, 8) == [2]  # neither divides: only the shallow interleave
    assert space.vp_options(4, 4) == []


def test_node_count_grid_steps_at_most_25_percent():
    grid = space.node_counts(128)
    assert grid[:8] == list(range(1, 9)) and grid[-1] == 128
    assert all(b / a <= 1.25 + 1e-9 for a, b in itertools.pairwise(grid[8:]))
    assert space.node_counts(5) == [1, 2, 3, 4, 5]
    assert space.node_counts(100)[-1] == 100


def test_batch_fixed_range_and_default():
    fixed = BatchSpec(512, 512)
    assert fixed.micro_batches(8, 8192) == [1, 2, 4, 8, 16, 32, 64]
    assert fixed.grad_accum(8, 4, 8192) == 16
    assert fixed.micro_batches(24, 8192) == []  # 24 does not divide 512
    rng = parse_batch("300:512")
    assert rng.grad_accum(24, 1, 8192) == 21  # 504 sequences
    assert rng.grad_accum(24, 16, 8192) == 1  # 384 sequences, inside the range
    assert parse_batch("400:512").grad_accum(24, 16, 8192) is None  # 384 < 400, 768 > 512
    default = BatchSpec()
    assert default.grad_accum(8, 1, 8192) == 64  # 4 Mi tokens / 8192 = 512 sequences


def test_batch_range_rejects_a_micro_batch_that_overshoots():
    rng = parse_batch("300:512")
    assert rng.grad_accum(24, 32, 8192) is None  # 768 > 512


@pytest.mark.parametrize("text, message", [
    ("0", "--global-batch must be N or LO:HI positive sequences, got '0'"),
    ("x", "--global-batch must be N or LO:HI sequences, got 'x'"),
    ("64:32", "--global-batch range '64:32' is empty: 64 > 32"),
])
def test_bad_global_batch(text, message):
    with pytest.raises(TrainplanError) as e:
        parse_batch(text)
    assert str(e.value) == message


@given(st.lists(st.integers(0, 50), max_size=30), st.integers(0, 60))
def test_bisection_matches_a_linear_scan(items, cut):
    items = sorted(set(items))
    below = [x for x in items if x <= cut]
    assert largest(items, lambda x: x <= cut) == (below[-1] if below else None)
    above = [x for x in items if x >= cut]
    assert smallest(items, lambda x: x >= cut) == (above[0] if above else None)


def test_every_expert_tensor_parallel_size_inside_tp_is_searched_for_moe_models():
    from trainplan.models import resolve
    from trainplan.search.space import etp_options

    moe, dense = resolve("mixtral-8x7b"), resolve("llama-3.1-8b")
    assert etp_options(moe, 8) == [8, 1, 2, 4] and etp_options(moe, 2) == [2, 1]
    assert etp_options(moe, 1) == [None] and etp_options(dense, 8) == [None]


def test_a_megatron_search_costs_an_etp_between_one_and_tp_and_a_torch_stack_skips_it():
    from trainplan.hardware import find_node
    from trainplan.models import resolve
    from trainplan.search import Query, model_evaluator
    from trainplan.search.engine import run_search

    q = {"nodes": 1, "seq_len": 4096, "precision": "bf16"}
    p5 = (find_node("ml.p5.48xlarge"),)
    mega, _, _ = run_search(Query(resolve("qwen3-30b-a3b"), p5, stack="megatron", **q), model_evaluator())
    assert any(c.layout.tp == 4 and c.layout.etp == 2 for c in mega)
    titan, _, _ = run_search(Query(resolve("qwen3-30b-a3b"), p5, stack="torchtitan", **q), model_evaluator())
    assert titan and all(c.layout.etp in (None, 1, c.layout.tp) for c in titan)
