"""The built-in model catalog (catalog/*.json) and name-or-path resolution.

Each catalog file holds the config.json facts of one published model (the keys transformers
reads, exactly as the model's own config.json spells them) plus `_source`: where they came from.
The same adapters read a catalog entry and a user's config.json, so both go through one path.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path

from trainplan.errors import TrainplanError, unknown
from trainplan.models.adapters import spec_from_config
from trainplan.models.spec import ModelSpec
from trainplan.parsing import read_json

CATALOG_DIR = Path(__file__).parent / "catalog"


@functools.cache
def _catalog_configs() -> dict[str, dict]:
    out = {}
    for f in sorted(CATALOG_DIR.glob("*.json")):
        data = read_json(f, "catalog file")
        assert isinstance(data, dict) and "_source" in data, f"{f.name}: needs a _source"
        out[f.stem] = data
    return out


def names() -> list[str]:
    """Catalog names, sorted."""
    return sorted(_catalog_configs())


@functools.cache
def catalog() -> dict[str, ModelSpec]:
    """Every built-in model by name."""
    return {name: _from_catalog(name) for name in names()}


def _from_catalog(name: str) -> ModelSpec:
    raw = _catalog_configs()[name]
    return spec_from_config(raw, name=name, where=f"catalog/{name}.json", source=raw["_source"])


def _config_path(name_or_path: str) -> Path | None:
    """The config.json a path points to (the file, or config.json inside a directory)."""
    p = Path(name_or_path).expanduser()
    if p.is_dir():
        f = p / "config.json"
        if not f.is_file():
            raise TrainplanError(
                f"directory {str(p)!r} holds no config.json; "
                "give a catalog name or the path of a config.json"
            )
        return f
    if p.is_file():
        return p
    if p.suffix == ".json" or "/" in name_or_path or name_or_path.startswith("."):
        raise TrainplanError(
            f"model config {str(p)!r} does not exist; give a catalog name (trainplan models) "
            "or the path of a config.json"
        )
    return None


def _catalog_name(name_or_path: str) -> str | None:
    """The catalog name meant, if any: names are matched case-insensitively (Llama-3.1-8B)."""
    key = name_or_path.lower()
    return key if key in _catalog_configs() else None


def hf_config(name_or_path: str) -> dict:
    """The raw HF config.json dict of a catalog name or a path (without catalog-only `_` keys)."""
    if (name := _catalog_name(name_or_path)) is not None:
        # a deep copy: nested values (text_config, rope_scaling, lists) are the cache's otherwise, and a
        # caller that edits its config would change the catalog for every later caller in the process
        return copy.deepcopy({k: v for k, v in _catalog_configs()[name].items() if not k.startswith("_")})
    path = _config_path(name_or_path)
    if path is None:
        raise _unknown_model(name_or_path)
    # as transformers reads it: Infinity where it writes one (ConfigReader refuses it in a number used)
    data = read_json(path, "model config", constants=True)
    if not isinstance(data, dict):
        raise TrainplanError(
            f"model config {str(path)!r} must hold a JSON object, got {type(data).__name__}"
        )
    return data


def resolve(name_or_path: str) -> ModelSpec:
    """A catalog name (`llama-3.1-8b`), a config.json path, or a directory holding config.json."""
    if (name := _catalog_name(name_or_path)) is not None:
        return catalog()[name]
    path = _config_path(name_or_path)
    if path is None:
        raise _unknown_model(name_or_path)
    data = hf_config(str(path))
    name = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
    return spec_from_config(data, name=name, where=str(path), source=str(path.resolve()))


def _unknown_model(name: str) -> TrainplanError:
    return unknown("model", name, names(), hint="Or give the path of a HF config.json.")
