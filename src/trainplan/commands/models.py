"""`trainplan models [--json]`: the built-in model catalog, one line per model."""

from __future__ import annotations

from typing import TYPE_CHECKING

# What run() needs is imported there: `trainplan --help` reads this module for NAME and HELP alone (cli.py).
if TYPE_CHECKING:
    from trainplan.models import ModelSpec

NAME = "models"
HELP = "list the built-in model catalog (layers, hidden, total and active parameters, context)"

_B = 1e9
ACTIVE_NOTE = "active: all but the routed experts a token skips (whole embedding counted)"


def add_arguments(p) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output")


def summary(name: str, m: ModelSpec) -> dict:
    from trainplan.models import count_params

    c = count_params(m)
    return {
        "name": name,
        "model_type": m.model_type,
        "num_layers": m.num_layers,
        "hidden_size": m.hidden_size,
        "params_total": c.total,
        "params_active": c.active,
        "context_length": m.max_position_embeddings,
        "moe": m.moe is not None,
        "source": m.source,
    }


def table(rows: list[dict]) -> str:
    """An 80-column table; parameter counts in billions (1e9)."""
    w = max([16] + [len(r["name"]) for r in rows])  # the longest name (qwen3-next-80b-a3b) sets the column
    head = (f"{'name':<{w}} {'type':<11} {'layers':>6} {'hidden':>6} "
            f"{'total B':>8} {'active B':>8} {'context':>8}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['name']:<{w}} {r['model_type']:<11} {r['num_layers']:>6} {r['hidden_size']:>6} "
            f"{r['params_total'] / _B:>8.2f} {r['params_active'] / _B:>8.2f} "
            f"{r['context_length']:>8}"
        )
    return "\n".join(lines)


def run(args) -> int:
    from trainplan.commands._common import print_json
    from trainplan.models import catalog

    rows = [summary(name, m) for name, m in catalog().items()]
    if args.json:
        print_json(rows)
    else:
        print(table(rows))
        print(f"\n{ACTIVE_NOTE}")
    return 0
