"""The test tree has no __init__.py files, so pytest imports each test module by its basename:
two files with one name in different folders break collection of the whole suite (while each
folder alone passes), and `from conftest import X` resolves to whichever conftest loaded first."""

import ast
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_test_module_basenames_are_unique():
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert not [n for n, k in names.items() if k > 1], "rename: the same test module name in two folders"


def test_no_test_imports_from_conftest():
    bad = []
    for p in TESTS.rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "conftest":
                bad.append(str(p.relative_to(TESTS)))
            if isinstance(node, ast.Import) and any(a.name == "conftest" for a in node.names):
                bad.append(str(p.relative_to(TESTS)))
    assert not bad, f"import from conftest resolves to whichever conftest.py loaded first: {bad}"
