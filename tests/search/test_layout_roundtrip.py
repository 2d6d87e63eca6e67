"""Layout strings round-trip: every plan of the known-answer suite (test_known_answers.py) prints a
layout that parse_layout reads back to the same Layout, and `trainplan estimate --layout` on the
printed string reproduces the plan. The printed layout once hid fp8_allgather, and the estimate
of the printed layout said DOES NOT FIT."""

import json

import pytest
from test_known_answers import P4D, P5, P6

from trainplan.estimate import estimate
from trainplan.layout import parse_layout
from trainplan.models import resolve
from trainplan.search import Query, search
from trainplan.search.evaluator import ModelEvaluator

QUERIES = {
    "8b-p5": lambda: Query(resolve("llama-3.1-8b"), P5, nodes=1),
    "70b-p6-bf16": lambda: Query(resolve("llama-3.1-70b"), P6, nodes=1, precision="bf16"),
    "405b-p6": lambda: Query(resolve("llama-3.1-405b"), P6),
    "8b-p4d": lambda: Query(resolve("llama-3.1-8b"), P4D, nodes=1),
    "8b-p6": lambda: Query(resolve("llama-3.1-8b"), P6, nodes=1),
    "8b-p6-context": lambda: Query(resolve("llama-3.1-8b"), P6, nodes=1, seq_len=None, priority="context"),
    "70b-p5-communication": lambda: Query(resolve("llama-3.1-70b"), P5, max_nodes=8, priority="communication"),
    # MoE with tp > 1 on a stack that runs both expert foldings: plans state etp (6 nodes: on 4 every
    # plan that fits is an OOM risk under the p90 memory band)
    "mixtral-p5-megatron": lambda: Query(resolve("mixtral-8x22b"), P5, nodes=6, stack="megatron"),
}


@pytest.fixture(scope="module")
def results():
    return {name: search(q()) for name, q in QUERIES.items()}


def test_every_plan_parses_back_to_its_layout_and_estimate(results):
    profile = ModelEvaluator().profile
    options = set()
    for r in results.values():
        for c in (r.chosen, *r.runners_up, *r.pareto):
            text = c.layout.short()
            assert parse_layout(text) == c.layout, text
            e = estimate(c.job, parse_layout(text), profile)
            assert e.fits and e.tokens_per_s == pytest.approx(c.tokens_per_s, rel=1e-12)
            options |= {t.split("=")[0] for t in text.split()[5:] if "=" in t}
    assert "fp8_allgather" in options  # the field the old string hid is among them
    assert "etp" in options  # the expert folding of the MoE plans


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_estimate_of_the_printed_layout_reproduces_the_chosen_plan(cli, results, name):
    c = results[name].chosen
    code, out, err = cli("estimate", "--json", "--model", c.job.model.name, "--instance", c.instance,
                         "--seq-len", str(c.seq_len), "--layout", c.layout.short())
    assert code == 0, err
    d = json.loads(out)
    assert d["nodes"] == c.nodes and d["estimate"]["binding"] != "memory"
    assert d["estimate"]["tokens_per_s"] == pytest.approx(c.tokens_per_s, rel=1e-12)
    assert parse_layout(c.layout.short()).to_dict() == d["layout"]
