"""Typed reads from a Hugging Face config.json, with errors that name the field and the file.

A config.json is an edge: whatever it holds is checked here, once, and the adapters (adapters.py)
turn the checked values into a ModelSpec. Missing optional fields take the default that
transformers uses for the same `model_type`; missing required fields (the sizes) are an error,
because a default size would silently describe a different model.
"""

from __future__ import annotations

from typing import Any

from trainplan.errors import TrainplanError

_MISSING = object()
Keys = str | tuple[str, ...]  # one field name, or several spellings tried in order

# hidden_act of a gated MLP (act(x W_gate) * x W_up) -> ModelSpec.mlp
GATED_ACT = {
    "silu": "swiglu", "swish": "swiglu",
    "gelu": "geglu", "gelu_new": "geglu", "gelu_fast": "geglu", "gelu_pytorch_tanh": "geglu",
}
# GPT-2 activation_function of its plain two-matrix MLP -> ModelSpec.mlp
PLAIN_ACT = {
    "gelu": "gelu", "gelu_new": "gelu", "gelu_fast": "gelu", "gelu_pytorch_tanh": "gelu",
    "quick_gelu": "gelu",
}


class ConfigReader:
    """Read fields of one config.json dict; every error names `where` (the file) and the field."""

    def __init__(self, data: dict, where: str, model_type: str):
        self.data = data
        self.where = where
        self.model_type = model_type

    def has(self, key: str) -> bool:
        return key in self.data

    # ---- primitive reads ---------------------------------------------------------------------
    def _get(self, keys: str | tuple[str, ...], default: Any) -> tuple[str, Any]:
        names = (keys,) if isinstance(keys, str) else keys
        for k in names:
            if k in self.data:
                return k, self.data[k]
        if default is _MISSING:
            alt = f" (or {', '.join(repr(k) for k in names[1:])})" if len(names) > 1 else ""
            raise TrainplanError(
                f"{self.where}: missing required field {names[0]!r}{alt} for model_type "
                f"{self.model_type!r}; add it to the config.json"
            )
        return names[0], default

    def _bad(self, key: str, expected: str, value: Any) -> TrainplanError:
        return TrainplanError(
            f"{self.where}: field {key!r} must be {expected}, got {value!r}; fix the config.json"
        )

    def integer(self, keys: Keys, default: Any = _MISSING, *, minimum: int = 1) -> int:
        """An integer >= minimum (JSON booleans are refused: true is not a layer count)."""
        key, v = self._get(keys, default)
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise self._bad(key, what, v)
        return v

    def optional_int(self, keys: str | tuple[str, ...], default: int | None) -> int | None:
        """An integer >= 1, or null (a field such as sliding_window or q_lora_rank)."""
        key, v = self._get(keys, default)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise self._bad(key, "a positive integer or null", v)
        return v

    def number(self, key: str, default: Any = _MISSING) -> float:
        """A finite number >= 0 (a coefficient such as router_aux_loss_coef)."""
        key, v = self._get(key, default)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < float("inf"):
            raise self._bad(key, "a number >= 0", v)
        return float(v)

    def flag(self, key: str, default: Any = _MISSING) -> bool:
        key, v = self._get(key, default)
        if not isinstance(v, bool):
            raise self._bad(key, "true or false", v)
        return v

    def text(self, keys: str | tuple[str, ...], default: Any = _MISSING) -> str:
        key, v = self._get(keys, default)
        if not isinstance(v, str) or not v:
            raise self._bad(key, "a non-empty string", v)
        return v

    def int_list(self, key: str, default: list[int]) -> tuple[int, ...]:
        key, v = self._get(key, default)
        if not isinstance(v, list) or any(isinstance(x, bool) or not isinstance(x, int) for x in v):
            raise self._bad(key, "a list of integers", v)
        return tuple(v)

    def layer_types(self, num_layers: int) -> tuple[str, ...] | None:
        """`layer_types` if present: per layer 'full_attention' or 'sliding_attention'."""
        if self.data.get("layer_types") is None:
            return None
        v = self.data["layer_types"]
        allowed = {"full_attention", "sliding_attention"}
        ok = isinstance(v, list) and len(v) == num_layers and all(isinstance(x, str) and x in allowed for x in v)
        if not ok:
            raise self._bad(
                "layer_types",
                f"a list of {num_layers} entries, each 'full_attention' or 'sliding_attention'",
                v,
            )
        return tuple(v)

    def choice(self, keys: Keys, table: dict[str, str], default: Any = _MISSING) -> str:
        """A string that must be a key of `table`; returns the mapped value."""
        key, v = self._get(keys, default)
        if not isinstance(v, str) or v not in table:
            raise TrainplanError(
                f"{self.where}: {key} {v!r} is not supported for model_type {self.model_type!r}; "
                f"supported: {', '.join(sorted(table))}"
            )
        return table[v]

    def head_dim(self, base: dict, default: int | None) -> int:
        """head_dim from the config; default None = hidden_size // num_attention_heads (HF rule), which
        then must divide exactly: 33 heads on hidden 4096 would give heads of 124 that cover 4092 of
        the 4096 features, a typo rather than a model (transformers' own configs without a head_dim,
        BERT's and GPT-2's, refuse it the same way). `base` holds the hidden_size and num_heads read."""
        # Mistral and Mixtral treat head_dim: null like an absent head_dim.
        if self.data.get("head_dim") is not None:
            return self.integer("head_dim")
        if default is not None:
            return default
        hidden, heads = base["hidden_size"], base["num_heads"]
        if hidden % heads:
            raise TrainplanError(f"{self.where}: hidden_size {hidden} is not a multiple of num_attention_heads "
                                 f"{heads}, and no head_dim is given; fix the config.json (or give head_dim)")
        return hidden // heads
