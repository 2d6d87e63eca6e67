"""Model architectures: the built-in catalog, HF config.json adapters, exact parameter counts.

    resolve("llama-3.1-8b") or resolve("path/to/config.json") -> ModelSpec
    count_params(spec) -> ParamCounts (total, active, embedding, per layer)

Pure Python: nothing here imports torch or transformers.
"""

from trainplan.models.adapters import ADAPTERS, spec_from_config
from trainplan.models.library import catalog, hf_config, names, resolve
from trainplan.models.params import LayerParams, ParamCounts, count_params
from trainplan.models.spec import MLASpec, ModelSpec, MoESpec

__all__ = [
    "ADAPTERS",
    "LayerParams",
    "MLASpec",
    "MoESpec",
    "ModelSpec",
    "ParamCounts",
    "catalog",
    "count_params",
    "hf_config",
    "names",
    "resolve",
    "spec_from_config",
]
