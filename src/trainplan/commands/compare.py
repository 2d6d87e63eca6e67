"""`trainplan compare --model M --instances a,b,c [--tokens N] [--days D] [--budget USD]`: what each
instance type gives.

Per instance type, the node count and layout of the sizing rule (search/sizing.py, the one `plan
--days/--budget` uses): with --days the cheapest plan that trains --tokens within the deadline,
with --budget the fastest within the budget, with both the cheapest that meets both (and by how
much the nearest misses when none does); with neither, two rows: the cheapest plan (least dollars
per token) and the fastest within sizing.TOLERANCE of its dollars per token. Each row: the plan's
tokens/s, the longest sequence its mesh holds at micro-batch 1, dollars per billion tokens and days
to the token budget. This is how a team sees what Blackwell changes against Hopper and Ampere.

Instances are named as each cloud spells them (ml.p6-b200.48xlarge, a4-highgpu-8g,
Standard_ND128isr_GB200_v6); `--cloud aws|gcp|azure` keeps one cloud's (without --instances: every
instance the catalog rents there). Each row carries its price with the price's date and source, and
the goodput of its plan with checkpoints saved to the node's cloud storage (hardware/reliability.toml).
An instance whose cloud publishes no price gets its plans by GPU-hours and no dollars.
"""

from __future__ import annotations

from trainplan.commands._profile_args import add_profile_arguments, check_machine_gpu
from trainplan.report.cli import add_html_argument, write_html

# hardware/types.py CLOUDS, spelled here so that `--help` does not import the catalog
CLOUDS = ("aws", "gcp", "azure")

NAME = "compare"
HELP = "compare instance types for one model: nodes by cost, deadline or budget, tokens/s, cost"

DEFAULT_INSTANCES = "ml.p6-b200.48xlarge,ml.p5en.48xlarge,ml.p5.48xlarge,ml.p4de.24xlarge"


def add_arguments(p) -> None:
    from trainplan.commands._common import positive_int, positive_number
    from trainplan.commands._fields import add_fields
    from trainplan.commands._layout_args import add_from_argument
    from trainplan.job import Job, Workload
    from trainplan.parsing import comma_list
    from trainplan.search.query import DEFAULT_MAX_NODES

    add_fields(p, Job, ("model",))
    add_from_argument(p, "replaces --model, --seq-len and --global-batch; your layout on its own instance is a "
                         "row of the table")
    p.add_argument("--instances", type=comma_list, default=None,
                   help=f"comma list of instance types, as each cloud spells them (default: {DEFAULT_INSTANCES}; "
                        "with --cloud, every instance of that cloud)")
    p.add_argument("--cloud", choices=CLOUDS, default=None, help="only the instances rented on this cloud")
    add_fields(p, Workload, ("tokens",))
    p.add_argument("--days", type=positive_number, default=None,
                   help="deadline for --tokens: per instance, the cheapest plan that meets it")
    p.add_argument("--budget", type=positive_number, default=None,
                   help="USD cap for --tokens: per instance, the fastest plan within it")
    add_fields(p, Workload, ("seq_len", "long_context", "global_batch"), variants={"global_batch": "range"})
    p.add_argument("--max-nodes", type=positive_int, default=DEFAULT_MAX_NODES,
                   help="search up to this many nodes per instance type")
    add_profile_arguments(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_html_argument(p)


def _row(c, choice: str, sized, counting, tokens: int) -> dict:
    from trainplan.estimate import job_goodput
    from trainplan.search.engine import longest_seq

    g = job_goodput(c.job, c.layout, c.metrics.step_time_s)

    return {
        "choice": choice,
        "fits": True,
        "meets": sized.meets if choice == "chosen" else None,
        "miss": sized.miss() if choice == "chosen" else None,
        "nodes": c.nodes,
        "layout": c.layout.short(),
        "micro_batch": c.layout.micro_batch,
        # the chosen mesh with full checkpointing: how far the sequence can grow on these nodes
        "longest_seq_len": longest_seq(counting, c.job, c.layout.with_(ac="full", ac_layers=0)),
        "tokens_per_s": c.tokens_per_s,
        "tokens_per_s_per_gpu": c.tokens_per_s_per_gpu,
        "mfu": c.metrics.mfu,
        **c.cost(tokens).to_dict(),  # costs/cost.py: per million tokens, hours
        "goodput": g.goodput,
        "checkpoint_storage": g.storage,
    }


def price_head(node) -> dict:
    """Where an instance is rented and what its price is, with the price's date and source."""
    return {"cloud": node.cloud, "price_usd_per_hour": node.price_per_hour, "price_kind": node.price_kind,
            "price_date": node.price_date, "price_source": node.sources.get("price")}


def compare_one(model, node, args, ev) -> list[dict]:
    """The rows of one instance type: the sizing rule's choice, or (without --days and --budget)
    the cheapest plan and the fastest near its cost."""
    from trainplan.errors import TrainplanError
    from trainplan.search import Counting, Query, parse_batch, search

    q = Query(model, (node,), max_nodes=args.max_nodes, seq_len=args.seq_len, batch=parse_batch(args.global_batch),
              tokens=args.tokens, priority="cost", days=args.days, budget_usd=args.budget)
    head = {"instance": node.name, "gpu": node.gpu.name, "gpus_per_node": node.gpus_per_node, **price_head(node)}
    try:
        r = search(q, ev)
    except TrainplanError as e:
        return [{**head, "fits": False, "why": str(e)}]
    s, t = r.sizing, args.tokens
    counting = ev if isinstance(ev, Counting) else Counting(ev)
    if s.goal.sized:
        return [{**head, **_row(s.chosen, "chosen", s, counting, t)}]
    rows = [{**head, **_row(s.cheapest, "cheapest", s, counting, t)}]
    if s.fastest.tokens_per_s > s.cheapest.tokens_per_s:
        rows.append({**head, **_row(s.fastest, "fastest", s, counting, t)})
    return rows


def yours_row(model, found, args, ev, default_node) -> dict:
    """The row of the team's own layout (--from) on the file's instance (else the first of
    --instances) and node count, estimated by the same cost model as the others."""
    from trainplan.commands._layout_args import imported_job
    from trainplan.hardware import find_node
    from trainplan.search import Counting
    from trainplan.search.candidate import Candidate

    mod, im = found
    node = find_node(im.instance) if im.instance else default_node
    job = imported_job(im, model, node, tokens=args.tokens)
    counting = ev if isinstance(ev, Counting) else Counting(ev)
    head = {"instance": node.name, "gpu": node.gpu.name, "gpus_per_node": node.gpus_per_node, **price_head(node),
            "source": f"{args.from_file} ({mod.FRAMEWORK} {mod.RELEASE})"}
    if not counting.fits(job, im.layout):
        return {**head, "choice": "yours", "fits": False,
                "why": f"your layout ({im.layout.short()}) does not fit {node.gpu.name} memory"}
    c = Candidate(job, im.layout, counting.evaluate(job, im.layout))
    return {**head, **_row(c, "yours", None, counting, args.tokens)}


def instances(names: list[str] | None, cloud: str | None) -> list:
    """The node types compared: `names` (default DEFAULT_INSTANCES, or with `cloud` every rented
    instance of that cloud), kept to `cloud`'s when it is given."""
    from trainplan.errors import TrainplanError
    from trainplan.hardware import find_node, nodes

    if names is None and cloud is not None:
        return [n for n in nodes().values() if n.cloud == cloud]
    found = [find_node(n) for n in (names or DEFAULT_INSTANCES.split(","))]
    if cloud is None:
        return found
    kept = [n for n in found if n.cloud == cloud]
    if not kept:
        raise TrainplanError(f"--cloud {cloud}: none of {', '.join(n.name for n in found)} is rented on {cloud}; "
                             f"leave out --instances to compare every {cloud} instance")
    return kept


def run(args) -> int:
    from trainplan.commands._common import print_json
    from trainplan.commands._profile_args import load_profiles
    from trainplan.models import resolve
    from trainplan.models.checks import check_context
    from trainplan.search import model_evaluator
    from trainplan.search.sizing import TOLERANCE, Goal

    goal = Goal(args.tokens, args.days, args.budget)
    goal.check()
    found = None
    if args.from_file is not None:
        import copy

        from trainplan.commands._layout_args import read_from

        found = read_from(args, ("model", "seq_len", "global_batch"))
        args = copy.copy(args)
        args.model, args.seq_len, args.global_batch = found[1].model, found[1].seq_len, str(found[1].global_batch)
    model = resolve(args.model)
    check_context(model, args.seq_len, args.allow_long_context)
    nodes = instances(args.instances, args.cloud)
    check_machine_gpu(args.machine, (n.gpu.name for n in nodes))
    ev = model_evaluator(load_profiles(args.profile, args.machine))
    rows = [row for n in nodes for row in compare_one(model, n, args, ev)]
    if found is not None:
        rows.insert(0, yours_row(model, found, args, ev, nodes[0]))
    d = {"model": model.name, "seq_len": args.seq_len, "tokens": args.tokens, "days": args.days, "cloud": args.cloud,
         "budget_usd": args.budget, "max_nodes": args.max_nodes, "tolerance": TOLERANCE,
         "rule": (f"per instance: {goal.describe()} (search/sizing.py)" if goal.sized else
                  f"per instance: the cheapest plan, and the fastest within {TOLERANCE:.0%} of its $/token"),
         "instances": rows}
    if args.json:
        print_json(d)
    else:
        from trainplan.report.summary import compare_table
        from trainplan.report.terminal import use_color

        print(compare_table(d, color=use_color()))
    write_html(args, "compare", d)
    return 0
