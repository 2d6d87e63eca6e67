"""A configuration written as Python calls with literal arguments, rendered and read back.

Frameworks that configure a run in Python (torchtitan 0.3.0: a function returning
`Trainer.Config(...)`, looked up with `--module M --config F`) are exported as a tree of `Call`s
and read back from source text with `ast`, never by running it: reading a team's file must not
execute it. The reader understands the declarative shape those files have (torchtitan's own
config_registry functions are written so): one function whose body assigns names to calls and
returns a call; any other statement is a one-line error naming its line.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from trainplan.errors import TrainplanError


@dataclass(frozen=True)
class Call:
    """`func(*args, **kwargs)`: func is a dotted name ('Trainer.Config'); values are literals,
    lists, Calls or Refs."""

    func: str
    kwargs: dict = field(default_factory=dict)
    args: tuple = ()
    line: int = 0  # where the reader found it (0: built here)


@dataclass(frozen=True)
class Ref:
    """A name the source uses as a value (a local variable not assigned a call, a constant)."""

    name: str


def render(imports: dict[str, str], function: str, returns: str, body: Call, doc: str) -> str:
    """Python source of a module that imports `imports` (name -> module) and defines
    `def function() -> returns: return body`."""
    by_module: dict[str, list[str]] = {}
    for name, module in sorted(imports.items()):
        by_module.setdefault(module, []).append(name)
    lines = ['"""' + doc.strip() + '\n"""', ""]
    lines += [f"from {m} import {', '.join(sorted(names))}" for m, names in sorted(by_module.items())]
    lines += ["", "", f"def {function}() -> {returns}:", f"    return {_value(body, 1)}", ""]
    return "\n".join(lines)


def _value(v, depth: int) -> str:
    pad, inner = "    " * depth, "    " * (depth + 1)
    if isinstance(v, Call):
        parts = [repr(a) if not isinstance(a, (Call, Ref, list)) else _value(a, depth + 1) for a in v.args]
        parts += [f"{k}={_value(x, depth + 1)}" for k, x in v.kwargs.items()]
        if not parts:
            return f"{v.func}()"
        return f"{v.func}(\n" + "".join(f"{inner}{p},\n" for p in parts) + f"{pad})"
    if isinstance(v, Ref):
        return v.name
    if isinstance(v, list):
        return "[" + ", ".join(_value(x, depth) for x in v) + "]"
    if isinstance(v, tuple):
        return "(" + ", ".join(_value(x, depth) for x in v) + ("," if len(v) == 1 else "") + ")"
    return repr(v)


def read(text: str, where: str) -> tuple[dict[str, str], Call]:
    """(imported name -> module, the returned Call) of a module as `render` writes it, or of a
    hand-written one of the same shape; anything else is a one-line error with its line."""
    try:
        tree = ast.parse(text, filename=where)
    except SyntaxError as e:
        raise TrainplanError(f"{where}:{e.lineno}: not Python ({e.msg})") from None
    imports: dict[str, str] = {}
    functions = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module:
            imports.update({a.asname or a.name: node.module for a in node.names})
        elif isinstance(node, ast.FunctionDef):
            functions.append(node)
        elif not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):  # a docstring
            raise TrainplanError(f"{where}:{node.lineno}: cannot read this statement; expected imports and "
                                 "one config function")
    if len(functions) != 1:
        names = ", ".join(f.name for f in functions) or "none"
        raise TrainplanError(f"{where}: expected one config function, found {len(functions)} ({names})")
    local: dict[str, Call] = {}
    for node in functions[0].body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            local[node.targets[0].id] = _node(node.value, local, where)
        elif isinstance(node, ast.Return) and node.value is not None:
            out = _node(node.value, local, where)
            if not isinstance(out, Call):
                raise TrainplanError(f"{where}:{node.lineno}: the config function must return a config call")
            return imports, out
        elif not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            raise TrainplanError(f"{where}:{node.lineno}: cannot read this statement; trainplan reads "
                                 "`name = Call(...)` assignments and `return Call(...)`, not mutations")
    raise TrainplanError(f"{where}: {functions[0].name} returns no config")


def _node(n: ast.AST, local: dict, where: str):
    if isinstance(n, ast.Call):
        kwargs = {}
        for kw in n.keywords:
            if kw.arg is None:
                raise TrainplanError(f"{where}:{n.lineno}: cannot read **{ast.unparse(kw.value)}")
            kwargs[kw.arg] = _node(kw.value, local, where)
        return Call(_dotted(n.func, where), kwargs, tuple(_node(a, local, where) for a in n.args), n.lineno)
    if isinstance(n, ast.Name):
        return local.get(n.id, Ref(n.id))
    if isinstance(n, (ast.List, ast.Tuple)):
        return [_node(x, local, where) for x in n.elts]
    try:
        return ast.literal_eval(n)
    except ValueError:
        raise TrainplanError(f"{where}:{n.lineno}: cannot read {ast.unparse(n)!r}; expected a literal, "
                             "a name or a call") from None


def _dotted(n: ast.AST, where: str) -> str:
    if isinstance(n, ast.Name):
        return n.id
    if isinstance(n, ast.Attribute):
        return f"{_dotted(n.value, where)}.{n.attr}"
    raise TrainplanError(f"{where}:{n.lineno}: cannot read the call of {ast.unparse(n)!r}")
