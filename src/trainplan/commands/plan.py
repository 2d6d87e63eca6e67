"""`trainplan plan`: the main job. Search the layouts of a model on a cluster, rank them by a
priority, print the chosen plan with its reasons, runners-up and Pareto set, save plan.json.

With no arguments it plans Llama 3.1 70B on ml.p6-b200.48xlarge nodes, as many as the throughput rule takes
(search/sizing.py: from the fewest that fit, more while each adds over 10% tokens/s per GPU).
"""

from __future__ import annotations

import textwrap

from trainplan.commands._layout_args import (
    add_from_argument,
    add_stack_arguments,
    stack_and_execution,
)
from trainplan.commands._profile_args import add_profile_arguments, check_machine_gpu, profile_line
from trainplan.report.cli import add_html_argument, write_html

NAME = "plan"
HELP = "search the parallel layouts of a model on a cluster and choose one by priority"

WIDTH = 80


def add_arguments(p) -> None:
    from trainplan.commands._common import fraction, positive_int, positive_number
    from trainplan.commands._fields import add_fields
    from trainplan.job import Job, Workload
    from trainplan.layout import Layout
    from trainplan.parsing import output_file
    from trainplan.search.objectives import OBJECTIVES

    add_fields(p, Job, ("model", "cluster"), variants={"cluster": "list"})
    add_from_argument(p, "the search keeps the model, sequence and global batch (and, unless given, the "
                         "instance, node count and stack) and prints your layout beside the plan, term by term")
    p.add_argument("--nodes", type=positive_int, default=None, help="a fixed number of nodes")
    p.add_argument("--max-nodes", type=positive_int, default=None,
                   help="search 1..N nodes (default: up to 64; throughput starts at the fewest that fit and "
                        "takes more while they add over 10%% tokens/s per GPU)")
    add_fields(p, Workload, ("seq_len", "long_context", "global_batch"),
               variants={"seq_len": "max", "global_batch": "range"})
    add_fields(p, Layout, ("precision",), variants={"precision": "searched"})
    p.add_argument("--priority", default=None, choices=sorted(OBJECTIVES),
                   help="what to optimise (default throughput; with --days or --budget the node count is "
                        "chosen by them: cheapest within the deadline, fastest within the budget)")
    p.add_argument("--tolerance", type=fraction, default=0.05,
                   help="communication: plans within this fraction of the best tokens/s per GPU")
    add_fields(p, Workload, ("tokens",))
    p.add_argument("--days", type=positive_number, default=None,
                   help="deadline for training --tokens: the cheapest plan that meets it")
    p.add_argument("--budget", type=positive_number, default=None,
                   help="USD cap for training --tokens: the fastest plan within it (with --days: the cheapest "
                        "that meets both)")
    p.add_argument("--price", type=positive_number, default=None, help="USD per node-hour (overrides the catalog)")
    p.add_argument("--allow-risk", action="store_true",
                   help="admit plans whose memory band crosses the GPU's capacity")
    p.add_argument("--top", type=positive_int, default=5, help="runners-up to show")
    add_profile_arguments(p)
    add_stack_arguments(p)
    p.add_argument("--out", type=output_file, default=None, help="write the chosen plan to this plan.json")
    p.add_argument("--verify", action="store_true",
                   help="trace the chosen plan with the real model code (needs the torch extra)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_html_argument(p)


# ---- flags -> Query ------------------------------------------------------------------------------

def instances(names: tuple[str, ...] | None, priority: str, price: float | None) -> tuple:
    from trainplan.hardware import find_node, nodes, with_price
    from trainplan.job import DEFAULT_INSTANCE
    from trainplan.search.objectives import objective

    if names:
        found = [find_node(n) for n in names]
    elif objective(priority).chooses_count:
        found = [n for n in nodes().values() if n.sagemaker and n.price_per_hour is not None]
    else:
        found = [find_node(DEFAULT_INSTANCE)]
    if price is not None:
        found = [with_price(n, price) for n in found]
    return tuple(found)


def seq_len(text: str) -> int | None:
    from trainplan.errors import TrainplanError

    if text.strip().lower() == "max":
        return None
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v <= 0:
        raise TrainplanError(f"--seq-len must be a positive integer or 'max', got {text!r}")
    return v


SIZED_PRIORITIES = ("throughput", "cost", "time")  # what --days and --budget stand in for


def priority(args) -> str:
    """--priority, throughput by default; --days and --budget choose the node count by cost and
    time themselves, so a priority that ranks by something else does not combine with them."""
    from trainplan.errors import TrainplanError
    from trainplan.search.sizing import Goal

    goal = Goal(args.tokens, args.days, args.budget)
    goal.check()
    if goal.sized and args.priority not in (None, *SIZED_PRIORITIES):
        raise TrainplanError(f"--days and --budget choose the plan by cost and time; they do not combine with "
                             f"--priority {args.priority} (use one of {', '.join(SIZED_PRIORITIES)}, or drop them)")
    return args.priority or "throughput"


def workload_seq(model, text: str | None) -> tuple[int | None, int]:
    """(sequence, shortest acceptable sequence) of the workload. Without --seq-len: DEFAULT_SEQ_LEN,
    or the model's context when that is shorter (GPT-3: 2048). With 'max' the sequence is searched,
    never below that default: a longest sequence shorter than the workload's is no answer."""
    from trainplan.job import DEFAULT_SEQ_LEN
    from trainplan.models.checks import context_limit

    default = min(DEFAULT_SEQ_LEN, context_limit(model) or DEFAULT_SEQ_LEN)
    seq = seq_len(text) if text else default
    return seq, default if seq is None else seq


def with_from(args):
    """(args, (exporter module, Imported) or None): with --from, the file's model, sequence and
    global batch as the search's (a flag that would say them too is an error), and its instance,
    node count and stack where the flags leave them out."""
    import copy

    from trainplan.commands._layout_args import read_from

    if args.from_file is None:
        return args, None
    mod, im = read_from(args, ("model", "seq_len", "global_batch"))
    a = copy.copy(args)
    a.model, a.seq_len, a.global_batch = im.model, str(im.seq_len), str(im.global_batch)
    if not a.instance and im.instance:
        a.instance = (im.instance,)
    if a.stack is None:
        a.stack = im.layout.stack
    if a.nodes is None and a.max_nodes is None and not (a.days or a.budget):
        a.nodes = im.nodes or _nodes_for(im, a.instance)
    return a, (mod, im)


def _nodes_for(im, names) -> int:
    from trainplan.commands._layout_args import file_nodes
    from trainplan.hardware import find_node
    from trainplan.job import DEFAULT_INSTANCE

    return file_nodes(im, find_node(names[0] if names else DEFAULT_INSTANCE))


def yours_versus(args, found, result, ev):
    """The team's own layout (--from) estimated on its job, beside the chosen plan (search/versus.py)."""
    from trainplan.commands._layout_args import from_notes, imported_job
    from trainplan.hardware import find_node
    from trainplan.search.candidate import Candidate
    from trainplan.search.versus import Versus

    mod, im = found
    chosen = result.chosen
    node = find_node(im.instance) if im.instance else chosen.job.cluster.node
    job = imported_job(im, chosen.job.model, node, tokens=chosen.job.workload.tokens)
    e = ev.detail(job, im.layout)
    yours = Candidate(job, im.layout, ev.evaluate(job, im.layout, ev.memory(job, im.layout)), estimate=e)
    return Versus("; ".join(from_notes(args, mod, im)), yours, chosen, fits=e.fits)


def query(args):
    from trainplan.errors import TrainplanError
    from trainplan.models import hf_config, resolve
    from trainplan.models.checks import check_context
    from trainplan.precision import canonical, check_supported, recipe
    from trainplan.search import Query, parse_batch

    model = resolve(args.model)
    prio = priority(args)
    nodes = instances(args.instance, prio, args.price)
    precision = canonical(args.precision) if args.precision else None
    if precision:
        for n in nodes:
            check_supported(recipe(precision), n.gpu)
    if not 0 <= args.tolerance < 1:
        raise TrainplanError(f"--tolerance must be a fraction in [0, 1), got {args.tolerance}")
    if args.nodes and args.max_nodes:
        raise TrainplanError("give --nodes (a fixed count) or --max-nodes (a range), not both")
    stack_name, execution = stack_and_execution(args)
    from trainplan.stacks import check_experts, parse_assignment

    check_experts(execution, model.moe is not None)
    seq, min_seq = workload_seq(model, args.seq_len)
    if prio == "context":
        # The context priority always searches the sequence; the workload's (given or default) is
        # the shortest acceptable one (a plan that cannot reach it is no answer), not one to keep.
        seq = None
    # a length the model cannot take is refused here, not searched for
    check_context(model, seq or min_seq, args.allow_long_context)
    return Query(
        model=model, instances=nodes, nodes=args.nodes, max_nodes=args.max_nodes,
        seq_len=seq, min_seq_len=min_seq, allow_long_context=args.allow_long_context,
        batch=parse_batch(args.global_batch), tokens=args.tokens,
        precision=precision, priority=prio,
        tolerance=args.tolerance, budget_usd=args.budget, days=args.days, allow_risk=args.allow_risk, top=args.top,
        hf_config=hf_config(args.model), stack=stack_name, execution=execution,
        fixed_settings=frozenset(parse_assignment(t)[0] for t in args.settings),
    )


def progress_bar():
    """(callback, close) drawing a bar on stderr when the search runs past a second."""
    try:
        from trainplan.report.progress import Progress
    except ImportError:  # pragma: no cover - the report module is optional here
        return None, lambda: None
    bar = Progress(total=None, label="search", unit="count")

    def update(done: int, total: int, note: str) -> None:
        bar.total = total
        bar.update(1, note=note)

    return update, bar.close


# ---- the command ---------------------------------------------------------------------------------

def run(args) -> int:
    from trainplan.chosen import to_plan
    from trainplan.commands._common import print_json
    from trainplan.commands._profile_args import load_profiles
    from trainplan.fileio import write_atomic
    from trainplan.search import model_evaluator
    from trainplan.search.other_stack import search_runnable
    from trainplan.stacks import parse_assignment

    args, found = with_from(args)
    q = query(args)
    check_machine_gpu(args.machine, (n.gpu.name for n in q.instances))
    ev = model_evaluator(load_profiles(args.profile, args.machine))
    update, close = progress_bar()
    try:
        result = search_runnable(q, ev, update, stack_chosen=args.stack is not None,
                                 settings=dict(parse_assignment(t) for t in args.settings))
    finally:
        close()
    plan = to_plan(result, getattr(ev, "detail", None))
    versus = yours_versus(args, found, result, ev) if found else None
    verified = verify(result) if args.verify else None
    if args.out:
        write_atomic(args.out, plan.to_json())
    d = result.to_dict()
    d["plan"] = plan.to_dict()
    if verified is not None:
        d["verify"] = verified
    if versus is not None:
        d["yours"] = versus.to_dict()
    if args.json:
        print_json(d)
    else:
        print(render(result, plan))
        if versus is not None:
            print(render_versus(versus))
        if args.profile:
            print(profile_line(args.profile, args.machine, plan.job))
        if verified is not None:
            print(render_verify(verified))
        if args.out:
            print(f"plan written to {args.out}")
    write_html(args, "plan", plan)
    return 0


def verify(result) -> dict:
    """trace.verify of the chosen plan, a missing torch extra said as --verify's one-line error (the
    tracer is the layer above the planner, tests/core/test_layering.py: only a command calls it)."""
    from trainplan.errors import TrainplanError

    try:
        from trainplan.trace import verify as trace_verify
    except ImportError:
        raise TrainplanError("--verify needs torch: pip install 'trainplan[torch]'") from None
    try:
        return trace_verify(result.chosen.job, result.chosen.layout)
    except ImportError as e:
        raise TrainplanError(f"--verify needs the torch extra ({e.name} is missing): "
                             "pip install 'trainplan[torch]'") from None


# ---- terminal output (80 columns) ----------------------------------------------------------------

def render_verify(v: dict) -> str:
    """The traced-vs-analytic differences: one line per quantity the trace measured."""
    lines = ["verify (traced model code vs the analytic model):"]
    for k, d in (v.get("relative_difference") or {}).items():
        if d is not None:
            lines.append(f"  {k:<34} {d * 100:+6.1f}%")
    for note in v.get("notes") or ():
        lines += textwrap.wrap(str(note), WIDTH - 1, initial_indent="  note: ", subsequent_indent="    ")
    return "\n".join(lines)


def render_versus(v) -> str:
    """Your configuration beside the plan: the headline, what the plan changes, then term by term."""
    lines = ["", f"yours ({v.source}):", f"  {v.yours.layout.short()}"]
    lines += textwrap.wrap(v.headline(), WIDTH - 1, initial_indent="  ", subsequent_indent="    ")
    if v.changes:
        lines += textwrap.wrap("the plan changes: " + ", ".join(v.changes), WIDTH - 1, initial_indent="  ",
                               subsequent_indent="    ")
    lines.append(f"  {'':<34}{'yours':>14}{'plan':>14}{'change':>10}")
    def num(x, unit: str) -> str:
        if x is None:
            return "n/a"
        return f"{x:.1%}" if unit == "fraction" else f"{x:,.0f}" if abs(x) >= 1000 else f"{x:,.3g}"

    for r in v.rows:
        ch = "" if r.change is None else f"{r.change:+.1%}"
        if r.change is not None and abs(r.change) >= 10:
            ch = f"{r.change + 1:.0f}x"
        unit = "" if r.unit in ("fraction", "tokens/s") else f" ({r.unit})"
        lines.append(f"  {(r.what + unit)[:34]:<34}{num(r.yours, r.unit):>14}{num(r.plan, r.unit):>14}{ch:>10}")
    return "\n".join(lines)


def render(result, plan) -> str:
    """The plan as `trainplan report` prints it (report/summary.py), and what the search did."""
    from trainplan.report.summary import fit_lines, plan_lines
    from trainplan.report.terminal import use_color

    s = result.stats
    lines = plan_lines(plan, color=use_color(), priority=result.query.priority)
    lines.append(f"searched {s.counts} node counts, {s.meshes} meshes, {s.fits_calls} memory checks, "
                 f"{s.evaluate_calls} estimates in {s.seconds:.2f} s")
    return "\n".join(fit_lines(lines))
