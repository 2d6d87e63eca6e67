"""One spelling per field (spelling.py): every Layout field's text key and JSON key come from its one
declaration and read back to the same value, and the Workload's JSON keys are its field names. The
fields, keys and sample values are derived from the dataclasses and their registries, so a field
added to Layout is checked here without a change."""

from __future__ import annotations

import pytest

from trainplan.job import Workload
from trainplan.layout import Layout, layout_from_dict, parse_layout
from trainplan.plan import workload_from_dict
from trainplan.precision import names as recipe_names
from trainplan.spelling import UNSET, spellings
from trainplan.stacks import stacks

LAYOUT = {name: s for name, s in spellings(Layout).items() if name != "execution"}  # --set's, stacks.py


def sample(s):
    """A value of field `s` that is not its default: what its flag sets, another choice, a number up."""
    d = s.field_default
    if s.kind == "switch":
        return s.const
    if isinstance(d, bool) or (d is None and s.kind == "text"):
        return not d
    if s.choices:
        return next(c for c in s.choices if c != d)
    if s.name == "precision":
        return next(n for n in recipe_names() if n != d)
    if s.name == "stack":
        return next(n for n in stacks() if n != d)
    return 2 if d in (None, 0, 1) else d + 1


def _text(v) -> str:
    if isinstance(v, bool) or v is None:
        return {True: "true", False: "false", None: "null"}[v]
    return str(v)


@pytest.mark.parametrize("name", sorted(LAYOUT))
def test_each_layout_field_round_trips_through_its_text_and_json_keys(name):
    s = LAYOUT[name]
    v = sample(s)
    layout = Layout(**{name: v})
    assert getattr(layout, name) == v != s.field_default
    # JSON: the key is the field's name, and the reader gives the same layout back
    assert layout.to_dict()[s.json] == v
    assert layout_from_dict(layout.to_dict()) == layout
    # text: Layout.short() reads back to the same layout, and the field's own key sets it alone
    assert parse_layout(layout.short()) == layout
    assert getattr(parse_layout(f"{Layout().precision} {s.key}={_text(v)}"), name) == v


def test_the_short_keys_are_the_declared_ones():
    """The abbreviated keys (mb, ga) are declared on their fields and printed by short()."""
    short = {name: s.key for name, s in LAYOUT.items() if s.key != name}
    assert short, "no field declares a text key of its own"
    text = Layout(micro_batch=3, grad_accum=5).short().split()
    for name, key in short.items():
        assert f"{key}={getattr(Layout(micro_batch=3, grad_accum=5), name)}" in text


@pytest.mark.parametrize("name", [n for n, s in spellings(Workload).items() if s.option])
def test_each_workload_field_with_a_flag_is_read_back_from_json_by_its_name(name):
    s = spellings(Workload)[name]
    d = {"seq_len": 4096, "global_batch": 8}
    value = sample(s) if s.field_default is not UNSET else d[name] * 2
    w = workload_from_dict({**d, s.json: value}, "workload")
    assert getattr(w, name) == value
