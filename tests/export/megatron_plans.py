"""Plans of the known-answer suite whose stack is megatron, made by `trainplan plan` as a user would:
the MoE plan of tests/search/test_layout_roundtrip.py (mixtral-8x22b on 6 p5 nodes), the issue #22
DeepSeek-V3 plan (p6-b200, up to 32 nodes) and Llama 3.1 405B on up to 16 p6-b200 nodes (dense:
tp, pp with virtual stages and uneven splits, zero1 and fsdp)."""

import contextlib
import io
from pathlib import Path

from trainplan.cli import main
from trainplan.plan import Plan, load_plan

QUERIES = {
    "mixtral-p5": ["--model", "mixtral-8x22b", "--instance", "ml.p5.48xlarge", "--nodes", "6"],
    "deepseek-v3-p6": ["--model", "deepseek-v3", "--instance", "ml.p6-b200.48xlarge", "--max-nodes", "32"],
    "llama-405b-p6": ["--model", "llama-3.1-405b", "--instance", "ml.p6-b200.48xlarge", "--max-nodes", "16"],
}


def make_plans(folder: Path) -> dict[str, Plan]:
    out = {}
    for name, argv in QUERIES.items():
        path = folder / f"{name}.json"
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["plan", *argv, "--stack", "megatron", "--out", str(path)]) == 0
        out[name] = load_plan(path)
    return out


def every_plan(plan: Plan) -> list[Plan]:
    """The chosen plan, its runners-up and its Pareto set, each as a plan of its own."""
    return [plan] + [Plan(a.job, a.layout, plan.train, a.estimate) for a in (*plan.runners_up, *plan.pareto)]
