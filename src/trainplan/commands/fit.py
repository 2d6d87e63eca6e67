"""`trainplan fit`: does one explicit layout fit in GPU memory, with what headroom, and how far can
the micro-batch and the sequence length grow?"""

from __future__ import annotations

from trainplan.commands._layout_args import (
    add_from_argument,
    add_layout_arguments,
    job_and_layout,
    job_and_layout_from,
)

NAME = "fit"
HELP = "Check that one explicit layout fits in GPU memory: headroom, breakdown, largest micro-batch and sequence."


def add_arguments(p) -> None:
    from trainplan.commands._common import positive_number

    add_layout_arguments(p)
    add_from_argument(p)
    p.add_argument("--capacity-gib", type=positive_number, default=None,
                   help="usable memory per GPU in GiB (default: the GPU's memory)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def build(args):
    """(job, layout) from the flags or --from's file; impossible layouts are check_layout's one-line errors."""
    return job_and_layout_from(args) if args.from_file is not None else job_and_layout(args)


def answer(job, layout, capacity_bytes=None) -> dict:
    """Everything `fit` reports, as one JSON-ready dict (GiB for memory)."""
    from trainplan.costs.fit import capacity, max_micro_batch, max_seq_len
    from trainplan.costs.memory import memory_breakdown
    from trainplan.units import GiB

    cap = capacity(job, capacity_bytes)
    b = memory_breakdown(job, layout)
    room = cap - b.total
    return {
        "model": job.model.name,
        "instance": job.cluster.node.name,
        "nodes": job.cluster.nodes,
        "gpus": job.cluster.num_gpus,
        "seq_len": job.workload.seq_len,
        "global_batch": job.workload.global_batch,
        "layout": layout.to_dict(),
        "fits": room >= 0,
        "capacity_gib": round(cap / GiB, 3),
        "total_gib": round(b.total / GiB, 3),
        "headroom_gib": round(room / GiB, 3),
        "headroom_pct": round(100 * room / cap, 2),
        "max_micro_batch": max_micro_batch(job, layout, cap),
        "max_seq_len": max_seq_len(job, layout, cap),
        "memory": b.to_dict(),
    }


def run(args) -> int:
    from trainplan.commands._common import print_json
    from trainplan.errors import TrainplanError
    from trainplan.units import GiB

    if args.capacity_gib is not None and not args.capacity_gib > 0:
        raise TrainplanError(f"--capacity-gib must be a positive number, got {args.capacity_gib}")
    job, layout = build(args)
    cap = None if args.capacity_gib is None else args.capacity_gib * GiB
    a = answer(job, layout, cap)
    notes = getattr(args, "from_notes", None)
    if args.json:
        print_json({**a, "from": notes} if notes else a)
    else:
        print(render(a))
        if notes:
            print("\n" + "\n".join(notes))
    return 0


# Terms shown in the table, in the order memory is usually reasoned about.
_ROWS = ("params", "grads", "master_params", "optimizer_states", "unsharded_params", "unsharded_grads",
         "activations", "recompute_working", "activation_grads", "logits", "fp8_weights", "fp8_scales",
         "cp_buffers", "workspace", "fragmentation", "nccl_buffers", "cuda_context")


def render(a: dict) -> str:
    m = a["memory"]
    g = m["gib"]
    verdict = "FITS" if a["fits"] else "DOES NOT FIT"
    lines = [
        (f"{a['model']} on {a['nodes']} x {a['instance']} ({a['gpus']} GPUs), seq {a['seq_len']}, "
        f"global batch {a['global_batch']}"),
        (f"{verdict}: {a['total_gib']:.1f} GiB of {a['capacity_gib']:.1f} GiB per GPU, headroom "
        f"{a['headroom_gib']:.1f} GiB ({a['headroom_pct']:.1f}%)"),
        (f"worst pipeline stage {m['worst_stage']}, {m['microbatches_in_flight']:g} micro-batch(es) in flight, "
        f"{m['convention']} state convention"),
        f"largest micro-batch that fits: {a['max_micro_batch']}; longest sequence that fits: {a['max_seq_len']:,}",
        "",
        "memory per GPU (GiB):",
    ]
    for k in _ROWS:
        if g[k]:
            lines.append(f"  {k:<20}{g[k]:9.2f}")
    lines += [f"  {'= allocated':<20}{g['total_allocated']:9.2f}", f"  {'= reserved':<20}{g['total_reserved']:9.2f}",
              f"  {'= device (smi)':<20}{g['total']:9.2f}"]
    return "\n".join(lines)
