"""No module outside precision.py names a precision recipe: every consumer reads the registry's
fields (bytes, peak and ceiling keys, archs, converter), so a new recipe is one row of recipes.toml.

Two patterns are caught in src/trainplan (tests and recipes.toml are free to name recipes):
  * a string literal that is a recipe name or alias and not also a tensor-core dtype ('bf16',
    'fp16' and 'fp8' are dtypes too: GPUSpec.peak_flops keys, a recipe's compute_dtype);
  * a comparison or a startswith of a variable named *prec* against string literals
    (`precision == "fp16"`, `prec in ("bf16", ...)`, `precision.startswith("fp8")`).
"""

from __future__ import annotations

import ast

from source_scan import offences_outside

from trainplan.hardware.types import ARCH_DTYPES
from trainplan.precision import registry

DTYPES = set().union(*ARCH_DTYPES.values())


def _recipe_words() -> set[str]:
    words = {n for r in registry().values() for n in (r.name, *r.aliases)}
    return words - DTYPES


def _names_precision(node: ast.AST) -> bool:
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return "prec" in name.lower()


def _strings(node: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def offences(tree: ast.AST, words: set[str]) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in words:
            out.append((node.lineno, f"names recipe {node.value!r}"))
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_names_precision(s) for s in sides) and any(_strings(s) for s in sides if not _names_precision(s)):
                out.append((node.lineno, "compares a precision with a string literal"))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("startswith", "endswith") and _names_precision(node.func.value)):
            out.append((node.lineno, f"{node.func.attr} on a precision"))
    return out


def test_the_checker_catches_each_pattern():
    words = _recipe_words()
    code = ('a = {"mxfp8": 1}\nif precision == "fp16": pass\nif layout.precision in ("bf16", "x"): pass\n'
            'if prec.startswith("fp8"): pass\nb = {"bf16": 2}\n')
    assert sorted(line for line, _ in offences(ast.parse(code), words)) == [1, 2, 3, 4]


def test_no_module_outside_precision_py_names_a_recipe():
    found = offences_outside("precision.py", offences, _recipe_words())
    assert not found, "read the recipe registry (precision.py) instead:\n" + "\n".join(found)
