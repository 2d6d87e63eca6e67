"""`plan --verify`: trace the chosen plan's model under its layout and compare with the analytic model.

Traces one GPU's share: micro-batch and sequence length from the layout and workload (cp divides the
sequence), precision and checkpointing from the layout. Tensor, pipeline and expert parallelism are
not traced; the result says so. FSDP sharding is traced over a fake process group.
"""

from __future__ import annotations

from trainplan.precision import DEFAULT
from trainplan.trace.settings import PRECISIONS, TraceSettings, canonical


def verify(job, layout) -> dict:
    from trainplan.trace.compare import comparison
    from trainplan.trace.config import load_config
    from trainplan.trace.run import trace_config

    notes = []
    prec = canonical(layout.precision)
    if prec not in PRECISIONS:
        notes.append(f"precision {layout.precision} has no CPU trace; traced {DEFAULT} instead")
        prec = DEFAULT
    ac = layout.ac if layout.ac != "offload" else "full"
    # FSDP2 sharding is traced with a fake process group of dp_shard ranks (trace/fsdp.py).
    fsdp = layout.dp_shard if layout.sharding == "fsdp" else 1
    if layout.sharding in ("zero1", "zero2") and layout.dp_shard > 1:
        notes.append(f"{layout.sharding} is not traced: states are those of one unsharded rank")
    s = TraceSettings.make(seq_len=job.workload.seq_len // layout.cp, micro_batch=layout.micro_batch,
                           precision=prec, ac=ac, ac_layers=max(layout.ac_layers, 1), fsdp=fsdp)
    for k in ("tp", "pp", "ep", "cp"):
        if getattr(layout, k) > 1:
            notes.append(f"{k}={getattr(layout, k)} is not traced: one unsharded GPU's share is traced")
    cfg = load_config(job.model.name)
    result = trace_config(cfg, s)
    out = {"traced": result.full(), **comparison(job.model, result), "settings": s.to_dict(),
           "notes": notes + list(result.notes)}
    return out
