"""`trainplan estimate`: step time, communication ledger, throughput, MFU, cost and memory of one
explicit layout."""

from __future__ import annotations

from trainplan.commands._layout_args import (
    add_from_argument,
    add_layout_arguments,
    job_and_layout,
    job_and_layout_from,
)
from trainplan.commands._profile_args import add_profile_arguments, check_machine_gpu, load_profiles

NAME = "estimate"
HELP = "Estimate step time, communication, throughput, MFU, cost and memory for one explicit layout."


def add_arguments(p) -> None:
    from trainplan.commands._common import positive_number
    from trainplan.commands._fields import add_fields
    from trainplan.job import Workload

    add_layout_arguments(p)
    add_from_argument(p)
    add_fields(p, Workload, ("tokens",))
    p.add_argument("--price", type=positive_number, default=None, help="USD per node-hour (overrides the catalog)")
    add_profile_arguments(p)
    p.add_argument("--storage", default=None,
                   help="checkpoint storage (hardware/reliability.toml; default: the instance's cloud's, else fsx-lustre-1000)")
    p.add_argument("--storage-tib", type=positive_number, default=None, help="the storage's capacity in TiB")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def build(args):
    """(job, layout) from the flags, or from --from's file, checked."""
    if args.from_file is not None:
        return job_and_layout_from(args, tokens=args.tokens, price=args.price)
    return job_and_layout(args, tokens=args.tokens, price=args.price)


def run(args) -> int:
    from trainplan.commands._common import print_json
    from trainplan.estimate import estimate
    from trainplan.hardware.reliability import reliability

    job, layout = build(args)
    check_machine_gpu(args.machine, job.cluster.gpu.name)
    prof = load_profiles(args.profile, args.machine)
    storage = args.storage or job.cluster.node.checkpoint_storage
    e = estimate(job, layout, prof, rel=reliability(storage, args.storage_tib))
    why = setting_reasons(job, layout, prof)
    if args.json:
        print_json({"model": job.model.name, "instance": job.cluster.node.name, "nodes": job.cluster.nodes,
                    "layout": layout.to_dict(), "stack": layout.stack,
                    "execution": layout.execution.to_dict(), "setting_reasons": why, "estimate": e.to_dict(),
                    **({"from": args.from_notes} if getattr(args, "from_notes", None) else {})})
        return 0
    print(render(job, layout, e))
    if getattr(args, "from_notes", None):
        print("\n" + "\n".join(args.from_notes))
    if args.profile:
        from trainplan.commands._profile_args import profile_line

        print(profile_line(args.profile, args.machine, job))
    if why:
        print("\nexecution settings that matter:\n" + "\n".join(f"  {r}" for r in why))
    return 0


def setting_reasons(job, layout, prof) -> list[str]:
    """What the stack's settings cost this layout (search/reasons.py execution_reasons, the lines
    `plan` prints for its chosen layout)."""
    from trainplan.search.candidate import Candidate
    from trainplan.search.evaluator import Counting, model_evaluator
    from trainplan.search.reasons import execution_reasons

    ev = Counting(model_evaluator(prof))
    return execution_reasons(Candidate(job, layout, ev.evaluate(job, layout)), ev)


def _settings(ex) -> str:
    return ", ".join(f"{k}={'null' if v is None else str(v).lower() if isinstance(v, bool) else v}"
                     for k, v in ex.to_dict().items())


def _fmt(v, unit="", digits=2):
    return "n/a" if v is None else f"{v:,.{digits}f}{unit}"


def goodput_lines(g) -> list[str]:
    if g is None:
        return []
    return [(f"goodput {g.goodput:.1%}: a failure every {g.mtbf_s / 3600:.2f} h "
             f"({g.failures_per_gpu_hour:.2e} per GPU-hour), {g.checkpoint_bytes / 1e12:.2f} TB checkpoint "
             f"saved in {g.save_s:.0f} s to {g.storage} ({g.storage_bytes_per_s / 1e9:.0f} GB/s), restart "
             f"{g.restart_s:.0f} s"),
            (f"checkpoint every {g.checkpoint_interval_steps} steps ({g.checkpoint_interval_s / 60:.1f} min, "
             f"Young's sqrt(2 x save x MTBF)): {g.lost_to_saves:.1%} lost to saves, "
             f"{g.lost_to_failures:.1%} to failures")]


def render(job, layout, e) -> str:
    from trainplan.units import GiB

    c = job.cluster
    t = e.time
    out = [(f"{job.model.name} on {c.nodes} x {c.node.name} ({c.num_gpus} GPUs), "
            f"seq {job.workload.seq_len}, global batch {job.workload.global_batch}"),
           f"layout: {layout.short()}",
           f"stack: {layout.stack} ({_settings(layout.execution)})", "",
           (f"step time {t.total:.3f} s   tokens/s {e.tokens_per_s:,.0f} (cluster), "
            f"{e.tokens_per_s_per_gpu:,.0f} per GPU (band {e.band[0]:,.0f}-{e.band[1]:,.0f})"),
           mfu_line(e, layout.precision) + f"   binding: {e.binding}", _machine_line(e), "", "step time breakdown (s):"]
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
    out += goodput_lines(e.goodput)
    m = e.memory
    out += ["", f"memory per GPU (worst stage {m.worst_stage}): {m.total / GiB:.1f} GiB of "
            f"{c.gpu.memory_bytes / GiB:.0f} GiB" + ("" if e.fits else "  DOES NOT FIT")]
    for k, v in m.terms().items():
        if v > 0:
            out.append(f"  {k:<22}{v / GiB:10.2f} GiB")
    return "\n".join(out)


def mfu_line(e, precision: str) -> str:
    """MFU with the peak it is against: the bf16 dense peak (the headline), then the recipe's own."""
    own = precision.split("_")[0]
    line = (f"MFU {e.mfu:.1%} of the bf16 dense peak ({e.peak_tflops_per_gpu:,.0f} TFLOP/s; "
            f"{e.tflops_per_gpu:,.0f} achieved per GPU; causal 6N+attention, Megatron/full-attention "
            f"convention {e.mfu_noncausal:.1%}), HFU {e.hfu:.1%}")
    if e.recipe_peak_tflops_per_gpu != e.peak_tflops_per_gpu:
        line += f"; {e.mfu_recipe_peak:.1%} of the {own} peak ({e.recipe_peak_tflops_per_gpu:,.0f})"
    return line


def _machine_line(e) -> str:
    """Which measured rates priced the kernels (docs/machine-profile.md), and where they were stretched."""
    if e.machine is None:
        line = f"rates: formulas (profile {e.profile}; no machine profile for this GPU)"
    else:
        line = f"rates: machine profile {e.machine} where it has tables, formulas elsewhere (profile {e.profile})"
    if e.outside:
        line += f"; {len(e.outside)} lookup(s) beyond a table's range used its edge (--json: machine.outside_grid)"
    # the band already carries each line's error: a cited ratio's (costs/measured.py), an estimated
    # matmul ceiling's (hardware/evidence.py)
    for d in e.derived:
        line += f"\n{d}"
    return line

