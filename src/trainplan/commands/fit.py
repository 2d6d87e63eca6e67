"""`trainplan fit`: does one explicit layout fit in GPU memory, with what headroom, and how far can
the micro-batch and the sequence length grow?"""

from __future__ import annotations

NAME = "fit"
HELP = "Check that one explicit layout fits in GPU memory: headroom, breakdown, largest micro-batch and sequence."


def add_arguments(p) -> None:
    from trainplan.commands._common import positive_int
    from trainplan.layout import AC_MODES, PP_SCHEDULES, SHARDING

    p.add_argument("--model", default="llama-3.1-70b", help="catalog name or HF config.json path")
    p.add_argument("--instance", default="ml.p6-b200.48xlarge")
    p.add_argument("--nodes", type=positive_int, default=1)
    p.add_argument("--seq-len", type=positive_int, default=8192)
    p.add_argument("--global-batch", type=positive_int, default=None,
                   help="sequences per step (default: micro-batch x data-parallel degree)")
    p.add_argument("--precision", default="bf16", help="bf16, fp16, bf16_pure, fp8_tensorwise, fp8_rowwise, mxfp8, nvfp4")
    p.add_argument("--ac", default="full", choices=AC_MODES, help="activation checkpointing")
    p.add_argument("--ac-layers", type=int, default=0, help="with --ac partial: layers per stage recomputed")
    p.add_argument("--micro-batch", type=positive_int, default=1)
    p.add_argument("--dp-replicate", type=positive_int, default=1)
    p.add_argument("--dp-shard", type=positive_int, default=None,
                   help="default: the GPUs left after tp*pp*cp*dp_replicate")
    p.add_argument("--sharding", default="fsdp", choices=SHARDING)
    p.add_argument("--tp", type=positive_int, default=1)
    p.add_argument("--no-sequence-parallel", action="store_true")
    p.add_argument("--pp", type=positive_int, default=1)
    p.add_argument("--pp-schedule", default=None, choices=PP_SCHEDULES,
                   help="default: interleaved when --vp > 1, else 1f1b")
    p.add_argument("--vp", type=positive_int, default=1)
    p.add_argument("--cp", type=positive_int, default=1)
    p.add_argument("--ep", type=positive_int, default=1)
    p.add_argument("--chunked-loss", action="store_true", help="cross-entropy over vocabulary chunks")
    p.add_argument("--fp8-allgather", action="store_true", help="FSDP all-gathers fp8 weights")
    p.add_argument("--optimizer-offload", action="store_true", help="optimizer states in host memory")
    p.add_argument("--no-flash-attention", action="store_true", help="materialised s x s attention scores")
    p.add_argument("--torch-compile", action="store_true")
    p.add_argument("--capacity-gib", type=float, default=None,
                   help="usable memory per GPU in GiB (default: the GPU's memory)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def build(args):
    """(job, layout) from the flags; impossible layouts are check_layout's one-line errors."""
    from trainplan.errors import TrainplanError
    from trainplan.hardware import Cluster, find_node
    from trainplan.job import Job, Workload
    from trainplan.layout import Layout, check_layout
    from trainplan.models import resolve

    cluster = Cluster(find_node(args.instance), args.nodes)
    model = resolve(args.model)
    fixed = args.tp * args.pp * args.cp * args.dp_replicate
    # what is left of the GPU count; a product that does not divide it is left to check_layout,
    # which names the dimension that is wrong (tp vs heads) before the GPU-count product
    shard = args.dp_shard or max(cluster.num_gpus // fixed, 1)
    rep = args.dp_replicate
    if args.sharding == "none" and args.dp_shard is None:
        rep, shard = rep * shard, 1  # plain data parallel: every replica holds everything
    dp = rep * shard
    gb = args.global_batch or args.micro_batch * dp
    if gb % (args.micro_batch * dp):
        raise TrainplanError(
            f"global batch {gb} is not a multiple of micro_batch*dp = {args.micro_batch}*{dp}; "
            "change --global-batch or --micro-batch"
        )
    layout = Layout(
        precision=args.precision, ac=args.ac, ac_layers=args.ac_layers, micro_batch=args.micro_batch,
        grad_accum=gb // (args.micro_batch * dp), dp_replicate=rep, dp_shard=shard, sharding=args.sharding,
        tp=args.tp, sequence_parallel=not args.no_sequence_parallel, pp=args.pp,
        pp_schedule=args.pp_schedule or ("interleaved" if args.vp > 1 else "1f1b"), vp=args.vp,
        cp=args.cp, ep=args.ep, fp8_allgather=args.fp8_allgather, chunked_loss=args.chunked_loss,
        optimizer_offload=args.optimizer_offload, flash_attention=not args.no_flash_attention,
        torch_compile=args.torch_compile,
    )
    job = Job(model, cluster, Workload(seq_len=args.seq_len, global_batch=gb))
    check_layout(job, layout)
    return job, layout


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
    if args.json:
        print_json(a)
    else:
        print(render(a))
    return 0


# Terms shown in the table, in the order memory is usually reasoned about.
_ROWS = ("params", "grads", "master_params", "optimizer_states", "unsharded_params", "unsharded_grads",
         "activations", "recompute_working", "activation_grads", "logits", "fp8_weights", "fp8_scales",
         "workspace", "fragmentation", "nccl_buffers", "cuda_context")


def render(a: dict) -> str:
    m = a["memory"]
    g = m["gib"]
    verdict = "FITS" if a["fits"] else "DOES NOT FIT"
    lines = [
        f"{a['model']} on {a['nodes']} x {a['instance']} ({a['gpus']} GPUs), seq {a['seq_len']}, "
        f"global batch {a['global_batch']}",
        f"{verdict}: {a['total_gib']:.1f} GiB of {a['capacity_gib']:.1f} GiB per GPU, headroom "
        f"{a['headroom_gib']:.1f} GiB ({a['headroom_pct']:.1f}%)",
        f"worst pipeline stage {m['worst_stage']}, {m['microbatches_in_flight']:g} micro-batch(es) in flight, "
        f"{m['convention']} state convention",
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
