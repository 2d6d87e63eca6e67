"""Layout resolves its names once (issue #25 item 3): the recipe, the stack's conventions, the expert
groups and the hash are properties of the layout, equal to the one rule each comes from, and a
layout built from another by `with_` resolves its own."""

from dataclasses import fields, replace

import pytest

from trainplan.layout import Layout, expert_groups
from trainplan.precision import recipe, registry
from trainplan.stacks import conventions, stacks

LAYOUTS = [Layout(), Layout(tp=4, ep=8, dp_shard=16, precision="fp8_tensorwise"),
           Layout(tp=2, etp=1, ep=4, dp_shard=8, stack="torchtitan"),
           Layout(sharding="zero1", dp_shard=8, grad_reduce_fp32=False, stack="megatron"),
           *(Layout(precision=name) for name in registry())]


@pytest.mark.parametrize("L", LAYOUTS, ids=lambda L: L.short())
def test_each_property_is_its_rule(L):
    assert L.recipe is recipe(L.precision)
    assert L.conventions == conventions(L)
    assert L.expert_groups == expert_groups(L)
    assert L.global_batch == L.micro_batch * L.grad_accum * L.dp


@pytest.mark.parametrize("name", list(stacks()))
def test_a_new_layout_resolves_its_own_conventions(name):
    a = Layout(stack=name)
    b = a.with_(grad_reduce_fp32=not a.conventions.grad_reduce_fp32)
    assert b.conventions == conventions(b) != a.conventions


def test_with_is_replace():
    L = LAYOUTS[1]
    changes = {"micro_batch": 4, "ac": "full", "tp": 2, "fp8_allgather": True}
    assert L.with_(**changes) == replace(L, **changes)
    with pytest.raises(TypeError, match="no field 'nope'"):
        L.with_(nope=1)


def test_the_hash_is_the_fields_hash_and_equal_layouts_share_it():
    for L in LAYOUTS:
        twin = Layout(**{f.name: getattr(L, f.name) for f in fields(Layout)})
        assert twin == L and hash(twin) == hash(L)
        assert hash(L) == hash(tuple(getattr(L, f.name) for f in fields(Layout)))
    assert len({hash(L) for L in LAYOUTS}) == len(set(LAYOUTS))


def test_resolved_values_are_not_fields():
    names = {f.name for f in fields(Layout)}
    assert not names & {"recipe", "conventions", "expert_groups", "_recipe", "_conventions", "_hash"}
    assert "_recipe" not in Layout().to_dict()
