"""The runtime's converters are declared once, torch-free (converter_names.py): recipes.toml names
them, the planner reads their declared facts, and no other module names a converter, so a new
converter is one module plus one entry, and a new recipe one row."""

from __future__ import annotations

import ast

import pytest
from source_scan import SRC, offences_outside

from trainplan import converter_names, precision
from trainplan.converter_names import CONVERTERS, Declared
from trainplan.errors import TrainplanError
from trainplan.layout import Layout
from trainplan.parsing import read_toml
from trainplan.supports import refusal


def _literal_names(tree: ast.AST, words: set[str]) -> list[tuple[int, str]]:
    return [(n.lineno, f"names converter {n.value!r}") for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in words]


def test_no_module_outside_converter_names_names_a_converter():
    found = offences_outside("converter_names.py", _literal_names, set(CONVERTERS))
    assert not found, "look the converter up through the recipe (runtime/converters.py) instead:\n" + "\n".join(found)


def test_every_declared_implementation_is_a_runtime_module():
    # checked without importing it: the planner never imports torch
    for name, d in CONVERTERS.items():
        module, _, attr = d.implementation.partition(":")
        assert module.startswith("trainplan.runtime.") and attr, name
        path = SRC.joinpath(*module.split(".")[1:]).with_suffix(".py")
        assert f"class {attr}" in path.read_text(), (name, path)
        assert d.recipes and set(d.tensor_parallel) <= set(d.recipes) and d.source, name


def test_every_converter_recipes_toml_names_is_declared():
    named = {r.low_precision.converter for r in precision.registry().values()
             if r.low_precision is not None and r.low_precision.converter is not None}
    assert named and named <= set(CONVERTERS)


@pytest.fixture
def new_converter(monkeypatch):
    """A converter declared by one entry (no tensor-parallel styles) and a recipe row that names it."""
    monkeypatch.setitem(CONVERTERS, "test_fp6", Declared(
        implementation="trainplan.runtime.test_fp6:Fp6Converter", recipes=("blockwise",), tensor_parallel=(),
        sequence_parallel_on_cpu=True, tensors="fp6", source="a test"))
    row = read_toml(precision._FILE)["fp8_tensorwise"]
    row = {**row, "aliases": [], "low_precision": {**row["low_precision"], "converter": "test_fp6",
                                                  "converter_recipe": "blockwise"}}
    table = {**precision.registry(), **precision.parse({"fp6_test": row})}
    monkeypatch.setattr(precision, "registry", lambda: table)
    return table["fp6_test"]


def test_a_new_converter_is_one_entry_the_support_checks_read(new_converter):
    assert new_converter.runnable
    assert refusal(Layout(precision="fp6_test"), "cuda") is None
    tp = refusal(Layout(tp=2, precision="fp6_test"), "cuda")
    assert tp is not None and "converter 'test_fp6'" in tp.reason and "tp=1" in tp.reason
    assert converter_names.declared("test_fp6").tensors == "fp6"


def test_an_unknown_converter_name_lists_the_declared_ones():
    with pytest.raises(TrainplanError) as e:
        converter_names.declared("torchao_mx")
    assert "\n" not in str(e.value) and all(n in str(e.value) for n in CONVERTERS)
