"""The reason for the chosen expert-parallel degree names the all-to-all's bytes and where they go
(search/reasons.ep_reason, from the estimate's communication ledger)."""

import re

from trainplan.hardware import find_node
from trainplan.models import resolve
from trainplan.search import Query, search
from trainplan.stacks import SETTINGS

P6 = (find_node("ml.p6-b200.48xlarge"),)


def test_moe_plan_says_what_its_ep_sends_and_over_which_link():
    # two nodes: plans with another ep fit there too, so the reason compares two ledgers
    r = search(Query(resolve("mixtral-8x22b"), P6, nodes=2))
    lines = [x for x in r.reasons if x.startswith(f"ep={r.chosen.layout.ep}")]
    assert len(lines) == 1
    gb = [float(v) for v in re.findall(r"([\d.]+) GB over NVLink", lines[0])]
    assert gb and all(v > 0 for v in gb if v)  # numbers from the ledger, not a template
    est = r.chosen.estimate
    nv = sum(e.bytes - e.network_bytes for e in est.comm if e.dimension == "ep")
    if r.chosen.layout.ep > 1:
        assert f"{nv / 1e9:.1f} GB over NVLink" in lines[0]


def test_dense_plan_has_no_ep_reason():
    r = search(Query(resolve("llama-3.1-8b"), P6, nodes=1))
    assert not any(x.startswith("ep=") for x in r.reasons)


def test_moe_plan_with_tp_says_what_its_etp_trades_in_numbers():
    # Megatron runs both foldings; the reason compares the chosen etp with the other on the same tp.
    # (Megatron's preset, every setting fixed: with its overlaps chosen, this plan has tp = 1.)
    r = search(Query(resolve("mixtral-8x22b"), (find_node("ml.p5.48xlarge"),), nodes=6, stack="megatron",
                     fixed_settings=frozenset(SETTINGS)))
    L = r.chosen.layout
    assert L.tp > 1 and L.etp is not None and L.tp % L.etp == 0  # the search states the folding it costed
    (line,) = [x for x in r.reasons if x.startswith(f"etp={L.etp}")]
    est = r.chosen.estimate
    nv = sum(e.bytes - e.network_bytes for e in est.comm if e.dimension == "ep")
    assert f"expert exchange {nv / 1e9:.1f} GB over NVLink" in line and f"{est.time.dp:.2f} s exposed" in line
    assert re.search(r"vs the best etp=\d+ \(expert exchange [\d.]+ GB", line)
