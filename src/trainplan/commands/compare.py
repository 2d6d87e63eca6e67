"""`trainplan compare --model M --instances a,b,c [--tokens N]`: what each instance type gives.

Per instance type: the fewest nodes that fit, the throughput plan on those nodes (largest
micro-batch, tokens/s), the longest sequence that plan's layout holds at micro-batch 1, dollars
per billion tokens and days to the token budget. This is how a team sees what Blackwell changes
against Hopper and Ampere.
"""

from __future__ import annotations

from trainplan.commands._profile_args import add_profile_arguments, check_machine_gpu
from trainplan.report.cli import add_html_argument, write_html

NAME = "compare"
HELP = "compare instance types for one model: nodes needed, batch, sequence, tokens/s, cost"

DEFAULT_INSTANCES = "ml.p6-b200.48xlarge,ml.p5en.48xlarge,ml.p5.48xlarge,ml.p4de.24xlarge"


def add_arguments(p) -> None:
    from trainplan.commands._common import positive_int, tokens
    from trainplan.parsing import comma_list

    p.add_argument("--model", default="llama-3.1-70b", help="catalog name or HF config.json path")
    p.add_argument("--instances", type=comma_list, default=DEFAULT_INSTANCES, help="comma list of instance types")
    p.add_argument("--tokens", type=tokens, default=0, help="token budget, e.g. 15T, 300B")
    p.add_argument("--seq-len", type=positive_int, default=8192)
    p.add_argument("--allow-long-context", action="store_true",
                   help="a RoPE model past its max_position_embeddings")
    p.add_argument("--global-batch", default=None, help="sequences per step: N or LO:HI")
    p.add_argument("--max-nodes", type=positive_int, default=64,
                   help="give up on an instance type past this many nodes")
    add_profile_arguments(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_html_argument(p)


def compare_one(model, node, args, ev) -> dict:
    from trainplan.errors import TrainplanError
    from trainplan.search import Counting, Query, parse_batch, search
    from trainplan.search.engine import longest_seq

    q = Query(model, (node,), max_nodes=args.max_nodes, fewest_nodes=True, seq_len=args.seq_len,
              batch=parse_batch(args.global_batch), tokens=args.tokens, priority="throughput")
    row = {"instance": node.name, "gpu": node.gpu.name, "gpus_per_node": node.gpus_per_node}
    try:
        r = search(q, ev)
    except TrainplanError as e:
        return {**row, "fits": False, "why": str(e)}
    c = r.chosen
    counting = ev if isinstance(ev, Counting) else Counting(ev)
    return {
        **row,
        "fits": True,
        "nodes": c.nodes,
        "layout": c.layout.short(),
        "micro_batch": c.layout.micro_batch,
        # the chosen mesh with full checkpointing: how far the sequence can grow on these nodes
        "longest_seq_len": longest_seq(counting, c.job, c.layout.with_(ac="full", ac_layers=0)),
        "tokens_per_s": c.tokens_per_s,
        "tokens_per_s_per_gpu": c.tokens_per_s_per_gpu,
        "mfu": c.metrics.mfu,
        **c.cost(args.tokens).to_dict(),  # costs/cost.py: per million tokens, hours
    }


def run(args) -> int:
    from trainplan.commands._common import print_json
    from trainplan.commands.plan import evaluator
    from trainplan.hardware import find_node
    from trainplan.models import resolve
    from trainplan.models.checks import check_context

    model = resolve(args.model)
    check_context(model, args.seq_len, args.allow_long_context)
    nodes = [find_node(n) for n in args.instances]
    check_machine_gpu(args.machine, (n.gpu.name for n in nodes))
    ev = evaluator(args.profile, args.machine) if args.machine else evaluator(args.profile)
    rows = [compare_one(model, n, args, ev) for n in nodes]
    d = {"model": model.name, "seq_len": args.seq_len, "tokens": args.tokens, "instances": rows}
    if args.json:
        print_json(d)
    else:
        from trainplan.report.summary import compare_table
        from trainplan.report.terminal import use_color

        print(compare_table(d, color=use_color()))
    write_html(args, "compare", d)
    return 0
