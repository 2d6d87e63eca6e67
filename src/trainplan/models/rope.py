"""The shape of a config.json's RoPE scaling: a known type with the keys that type needs.

The planner does not cost RoPE scaling (it changes no size), but the trainer's --hf build hands the
config to transformers, and a plan made from a config.json carries it: `rope_scaling: "yes"` or a
llama3 scaling without its frequency factors is refused where the file is read, in one line, not
when transformers builds the model inside the ranks. The types and their keys: rope_types.toml.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

from trainplan.errors import TrainplanError

_TABLE = Path(__file__).with_name("rope_types.toml")
# transformers 5 nests rope_parameters by layer type when the layers differ (Gemma 3)
_LAYER_TYPES = ("full_attention", "sliding_attention")


@functools.cache
def rope_types() -> dict[str, dict]:
    from trainplan.parsing import read_toml

    return read_toml(_TABLE)


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def check_rope(config: dict, where: str) -> None:
    """Raise a one-line TrainplanError unless the RoPE fields of `config` (a config.json dict of
    a RoPE model) have a shape transformers builds: rope_theta a positive number, and
    rope_scaling / rope_parameters null or an object of a known type with its keys."""
    theta = config.get("rope_theta")
    if theta is not None and not (_number(theta) and theta > 0):
        raise TrainplanError(f"{where}: field 'rope_theta' must be a positive number, got {theta!r}; "
                             "fix the config.json")
    for key in ("rope_scaling", "rope_parameters"):
        value = config.get(key)
        if value is None:
            continue
        if isinstance(value, dict) and value and set(value) <= set(_LAYER_TYPES):
            for layer, part in value.items():
                if part is not None:
                    _check_one(part, f"{key}.{layer}", where)
        else:
            _check_one(value, key, where)


def _check_one(d, key: str, where: str) -> None:
    types = rope_types()
    if not isinstance(d, dict):
        raise TrainplanError(f"{where}: field {key!r} must be an object with a rope_type ({', '.join(types)}) "
                             f"or null, got {d!r}; fix the config.json")
    kind = d.get("rope_type", d.get("type", "default"))
    if not isinstance(kind, str) or kind not in types:
        raise TrainplanError(f"{where}: {key} type {kind!r} is not a RoPE scaling transformers knows here; "
                             f"known: {', '.join(types)}")
    rule = types[kind]
    missing = [k for k in rule["required"] if k not in d]
    if missing:
        raise TrainplanError(f"{where}: {key} of type {kind!r} needs {', '.join(repr(k) for k in missing)}; "
                             "fix the config.json")
    for k in rule["numbers"]:
        if k in d and d[k] is not None and not _number(d[k]):
            raise TrainplanError(f"{where}: {key}.{k} must be a number, got {d[k]!r}; fix the config.json")
    for k in rule.get("lists", []):
        if not (isinstance(d[k], list) and d[k] and all(_number(x) for x in d[k])):
            raise TrainplanError(f"{where}: {key}.{k} must be a list of numbers, got {d[k]!r}; fix the config.json")
    factor = d.get("factor")
    if factor is not None and factor < 1:
        raise TrainplanError(f"{where}: {key}.factor must be >= 1 (it scales the context up), got {factor!r}")
