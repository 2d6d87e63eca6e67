"""No module outside stacks.py names a software stack: what a stack does (its settings, memory
conventions, the layout fields its recipes set for a validation record) is stacks.toml data read
through stacks.py, so a new stack or a changed fact is an edit of stacks.toml, never of a consumer.

Two patterns are caught in src/trainplan (tests and stacks.toml are free to name stacks):
  * a string literal that is a stack name or a `frameworks` alias, except 'trainplan' and
    'megatron', which are also other things: the package / program name (`python -m trainplan`,
    the CLI's prog, a k8s label) and a recompute family / activations convention (stacks.FAMILIES,
    CONVENTION_CHOICES), like the dtypes the recipe-name test lets through;
  * a comparison with, or an assignment or default to, a variable named *stack*, *framework* or
    `fw` of a string literal that is a stack name (these two included): `fw == "kempnerforge"`,
    `stack: str = "trainplan"`, `OTHER_STACK = "megatron"`.
Help text naming a stack in prose is not an exact literal and passes; stacks.py itself defines the
two constants the rest of the code names stacks by (DEFAULT_STACK, COMPLETE_STACK), and
supports.TRAINER_STACK is DEFAULT_STACK.
"""

from __future__ import annotations

import ast

from source_scan import offences_outside

from trainplan.stacks import CONVENTION_CHOICES, FAMILIES, stacks

# Words that name something besides a stack (module doc).
OTHER_MEANINGS = {"trainplan", *FAMILIES, *(v for c in CONVENTION_CHOICES.values() if c is not bool for v in c)}


def _stack_words() -> set[str]:
    return {n for s in stacks().values() for n in (s.name, *s.frameworks)}


def _names_stack(node: ast.AST) -> bool:
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    name = name.lower()
    return "stack" in name or "framework" in name or name == "fw"


def _literals(node: ast.AST | None, words: set[str]) -> list[str]:
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and n.value in words] if node else []


def offences(tree: ast.AST, words: set[str]) -> list[tuple[int, str]]:
    out = []
    plain = words - OTHER_MEANINGS
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in plain:
            out.append((node.lineno, f"names stack {node.value!r}"))
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_names_stack(s) for s in sides) and any(_literals(s, words) for s in sides):
                out.append((node.lineno, "compares a stack with a stack name"))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(_names_stack(t) for t in targets) and _literals(node.value, words):
                out.append((node.lineno, "sets a stack to a stack name"))
    return out


def test_the_checker_catches_each_pattern():
    words = _stack_words()
    code = ('a = ("nemo", "x")\nif fw == "kempnerforge": pass\nstack: str = "trainplan"\n'
            'OTHER_STACK = "megatron"\nif layout.stack in ("megatron", "y"): pass\n'
            'family = "megatron"\nprog = "trainplan"\nhelp = "the nemo recipes"\n')
    assert sorted({line for line, _ in offences(ast.parse(code), words)}) == [1, 2, 3, 4, 5]


def test_no_module_outside_stacks_py_names_a_stack():
    found = offences_outside("stacks.py", offences, _stack_words())
    assert not found, "read the stack's data (stacks.py, stacks.toml) instead:\n" + "\n".join(found)
