"""A tiny template filler: `{{name}}` placeholders, every one required, nothing else interpreted.

Not string.Template or str.format: shell scripts are full of `$` and braces that must stay as
they are. The caller quotes values (shlex.quote) before they reach the template.
"""

from __future__ import annotations

import re
from importlib import resources

_SLOT = re.compile(r"\{\{([a-z_]+)\}\}")


def load(name: str) -> str:
    return resources.files("trainplan.launch").joinpath("templates", name).read_text()


def fill(template: str, values: dict[str, str]) -> str:
    used = set(_SLOT.findall(template))
    missing, extra = used - set(values), set(values) - used
    assert not missing and not extra, f"template slots: missing {missing}, unused {extra}"
    return _SLOT.sub(lambda m: values[m.group(1)], template)
