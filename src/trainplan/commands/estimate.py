"""`trainplan estimate`: step time, communication ledger, throughput, MFU, cost and memory of one
explicit layout."""

from __future__ import annotations

NAME = "estimate"
HELP = "Estimate step time, communication, throughput, MFU, cost and memory for one explicit layout."


def add_arguments(p) -> None:
    from trainplan.commands._common import positive_int, tokens
    from trainplan.layout import AC_MODES, PP_SCHEDULES, SHARDING

    p.add_argument("--model", default="llama-3.1-70b", help="catalog name or HF config.json path")
    p.add_argument("--instance", default="ml.p6-b200.48xlarge")
    p.add_argument("--nodes", type=positive_int, default=1)
    p.add_argument("--seq-len", type=positive_int, default=8192)
    p.add_argument("--global-batch", type=positive_int, default=None,
                   help="sequences per step (default: micro-batch x data-parallel degree)")
    p.add_argument("--precision", default="bf16")
    p.add_argument("--ac", default="full", choices=AC_MODES)
    p.add_argument("--ac-layers", type=int, default=0)
    p.add_argument("--micro-batch", type=positive_int, default=1)
    p.add_argument("--dp-replicate", type=positive_int, default=1)
    p.add_argument("--dp-shard", type=positive_int, default=None,
                   help="default: the GPUs left after tp*pp*cp*dp_replicate")
    p.add_argument("--sharding", default="fsdp", choices=SHARDING)
    p.add_argument("--tp", type=positive_int, default=1)
    p.add_argument("--no-sequence-parallel", action="store_true")
    p.add_argument("--pp", type=positive_int, default=1)
    p.add_argument("--pp-schedule", default=None, choices=PP_SCHEDULES)
    p.add_argument("--vp", type=positive_int, default=1)
    p.add_argument("--cp", type=positive_int, default=1)
    p.add_argument("--ep", type=positive_int, default=1)
    p.add_argument("--fp8-allgather", action="store_true")
    p.add_argument("--chunked-loss", action="store_true")
    p.add_argument("--optimizer-offload", action="store_true", help="optimizer states in host memory")
    p.add_argument("--no-flash-attention", action="store_true", help="materialised s x s attention scores")
    p.add_argument("--torch-compile", action="store_true")
    p.add_argument("--tokens", type=tokens, default=0, help="token budget, e.g. 15T, 300B")
    p.add_argument("--price", type=float, default=None, help="USD per node-hour (overrides the catalog)")
    p.add_argument("--profile", default=None, help="calibration profile JSON (default: packaged)")
    p.add_argument("--json", action="store_true")


def build(args):
    """(job, layout) from the flags, checked."""
    from trainplan.errors import TrainplanError
    from trainplan.hardware import Cluster, find_node, with_price
    from trainplan.job import Job, Workload
    from trainplan.layout import Layout, check_layout
    from trainplan.models import resolve

    node = find_node(args.instance)
    if args.price is not None:
        node = with_price(node, args.price)
    cluster = Cluster(node, args.nodes)
    model = resolve(args.model)
    fixed = args.tp * args.pp * args.cp * args.dp_replicate
    if cluster.num_gpus % fixed:
        raise TrainplanError(
            f"tp*pp*cp*dp_replicate = {fixed} does not divide the {cluster.num_gpus} GPUs of the cluster"
        )
    shard = args.dp_shard or cluster.num_gpus // fixed
    dp_rep, sharding = args.dp_replicate, args.sharding
    if sharding == "none" and args.dp_shard is None:
        dp_rep, shard = dp_rep * shard, 1
    dp = dp_rep * shard
    gb = args.global_batch or args.micro_batch * dp
    if gb % (args.micro_batch * dp):
        raise TrainplanError(
            f"global batch {gb} is not a multiple of micro_batch*dp = {args.micro_batch}*{dp}"
        )
    schedule = args.pp_schedule or ("interleaved" if args.vp > 1 else "1f1b")
    layout = Layout(
        precision=args.precision, ac=args.ac, ac_layers=args.ac_layers, micro_batch=args.micro_batch,
        grad_accum=gb // (args.micro_batch * dp), dp_replicate=dp_rep, dp_shard=shard, sharding=sharding,
        tp=args.tp, sequence_parallel=not args.no_sequence_parallel, pp=args.pp, pp_schedule=schedule,
        vp=args.vp, cp=args.cp, ep=args.ep, fp8_allgather=args.fp8_allgather, chunked_loss=args.chunked_loss,
        optimizer_offload=args.optimizer_offload, flash_attention=not args.no_flash_attention,
        torch_compile=args.torch_compile,
    )
    job = Job(model, cluster, Workload(seq_len=args.seq_len, global_batch=gb, tokens=args.tokens))
    check_layout(job, layout)
    return job, layout


def run(args) -> int:
    from trainplan.calibration.profile import load_profile
    from trainplan.commands._common import print_json
    from trainplan.estimate import estimate

    job, layout = build(args)
    prof = load_profile(args.profile) if args.profile else None
    e = estimate(job, layout, prof)
    if args.json:
        print_json({"model": job.model.name, "instance": job.cluster.node.name, "nodes": job.cluster.nodes,
                    "layout": layout.to_dict(), "estimate": e.to_dict()})
        return 0
    print(render(job, layout, e))
    return 0


def _fmt(v, unit="", digits=2):
    return "n/a" if v is None else f"{v:,.{digits}f}{unit}"


def render(job, layout, e) -> str:
    from trainplan.units import GiB

    c = job.cluster
    t = e.time
    out = [(f"{job.model.name} on {c.nodes} x {c.node.name} ({c.num_gpus} GPUs), "
            f"seq {job.workload.seq_len}, global batch {job.workload.global_batch}"),
           f"layout: {layout.short()}", "",
           (f"step time {t.total:.3f} s   tokens/s {e.tokens_per_s:,.0f} (cluster), "
            f"{e.tokens_per_s_per_gpu:,.0f} per GPU (band {e.band[0]:,.0f}-{e.band[1]:,.0f})"),
           (f"MFU {e.mfu:.1%} (causal 6N+attention; Megatron/full-attention convention {e.mfu_noncausal:.1%}),"
            f" HFU {e.hfu:.1%}   binding: {e.binding}"), "", "step time breakdown (s):"]
    for k in ("compute", "nongemm", "recompute", "dp", "tp", "pp", "cp", "ep", "bubble", "optimizer", "overhead"):
        v = getattr(t, k)
        if v > 0 or k in ("compute",):
            label = {"dp": "exposed dp/fsdp comm", "tp": "exposed tp comm", "pp": "exposed pp comm",
                     "cp": "exposed cp comm", "ep": "exposed ep comm", "compute": "GEMM + attention",
                     "nongemm": "element-wise (HBM)"}.get(k, k)
            out.append(f"  {label:<22}{v:10.4f}  {v / t.total:6.1%}")
    if e.comm:
        out += ["", "communication per step (per GPU):",
                f"  {'collective':<15}{'dim':<6}{'tier':<8}{'calls':>7}{'GB sent':>10}{'seconds':>10}{'exposed':>10}"]
        for x in e.comm:
            out.append(f"  {x.collective:<15}{x.dimension:<6}{x.tier:<8}{x.count:>7}{x.bytes / 1e9:>10.2f}"
                       f"{x.seconds:>10.4f}{x.exposed_seconds:>10.4f}")
    out += ["", (f"cost: {_fmt(e.cost_per_hour, ' USD/h')} ({e.cost.price_kind}),"
                 f" {_fmt(e.usd_per_million_tokens, ' USD per million tokens', 3)}")]
    if job.workload.tokens:
        out.append(f"to {job.workload.tokens:,} tokens: {_fmt(e.hours_to_tokens, ' h', 1)}, "
                   f"{_fmt(e.usd_to_tokens, ' USD', 0)}")
    m = e.memory
    out += ["", f"memory per GPU (worst stage {m.worst_stage}): {m.total / GiB:.1f} GiB of "
            f"{c.gpu.memory_bytes / GiB:.0f} GiB" + ("" if e.fits else "  DOES NOT FIT")]
    for k, v in m.terms().items():
        if v > 0:
            out.append(f"  {k:<22}{v / GiB:10.2f} GiB")
    return "\n".join(out)
