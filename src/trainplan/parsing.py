"""Parsing at the edges: dicts from files or flags become frozen typed objects, or a one-line error."""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import tomllib
import types
import typing
from pathlib import Path
from typing import Any

from trainplan.errors import TrainplanError


def check_keys(data: dict, allowed: set[str], where: str, required: set[str] = frozenset()) -> None:
    """Reject unknown keys (naming the key and the allowed ones) and missing required keys."""
    if not isinstance(data, dict):
        raise TrainplanError(f"{where}: expected an object, got {type(data).__name__}")
    extra = sorted(set(data) - allowed)
    if extra:
        raise TrainplanError(
            f"{where}: unknown key {extra[0]!r}; allowed keys: {', '.join(sorted(allowed))}"
        )
    missing = sorted(required - set(data))
    if missing:
        raise TrainplanError(f"{where}: missing required key {missing[0]!r}")


def check_types(cls: type, data: dict, where: str) -> None:
    """Each value in `data` has the JSON spelling of the type its field of dataclass `cls` declares:
    true/false for bool, an integer (not true) for int, a finite number for float, a string for
    str, a list for a tuple, an object for a nested dataclass or dict; `X | None` admits null.
    Keys are checked by check_keys; ranges by the owner of the type."""
    hints = _hints(cls)
    for key, value in data.items():
        if key in hints and (expected := _mismatch(hints[key], value)) is not None:
            text = repr(value)
            text = text if len(text) <= 60 else text[:57] + "..."
            raise TrainplanError(f"{where}: {key} must be {expected}, got {text}")


@functools.cache
def _hints(cls: type) -> dict:
    """The field types of dataclass `cls`, each resolved in its module; a name imported only for
    type checking leaves that field unchecked here (its owner checks it)."""
    import dataclasses
    import sys

    ns = vars(sys.modules[cls.__module__])
    out = {}
    for f in dataclasses.fields(cls):
        try:
            out[f.name] = eval(f.type, ns) if isinstance(f.type, str) else f.type  # as typing.get_type_hints does
        except NameError:
            pass
    return out


def _mismatch(hint, v) -> str | None:
    """None if `v` is a JSON value of type `hint`, else the expected kind in words."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if v is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            bad = _mismatch(inner[0], v)
            return None if bad is None else f"{bad} or null"
        return None
    if hint is bool:
        return None if isinstance(v, bool) else "true or false"
    if hint is int:
        return None if isinstance(v, int) and not isinstance(v, bool) else "an integer"
    if hint is float:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        return None if ok else "a finite number"
    if hint is str:
        return None if isinstance(v, str) else "a string"
    if origin is tuple:
        if not isinstance(v, (list, tuple)):
            return "a list"
        if len(args) == 2 and args[1] is Ellipsis:
            each = [args[0]] * len(v)
        elif len(v) != len(args):
            return f"a list of {len(args)}"
        else:
            each = list(args)
        for h, x in zip(each, v):
            if (bad := _mismatch(h, x)) is not None:
                return f"a list of {bad.removeprefix('a ').removeprefix('an ')}s"
        return None
    if origin is dict or hint is dict or isinstance(hint, type) and hasattr(hint, "__dataclass_fields__"):
        return None if isinstance(v, dict) else "an object"
    return None


# Deeper than any file trainplan reads (plan.json nests 4 levels); a bound keeps every walk over
# the parsed data far from Python's recursion limit.
MAX_JSON_DEPTH = 32


def read_json(path: str | Path, what: str, constants: bool = False) -> Any:
    """`constants`: accept NaN and Infinity as Python's json (and so transformers) reads them."""
    p = Path(path)
    if not p.is_file():
        raise TrainplanError(f"{what} {str(p)!r} does not exist or is not a file")
    try:
        text = p.read_text()
    except UnicodeDecodeError:
        raise TrainplanError(f"{what} {str(p)!r} is not UTF-8 text") from None
    except OSError as e:
        raise TrainplanError(f"{what} {str(p)!r} cannot be read: {e.strerror}") from None
    return parse_json(text, f"{what} {str(p)!r}", constants)


def parse_json(text: str, what: str, constants: bool = False) -> Any:
    """JSON as the standard defines it: NaN and Infinity (which Python's json accepts) are refused,
    and so is nesting deeper than MAX_JSON_DEPTH. `constants`: NaN, Infinity and -Infinity are read
    as Python's json reads them (a config.json as transformers writes it: the Mamba-2
    time_step_limit [0.0, Infinity]); the reader of each number used decides if it must be finite."""
    try:
        data = json.loads(text, parse_constant=None if constants else _no_constant,
                          parse_float=float if constants else _finite_float)
    except json.JSONDecodeError as e:
        raise TrainplanError(f"{what} is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except RecursionError:
        raise TrainplanError(f"{what} nests deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as e:  # _no_constant
        raise TrainplanError(f"{what} is not valid JSON: {e}") from None
    if _depth(data) > MAX_JSON_DEPTH:
        raise TrainplanError(f"{what} nests deeper than {MAX_JSON_DEPTH} levels")
    return data


def nonfinite_at(o: Any, path: str) -> str | None:
    """The path of the first NaN or infinite number in `o` (nested dicts and lists), or None."""
    if isinstance(o, float) and not math.isfinite(o):
        return path
    items = o.items() if isinstance(o, dict) else enumerate(o) if isinstance(o, list) else ()
    for k, v in items:
        if (found := nonfinite_at(v, f"{path}.{k}" if isinstance(k, str) else f"{path}[{k}]")) is not None:
            return found
    return None


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number; write a finite number")


def _finite_float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):  # 1e400 is valid JSON but no double holds it
        raise ValueError(f"{text} is too large for a number")
    return v


def _depth(data: Any) -> int:
    """Nesting depth, without recursion (the data may be as deep as json's own limit)."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        node, d = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is not None:
            deepest = max(deepest, d)
            if d <= MAX_JSON_DEPTH:
                stack.extend((c, d + 1) for c in children)
    return deepest


def read_toml(path: Path) -> dict:
    with open(path, "rb") as f:
        return tomllib.load(f)


def comma_list(text: str) -> tuple[str, ...]:
    """argparse type: NAME[,NAME...] (--instances, --instance): the names, stripped; an empty list
    or an empty name between commas is refused rather than read as 'none' or 'the default'."""
    items = tuple(s.strip() for s in text.split(","))
    if not any(items):
        raise argparse.ArgumentTypeError(f"expected one or more comma-separated names, got {text!r}")
    if not all(items):
        raise argparse.ArgumentTypeError(f"empty name in the comma list {text!r}")
    return items


# ---- paths a command will write: checked when the flags are read ---------------------------
def output_file(text: str) -> str:
    """argparse type: a file the command can write later (--out, --html, --fit).

    Checked when the flags are read, before any work: a path that is a directory, lies under a
    file, or under a directory this user cannot write is refused now, not after a long search."""
    p = Path(text).expanduser()
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a file path, got ''")
    if p.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a directory; give a file name")
    _writable_parent(p.parent, text)
    return text


def output_file_in_dir(text: str) -> str:
    """argparse type: output_file whose directory exists already (--html): a report is written
    into a directory, never creates one (a mistyped path would otherwise make directories at /)."""
    output_file(text)
    parent = Path(text).expanduser().parent
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r}: directory {str(parent)!r} does not exist; create it first")
    return text


def output_dir(text: str) -> str:
    """argparse type: a directory the command creates or writes into (a run directory)."""
    p = Path(text).expanduser()
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a directory path, got ''")
    if p.exists() and not p.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} exists and is not a directory")
    _writable_parent(p, text)
    return text


def _writable_parent(d: Path, text: str) -> None:
    """The nearest existing ancestor of `d` must be a directory this user can write into."""
    d = d if str(d) else Path(".")
    while not d.exists():
        if d.is_symlink():  # a dangling link: writing through it would fail
            raise argparse.ArgumentTypeError(f"{text!r}: {str(d)!r} is a broken symbolic link")
        d = d.parent
    if not d.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} lies under {str(d)!r}, which is a file, not a directory")
    if not os.access(d, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"{text!r}: cannot write under {str(d)!r} (permission denied)")


def check_output(path: str | os.PathLike, flag: str, *, directory: bool = False) -> None:
    """output_file / output_dir for a path that did not come through argparse: a one-line error."""
    try:
        (output_dir if directory else output_file)(str(path))
    except argparse.ArgumentTypeError as e:
        raise TrainplanError(f"{flag}: {e}") from None
