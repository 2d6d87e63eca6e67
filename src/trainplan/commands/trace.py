"""`trainplan trace`: run the real model code on fake tensors (CPU, no weights) for one training
step and report exact parameter, gradient, optimizer and activation bytes, the peak and its phase,
and FLOPs per op class, next to the analytic model's numbers and the relative differences.

Needs the torch extra; torch and transformers are imported only inside run().
"""

from __future__ import annotations

import sys

NAME = "trace"
HELP = "trace one training step of the real model on fake tensors: exact memory and FLOPs"


def add_arguments(p) -> None:
    from trainplan.commands._common import positive_int
    from trainplan.commands._fields import add_fields
    from trainplan.job import Job, Workload
    from trainplan.layout import Layout

    add_fields(p, Job, ("model",), variants={"model": "required"})
    add_fields(p, Workload, ("seq_len",))
    add_fields(p, Layout, ("micro_batch", "precision", "ac", "ac_layers"),
               variants={"precision": "trace", "ac_layers": "trace"})
    p.add_argument("--layers", type=positive_int, default=None,
                   help="decoder layers to build and trace; the rest is extrapolated (default 2, or one of "
                        "each layer kind where the model has more: a Nemotron-H Mamba-2, attention and MLP block)")
    p.add_argument("--fsdp", type=positive_int, default=1,
                   help="FSDP2 world size: fully_shard over a fake process group, FSDPMemTracker (rank 0)")
    add_fields(p, Workload, ("long_context",))
    p.add_argument("--json", action="store_true", help="print JSON")


def _progress(msg: str) -> None:
    print(f"trace: {msg}", file=sys.stderr, flush=True)


def trace_report(model: str, settings, progress=None) -> dict:
    """Trace + analytic comparison as one JSON-able dict (also used by verify)."""
    from trainplan.models import resolve
    from trainplan.trace import trace_config
    from trainplan.trace.compare import comparison, notes
    from trainplan.trace.config import load_config

    cfg = load_config(model)
    spec = resolve(model)
    result = trace_config(cfg, settings, progress=progress)
    out = result.to_dict()
    out["model"] = model
    out.update(comparison(spec, result))
    out["notes"] = [*out["notes"], *notes(spec)]
    return out


def run(args) -> int:
    from trainplan.commands._common import print_json
    from trainplan.models import resolve
    from trainplan.models.checks import check_context
    from trainplan.trace.config import default_layers, load_config
    from trainplan.trace.settings import TraceSettings

    layers = args.layers or default_layers(load_config(args.model))
    s = TraceSettings.make(seq_len=args.seq_len, micro_batch=args.micro_batch, precision=args.precision,
                           ac=args.ac, ac_layers=args.ac_layers, layers=layers, fsdp=args.fsdp)
    check_context(resolve(args.model), args.seq_len, args.allow_long_context)  # before importing torch
    d = trace_report(args.model, s, progress=_progress)  # progress on stderr: stdout stays JSON
    if args.json:
        print_json(d)
        return 0
    print(render(args.model, d))
    return 0


def render(model: str, d: dict) -> str:
    """The trace next to the planner's own numbers. Activations are compared with what `plan`
    and `estimate` use (the memory model for this layout, no trace calibration), and the text says
    so; the formulas calibrated to HF eager code are shown apart, marked as not used. Each
    percentage is computed from the two numbers printed beside it (trace/compare.rel), so a line
    never shows one pair of values with the difference of another."""
    from trainplan.trace.compare import rel
    from trainplan.units import GiB

    t, a = d["traced"], d["analytic"]

    def pct(traced, analytic):
        x = rel(traced, analytic)
        return "n/a" if x is None else f"{100 * x:+.2f}%"

    def gib(x):
        return f"{x / GiB:.3f} GiB"

    a_kind = a["activation_bytes_per_layer_by_kind"]  # per layer kind: the per-layer formula (costs/activations.py)
    act, planner, calibrated = (t["activation_bytes_per_layer"], a["activation_bytes_per_layer_planner"],
                                a["activation_bytes_per_layer_calibrated"])
    flops = [  # label, traced, analytic: the step, then its matmuls without and with recompute
        ("FLOPs / step", t["flops_per_step"], a["flops_per_step"]),
        ("  matmul, model", t["model_flops_matmul"], a["flops_matmul"]),
        ("  matmul, recompute", t["recompute_flops_by_class"]["matmul"], a["recompute_flops_matmul"]),
    ]
    return "\n".join([
        f"{model}: {d['note']}",
        f"  params               {t['params']:>16,}   analytic {a['params']:,} ({pct(t['params'], a['params'])})",
        (f"  activations / layer  {act / GiB:>13.3f} GiB   planner {gib(planner)} ({pct(act, planner)})"),
        "                       planner: the memory model plan and estimate use, for this layout",
        (f"                       (calibrated to HF eager code, not used by the planner: "
         f"{gib(calibrated)}, {pct(act, calibrated)})"),
        *(f"    {k:<19}{v / GiB:>13.3f} GiB   model {gib(a_kind[k]['model'])} ({pct(v, a_kind[k]['model'])}), "
          f"calibrated {gib(a_kind[k]['calibrated'])} ({pct(v, a_kind[k]['calibrated'])})"
          for k, v in t["activation_bytes_per_layer_by_kind"].items()
          if k in a_kind and len(t["activation_bytes_per_layer_by_kind"]) > 1),
        (f"  activations outside  {t['activation_bytes_outside_layers'] / GiB:>13.3f} GiB   "
         "(embedding, final norm, logits, loss)"),
        f"  peak                 {t['peak_bytes'] / GiB:>13.3f} GiB   in {t['peak_phase']} (extrapolated)",
        *(f"  {label:<21}{traced:>16.4e}   analytic {analytic:.4e} ({pct(traced, analytic)})"
          for label, traced, analytic in flops),
        f"  traced in {d['trace_seconds']} s",
        *(f"  note: {n}" for n in d["notes"]),
    ])
