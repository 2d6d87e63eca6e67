"""Declare once: how a person spells an input field, kept in the field's own metadata.

A field of Layout or Workload that a person sets carries one `Spelling` (dataclasses.field metadata):
its command-line flag (`--micro-batch`), its key in the layout text `Layout.short()` prints (`mb`),
its JSON key (the field's name, `micro_batch`), its help, the kind of value the flag parses, its
choices, and the flag's default where that is not the field's own (the constant beside the field).
A command that takes the value in another form (plan's --seq-len also takes 'max') names a `Variant`
declared on the same field. commands/_fields.py builds the argparse arguments from these (argparse
stays out of the core); layout.py reads the text keys. One declaration, three spellings, as
Megatron-LM builds its argument groups from its config dataclasses (ArgumentGroupFactory).
"""

from __future__ import annotations

import functools
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any

# What a flag's text parses as (commands/_fields.py maps each to its argparse type): a positive
# integer, any integer, a token count (15T, 300B), text, a comma list of names, or a switch that
# sets the field to `const`.
KINDS = ("positive", "int", "tokens", "text", "names", "switch")
KEY = "spelling"  # the metadata key


class _Unset:
    """A default not given (dataclasses' own MISSING would mean 'required' in these dataclasses)."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET = _Unset()


@dataclass(frozen=True, slots=True)
class Variant:
    """How one command takes the field instead of the plain flag: only what differs is given."""

    help: Any = None  # str, or a function returning it (read when the parser is built)
    kind: str | None = None
    default: Any = UNSET
    required: bool = False


@dataclass(frozen=True, slots=True)
class Spelling:
    """The spellings of one field (module doc). `name` is filled in by `spellings()`."""

    help: Any = ""  # str, or a function returning it (a registry's names, read when the parser is built)
    kind: str = "text"
    flag: str | None = ""  # "": --NAME-WITH-DASHES; None: no flag (the text and JSON only)
    text: str = ""  # key in the layout text; "": the name
    choices: tuple | None = None
    flag_default: Any = UNSET  # the flag's default where it is not the field's (say why beside it)
    const: Any = True  # kind "switch": the value the flag sets
    variants: dict[str, Variant] = field(default_factory=dict)
    name: str = ""
    field_default: Any = UNSET

    @property
    def option(self) -> str | None:
        """The flag, `--micro-batch`, or None where the field has none."""
        if self.flag is None:
            return None
        return self.flag or "--" + self.name.replace("_", "-")

    @property
    def key(self) -> str:
        """The key in the layout text: `mb` for micro_batch, else the name."""
        return self.text or self.name

    @property
    def json(self) -> str:
        """The key in JSON (to_dict, plan.json): the field's name."""
        return self.name

    @property
    def default(self) -> Any:
        """The flag's default: its own where declared, else the field's."""
        return self.field_default if self.flag_default is UNSET else self.flag_default

    def variant(self, name: str | None) -> Variant:
        """Variant `name` of this field (None: the plain flag); an unknown one is a programmer's slip."""
        if name is None:
            return Variant()
        assert name in self.variants, f"{self.name} declares no variant {name!r}; it has {sorted(self.variants)}"
        return self.variants[name]


def spelled(default: Any = MISSING, **spelling) -> Any:
    """A dataclass field with default `default` and its Spelling (keywords of Spelling)."""
    assert spelling.get("kind", "text") in KINDS, spelling
    return field(default=default, metadata={KEY: Spelling(**spelling)})


@functools.cache
def spellings(cls: type) -> dict[str, Spelling]:
    """{field name: Spelling} of dataclass `cls`, each bound to its name and default; a field declared
    without one gets an empty Spelling with no flag (its text and JSON key are its name)."""
    out = {}
    for f in fields(cls):
        s = f.metadata.get(KEY) or Spelling(flag=None)
        default = f.default_factory() if f.default_factory is not MISSING else f.default
        default = UNSET if default is MISSING else default
        out[f.name] = replace(s, name=f.name, field_default=default)
    return out
