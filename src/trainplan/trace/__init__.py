"""Exact memory and FLOPs of one training step, by running the real model code on fake tensors.

The only part of trainplan besides `runtime/` that imports torch and transformers; both are
imported lazily (inside functions), so `import trainplan.trace` costs nothing without the extra.

    from trainplan.trace import trace_config, TraceSettings
    result = trace_config(hf_config_dict, TraceSettings(seq_len=8192, ac="full"))

`verify(job, layout)` traces a plan's model and layout and compares with the analytic model; the
search's `plan --verify` calls it.
"""

from trainplan.torch_logs import quiet_torch_imports
from trainplan.trace.settings import AC_POLICIES, PRECISIONS, TraceSettings

quiet_torch_imports()  # before this package imports torch: the import noise of torchao (torch_logs.py)

__all__ = ["AC_POLICIES", "PRECISIONS", "TraceSettings", "trace_config", "verify"]


def trace_config(config: dict, settings: TraceSettings, progress=None):
    """Trace a Hugging Face config dict; returns a trace.result.TraceResult (see run.py)."""
    from trainplan.trace.run import trace_config as _trace

    return _trace(config, settings, progress=progress)


def verify(job, layout) -> dict:
    """Trace `job.model` under `layout` and report traced vs analytic (see verify.py)."""
    from trainplan.trace.verify import verify as _verify

    return _verify(job, layout)
