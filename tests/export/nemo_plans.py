"""Plans of the known-answer suite costed for the stack nemo (NeMo 2 and the HyperPod recipes run it):
the three queries of megatron_plans.py (mixtral-8x22b on 6 p5 nodes, DeepSeek-V3 and Llama 3.1 405B
on p6-b200), made by `trainplan plan --stack nemo` as a user would."""

import contextlib
import io
from pathlib import Path

from megatron_plans import QUERIES

from trainplan.cli import main
from trainplan.plan import Plan, load_plan
from trainplan.stacks import stacks

# the stack whose entry names the NeMo targets (stacks.toml `exporters`), not spelt here
STACK = next(s.name for s in stacks().values() if "hyperpod" in s.exporters)


def make_plans(folder: Path) -> dict[str, Plan]:
    out = {}
    for name, argv in QUERIES.items():
        path = folder / f"{name}.json"
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["plan", *argv, "--stack", STACK, "--out", str(path)]) == 0
        out[name] = load_plan(path)
    return out
