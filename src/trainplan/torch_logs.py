"""Four log lines that torch, torchao and transformers print on every import, and that say nothing
about a trainplan run; dropped at their source loggers, one message each, before torch is imported.

Importing torchao (transformers does, when it is installed) logs, through the standard `logging`
module, not `warnings`:

- `torchao`: "Failed to load .../torchao/_C_mxfp8...so: ..." and the same for `_C_cutlass_90a`: the
  optional compiled kernels of a wheel built for another Python or GPU (torchao/__init__.py loads
  every `_C*.so` it ships and logs each failure). trainplan's trainer uses torchao's float8
  training, which needs none of them;
- `torch.utils._pytree`: "<enum 'KernelPreference'> is an Enum subclass ... Calling
  register_constant() on Enum subclasses is deprecated", and the same for `ScaleCalculationMode`:
  torchao's `register_as_pytree_constant` on its own enums (torch 2.13 deprecates that; torchao
  has to stop calling it).

Only records whose message starts with those texts, on those two loggers, are dropped: any other
failure of torchao to load, or any other pytree deprecation, still prints. Torch-free.
"""

from __future__ import annotations

import logging

# logger name -> (message prefix, a text the formatted message must hold too)
_NOISE = {
    "torchao": ("Failed to load ", "/torchao/_C"),
    "torch.utils._pytree": ("%s is an Enum subclass and is now natively supported",
                            "register_constant() on Enum subclasses is deprecated"),
}


class _DropKnownNoise(logging.Filter):
    def __init__(self, prefix: str, also: str):
        super().__init__()
        self.prefix, self.also = prefix, also

    def filter(self, record: logging.LogRecord) -> bool:
        msg = str(record.msg)
        return not (msg.startswith(self.prefix) and self.also in record.getMessage())


def quiet_torch_imports() -> None:
    """Install the filters (once; a second call adds nothing). Call it before torch is imported."""
    for name, (prefix, also) in _NOISE.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropKnownNoise) for f in logger.filters):
            logger.addFilter(_DropKnownNoise(prefix, also))
