"""What one trace runs: shapes, precision recipe, checkpointing policy, traced depth, FSDP size.

Pure Python (no torch), so the CLI can validate flags before paying for the torch import.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from trainplan.errors import TrainplanError
from trainplan.precision import DEFAULT, registry
from trainplan.precision import canonical as canonical_precision

# Precision recipes the tracer can run: those the runtime has a converter for (the low-precision
# ones run through the trainer's own converter, runtime/converters.py); the others (block-scaled
# formats) need Blackwell kernels and have no CPU meta path.
PRECISIONS = tuple(r.name for r in registry().values() if r.runnable)
# Checkpointing policies, as in layout.AC_MODES (offload is full recompute + a host copy: on the
# GPU it keeps what "full" keeps minus the layer inputs, which a fake-tensor trace cannot place).
AC_POLICIES = ("none", "selective", "full", "partial")
# The fake process group's cost grows with its size (about 20 s at 1024 on a laptop core, 40 s at
# 2048), while rank 0's parameter shard past 1024 ranks is under 0.1% of the model: trace there.
MAX_FSDP = 1024


@dataclass(frozen=True, slots=True)
class TraceSettings:
    seq_len: int = 2048
    micro_batch: int = 1
    precision: str = DEFAULT
    ac: str = "none"
    ac_layers: int = 1  # with ac="partial": how many layers of the full model are fully recomputed
    layers: int = 2  # decoder layers actually built and traced; the rest is extrapolated
    fsdp: int = 1  # FSDP2 world size (fake process group) when > 1
    steps: int = 2  # training steps run; the second one has optimizer states, as in steady state
    # Trace K+1 layers too and extrapolate the peak linearly in depth (twice the time). The live
    # bytes at the peak grow by a constant per layer, but not by a sum of the traced categories:
    # under checkpointing, recomputed tensors backward never unpacks stay alive to its end.
    peak_slope: bool = True

    def __post_init__(self):
        for k in ("seq_len", "micro_batch", "layers", "fsdp", "steps"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise TrainplanError(f"trace: {k} must be a positive integer, got {v!r}")
        if self.fsdp > MAX_FSDP:
            raise TrainplanError(
                f"trace: fsdp {self.fsdp} is past the limit of {MAX_FSDP} ranks the fake process group can "
                f"trace in reasonable time; trace at --fsdp {MAX_FSDP} (rank 0 then holds under 0.1% of the parameters)"
            )
        if self.ac_layers < 0:
            raise TrainplanError(f"trace: ac_layers must be >= 0, got {self.ac_layers}")
        if self.precision not in PRECISIONS:
            raise TrainplanError(
                f"trace: unknown precision {self.precision!r}; the tracer runs: {', '.join(PRECISIONS)}"
            )
        if self.ac not in AC_POLICIES:
            raise TrainplanError(
                f"trace: unknown checkpointing policy {self.ac!r}; known: {', '.join(AC_POLICIES)}"
            )

    @classmethod
    def make(cls, **kw) -> TraceSettings:
        p = kw.get("precision")
        if p is not None:
            kw["precision"] = canonical(p)
        return cls(**kw)

    def to_dict(self) -> dict:
        return asdict(self)


def canonical(name: str) -> str:
    """A recipe's registry name for `name` or one of its aliases; an unknown name is kept (the
    settings check refuses it with the recipes the tracer runs)."""
    try:
        return canonical_precision(name)
    except TrainplanError:
        return name
