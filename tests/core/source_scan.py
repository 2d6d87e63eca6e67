"""The source walk of the name tests (test_recipe_names_*, test_stack_names_*): every module of
src/trainplan but the one that owns the names, parsed once per test, offences as 'path:line: what'."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import trainplan

SRC = Path(trainplan.__file__).parent


def offences_outside(home: str, offences: Callable[[ast.AST, set[str]], list[tuple[int, str]]],
                     words: set[str]) -> list[str]:
    """`offences(tree, words)` of every module of the package except `home` (a path under it)."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path == SRC / home:
            continue
        for line, what in offences(ast.parse(path.read_text(), str(path)), words):
            found.append(f"{path.relative_to(SRC)}:{line}: {what}")
    return found
