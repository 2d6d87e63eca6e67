"""The flags that spell one explicit job and layout, shared by `fit`, `estimate` (and any command
that takes a layout by hand), and their one parse into a checked (Job, Layout); and the stack flags
(--stack, --set) that `plan` shares with them."""

from __future__ import annotations


def add_stack_arguments(p) -> None:
    from trainplan.stacks import DEFAULT_STACK, SETTINGS, stacks

    p.add_argument("--stack", default=None,
                   help=f"software that runs the layout: {', '.join(stacks())} (default {DEFAULT_STACK}); "
                        "its preset gives the execution settings")
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


def add_layout_arguments(p) -> None:
    from trainplan.commands._common import positive_int
    from trainplan.layout import AC_MODES, PP_SCHEDULES, SHARDING
    from trainplan.precision import DEFAULT, names

    p.add_argument("--model", default="llama-3.1-70b", help="catalog name or HF config.json path")
    p.add_argument("--instance", default="ml.p6-b200.48xlarge")
    p.add_argument("--nodes", type=positive_int, default=None,
                   help="default: the layout's GPUs with --layout, else 1")
    p.add_argument("--seq-len", type=positive_int, default=8192)
    p.add_argument("--allow-long-context", action="store_true",
                   help="a RoPE model past its max_position_embeddings")
    p.add_argument("--global-batch", type=positive_int, default=None,
                   help="sequences per step (default: micro-batch x data-parallel degree)")
    p.add_argument("--layout", default=None, metavar="TEXT",
                   help="the whole layout as `plan` and `estimate` print it (e.g. 'fp8_tensorwise ac=none mb=1 "
                        "ga=1 dp=1x8(fsdp) fp8_allgather=true'); replaces the layout flags below")
    first = len(p._actions)
    p.add_argument("--precision", default=DEFAULT, help=", ".join(names()))
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
    p.add_argument("--pp-first-stage-layers", type=int, default=0,
                   help="layers on the first pipeline stage (Megatron --decoder-first-pipeline-num-layers)")
    p.add_argument("--pp-last-stage-layers", type=int, default=0,
                   help="layers on the last pipeline stage (Megatron --decoder-last-pipeline-num-layers)")
    p.add_argument("--pp-embedding-in-split", action="store_true",
                   help="the embedding counts as a layer in the pipeline split (Megatron --account-for-embedding-...)")
    p.add_argument("--pp-loss-in-split", action="store_true",
                   help="the output layer and loss count as a layer in the pipeline split")
    p.add_argument("--cp", type=positive_int, default=1)
    p.add_argument("--ep", type=positive_int, default=1)
    p.add_argument("--etp", type=positive_int, default=None,
                   help="expert tensor parallel size, a divisor of tp (default: the stack's; layout.expert_groups)")
    p.add_argument("--chunked-loss", action="store_true", help="cross-entropy over vocabulary chunks")
    p.add_argument("--compiled-loss", action="store_true", help="the loss is compiled with the model (torch.compile)")
    p.add_argument("--fp8-allgather", action="store_true", help="FSDP all-gathers fp8 weights")
    p.add_argument("--grad-reduce-bf16", action="store_true",
                   help="gradients reduced and kept in bf16 (NeMo performance recipes), not fp32")
    p.add_argument("--optimizer-offload", action="store_true", help="optimizer states in host memory")
    p.add_argument("--no-flash-attention", action="store_true", help="materialised s x s attention scores")
    p.add_argument("--torch-compile", action="store_true")
    add_stack_arguments(p)
    # What --layout replaces: a flag among these that is not at its default conflicts with it.
    p.set_defaults(_layout_flags={a.dest: a.default for a in p._actions[first:]})


def job_and_layout(args, *, tokens: int = 0, price: float | None = None):
    """(job, layout) from the flags. A product of degrees that does not divide the GPU count, and
    every other impossible layout, is check_layout's one-line error, which names the dimension that
    is wrong (tp vs heads) before the GPU-count product."""
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
    layout = Layout(
        precision=canonical(args.precision), ac=args.ac, ac_layers=args.ac_layers, micro_batch=args.micro_batch,
        grad_accum=gb // (args.micro_batch * dp), dp_replicate=rep, dp_shard=shard, sharding=args.sharding,
        tp=args.tp, sequence_parallel=not args.no_sequence_parallel, pp=args.pp,
        pp_schedule=args.pp_schedule or ("interleaved" if args.vp > 1 else "1f1b"), vp=args.vp,
        pp_first_stage_layers=args.pp_first_stage_layers, pp_last_stage_layers=args.pp_last_stage_layers,
        pp_embedding_in_split=args.pp_embedding_in_split, pp_loss_in_split=args.pp_loss_in_split,
        cp=args.cp, ep=args.ep, etp=args.etp, fp8_allgather=args.fp8_allgather, chunked_loss=args.chunked_loss,
        optimizer_offload=args.optimizer_offload, flash_attention=not args.no_flash_attention,
        torch_compile=args.torch_compile, compiled_loss=args.compiled_loss,
        grad_reduce_fp32=False if args.grad_reduce_bf16 else None, stack=stack_name, execution=execution,
    )
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

    given = [k for k, default in args._layout_flags.items() if getattr(args, k) != default]
    if given:
        raise TrainplanError(f"--layout holds the whole layout; leave out --{given[0].replace('_', '-')} "
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
