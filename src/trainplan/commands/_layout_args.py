"""The flags that spell one explicit job and layout, shared by `fit`, `estimate` (and any command
that takes a layout by hand), and their one parse into a checked (Job, Layout); and the stack flags
(--stack, --set) that `plan` shares with them."""

from __future__ import annotations


def add_stack_arguments(p) -> None:
    from trainplan.commands._fields import add_fields
    from trainplan.layout import Layout
    from trainplan.stacks import SETTINGS

    add_fields(p, Layout, ("stack",))
    p.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                   help=f"override one execution setting of the stack (repeatable): {', '.join(SETTINGS)}")


def stack_and_execution(args):
    """(stack name, Execution) from --stack and --set; unknown names, keys and values are one-line errors."""
    from trainplan.stacks import DEFAULT_STACK

    name = args.stack or DEFAULT_STACK
    return name, execution_of(name, args.settings)


def execution_of(name: str, settings) -> object:
    """The stack's preset with the --set assignments (`settings`, KEY=VALUE texts) applied."""
    from trainplan.stacks import parse_assignment, stack

    return stack(name).execution.with_(**dict(parse_assignment(text) for text in settings))


# The layout flags: every Layout field that declares one, but the stack's (add_stack_arguments)
def _layout_fields() -> tuple[str, ...]:
    from trainplan.commands._fields import flagged
    from trainplan.layout import Layout

    return tuple(n for n in flagged(Layout) if n != "stack")


def add_layout_arguments(p) -> None:
    from trainplan.commands._common import positive_int
    from trainplan.commands._fields import add_fields
    from trainplan.job import Job, Workload
    from trainplan.layout import Layout

    add_fields(p, Job, ("model", "cluster"))
    p.add_argument("--nodes", type=positive_int, default=None,
                   help="default: the layout's GPUs with --layout, else 1")
    add_fields(p, Workload, ("seq_len", "long_context", "global_batch"))
    p.add_argument("--layout", default=None, metavar="TEXT",
                   help="the whole layout as `plan` and `estimate` print it (e.g. 'fp8_tensorwise ac=none mb=1 "
                        "ga=1 dp=1x8(fsdp) fp8_allgather=true'); replaces the layout flags below")
    first = len(p._actions)
    add_fields(p, Layout, _layout_fields())
    add_stack_arguments(p)
    # What --layout replaces: a flag among these that is not at its default conflicts with it.
    p.set_defaults(_layout_flags={a.dest: (a.option_strings[0], a.default) for a in p._actions[first:]})


def job_and_layout(args, *, tokens: int = 0, price: float | None = None):
    """(job, layout) from the flags. A product of degrees that does not divide the GPU count, and
    every other impossible layout, is check_layout's one-line error, which names the dimension that
    is wrong (tp vs heads) before the GPU-count product."""
    from trainplan.commands._fields import field_values
    from trainplan.errors import TrainplanError
    from trainplan.hardware import Cluster, find_node, with_price
    from trainplan.job import Job, Workload
    from trainplan.layout import Layout, check_layout
    from trainplan.models import resolve
    from trainplan.models.checks import beyond_context, check_context
    from trainplan.precision import canonical

    node = find_node(args.instance)
    if price is not None:
        node = with_price(node, price)
    model = resolve(args.model)
    check_context(model, args.seq_len, args.allow_long_context)
    if args.layout is not None:
        return _from_text(args, node, model, tokens)
    cluster = Cluster(node, args.nodes or 1)
    from trainplan.supports import trainer_fields

    stack_name, execution = stack_and_execution(args)
    fixed = args.tp * args.pp * args.cp * args.dp_replicate
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
    values = field_values(args, Layout, _layout_fields())
    layout = Layout(**{
        **values, "precision": canonical(values["precision"]), "grad_accum": gb // (args.micro_batch * dp), "dp_replicate": rep, "dp_shard": shard,
        "pp_schedule": args.pp_schedule or ("interleaved" if args.vp > 1 else "1f1b"),
        "stack": stack_name, "execution": execution,
    })
    layout = layout.with_(**trainer_fields(stack_name, args.tp))  # costed as the trainer runs tp
    job = Job(model, cluster, Workload(seq_len=args.seq_len, global_batch=gb, tokens=tokens,
                                             long_context=beyond_context(model, args.seq_len)))
    check_layout(job, layout)
    return job, layout


def _from_text(args, node, model, tokens: int):
    """(job, layout) from --layout: the layout as printed, the job's batch and nodes from it."""
    from trainplan.errors import TrainplanError
    from trainplan.hardware import Cluster
    from trainplan.job import Job, Workload
    from trainplan.layout import check_layout, parse_layout
    from trainplan.models.checks import beyond_context

    given = [flag for k, (flag, default) in args._layout_flags.items() if getattr(args, k) != default]
    if given:
        raise TrainplanError(f"--layout holds the whole layout; leave out {given[0]} "
                             "(or drop --layout and give the layout flags)")
    layout = parse_layout(args.layout)
    nodes = args.nodes or max(1, -(-layout.num_gpus // node.gpus_per_node))
    gb = layout.micro_batch * layout.grad_accum * layout.dp
    if args.global_batch is not None and args.global_batch != gb:
        raise TrainplanError(f"--global-batch {args.global_batch} differs from the layout's "
                             f"mb*ga*dp = {gb}; leave it out with --layout")
    job = Job(model, Cluster(node, nodes), Workload(seq_len=args.seq_len, global_batch=gb, tokens=tokens,
                                                   long_context=beyond_context(model, args.seq_len)))
    check_layout(job, layout)
    return job, layout


# ---- --from: a framework's own config as the job and layout --------------------------------------

FROM_HELP = ("a framework's own config (a torchtitan 0.3.0 config .py, a Megatron-LM argument list .txt or "
             "launch script .sh): its model, sequence, global batch and layout")


def add_from_argument(p, what: str = "replaces --model, --seq-len, --global-batch and the layout flags") -> None:
    p.add_argument("--from", dest="from_file", default=None, metavar="FILE", help=f"{FROM_HELP}; {what}")


def read_from(args, replaced: tuple[str, ...]):
    """(exporter module, Imported) of --from FILE; a flag among `replaced` (dests) given beside it is
    a one-line error: the file already says it, and two answers to one question are no answer."""
    from trainplan.errors import TrainplanError
    from trainplan.export import read_file

    given = [k for k in replaced if getattr(args, k, None) != args._parser.get_default(k)]
    if given:
        raise TrainplanError(f"--from {args.from_file} holds the model, batch and layout; leave out "
                             f"--{given[0].replace('_', '-')}")
    return read_file(args.from_file)


def from_notes(args, mod, im) -> list[str]:
    return [f"read {args.from_file} as {mod.FRAMEWORK} {mod.RELEASE}", *im.notes]


def file_nodes(im, node) -> int:
    """The nodes of an Imported configuration on `node`: the file's, else the nodes its GPUs fill."""
    return im.nodes or max(1, -(-im.layout.num_gpus // node.gpus_per_node))


def imported_job(im, model, node, *, tokens: int = 0, nodes: int | None = None):
    """The Job an Imported configuration describes for `model` on `node` (`nodes`, else
    file_nodes), its layout checked as the flags' layout is: the one reading of --from's job that
    estimate, fit, plan and compare share."""
    from trainplan.hardware import Cluster
    from trainplan.job import Job, Workload
    from trainplan.layout import check_layout
    from trainplan.models.checks import beyond_context

    job = Job(model, Cluster(node, nodes or file_nodes(im, node)),
              Workload(seq_len=im.seq_len, global_batch=im.global_batch, tokens=tokens,
                       long_context=beyond_context(model, im.seq_len)))
    check_layout(job, im.layout)
    return job


def job_and_layout_from(args, *, tokens: int = 0, price: float | None = None):
    """(job, layout) of --from: the file's model, sequence, batch and layout on the file's instance
    (or --instance), with --nodes, the file's nodes, or the nodes its GPUs fill; checked as the
    flags' layout is. args.from_notes says what was read and what was taken by convention."""
    from trainplan.hardware import find_node, with_price
    from trainplan.models import resolve
    from trainplan.models.checks import check_context

    mod, im = read_from(args, ("model", "seq_len", "global_batch", "layout", *args._layout_flags))
    node = find_node(im.instance or args.instance)
    if price is not None:
        node = with_price(node, price)
    model = resolve(im.model)
    check_context(model, im.seq_len, args.allow_long_context)
    job = imported_job(im, model, node, tokens=tokens, nodes=args.nodes)
    args.from_notes = from_notes(args, mod, im)
    return job, im.layout
