"""Flags built from the field declarations (spelling.py): the flag, its type, choices, help and its
one default are read from the Layout or Workload field they fill, so a command never writes a job or
layout flag by hand. A command that takes a field in another form names the variant the field
declares (plan's --seq-len: 'max'). Each action built here carries `.field` ('Layout.tp'), which the
tests read to check that no command declares such a flag a second time."""

from __future__ import annotations

from trainplan.spelling import UNSET, Spelling, spellings


def _types() -> dict:
    from trainplan.commands._common import positive_int, tokens
    from trainplan.parsing import comma_list

    return {"positive": positive_int, "int": int, "tokens": tokens, "text": None, "names": comma_list}


def dest(s: Spelling) -> str:
    """Where argparse keeps the flag's value: its name, `--no-flash-attention` -> no_flash_attention."""
    return s.option.lstrip("-").replace("-", "_")


def add_fields(p, cls: type, names, variants: dict[str, str] | None = None) -> None:
    """Add to parser `p` the flags of the fields `names` of dataclass `cls`, each in the form of the
    variant `variants` names for it (plan: {'seq_len': 'max'}), in the order given."""
    types = _types()
    for name in names:
        s = spellings(cls)[name]
        assert s.option, f"{cls.__name__}.{name} declares no flag"
        v = s.variant((variants or {}).get(name))
        text = s.help if v.help is None else v.help
        kind = v.kind or s.kind
        kw: dict = {"help": text() if callable(text) else text}
        default = s.default if v.default is UNSET else v.default
        if kind == "switch":
            kw["action"] = "store_true"
        elif v.required:
            kw["required"] = True
        else:
            kw["default"] = None if default is UNSET else default
            if kw["default"] is not None and "default" not in kw["help"]:
                kw["help"] += f" (default {kw['default']})"  # the one default, said where it is declared
        if kind not in ("switch", "text"):
            kw["type"] = types[kind]
        if s.choices and kind == s.kind:
            kw["choices"] = s.choices
        action = p.add_argument(s.option, dest=dest(s), **kw)
        action.field = f"{cls.__name__}.{name}"


def flagged(cls: type) -> tuple[str, ...]:
    """The fields of `cls` that have a flag, in declaration order."""
    return tuple(name for name, s in spellings(cls).items() if s.option)


def field_values(args, cls: type, names) -> dict:
    """{field: value} of the fields `names` from the parsed flags: a switch given sets its field to the
    value it declares (--no-flash-attention: flash_attention False), left out the field's default."""
    out = {}
    for name in names:
        s = spellings(cls)[name]
        v = getattr(args, dest(s))
        out[name] = (s.const if v else s.field_default) if s.kind == "switch" else v
    return out
