"""Cost per hour, dollars and hours to a token budget (costs/cost.py)."""

import pytest

from trainplan.costs.cost import cost
from trainplan.hardware import Cluster, find_node, with_price


def test_hours_and_dollars_to_a_token_budget():
    c = Cluster(with_price(find_node("ml.p5.48xlarge"), 50.0), 4)
    x = cost(c, tokens_per_s=1e6, budget_tokens=int(3.6e12))
    assert x.cost_per_hour == 200.0
    assert x.hours_to_tokens == pytest.approx(1000.0)
    assert x.usd_to_tokens == pytest.approx(200_000.0)
    assert x.usd_per_million_tokens == pytest.approx(200.0 / 3600)
    assert x.price_kind == "user override"


def test_no_budget_or_no_price_gives_none():
    assert cost(Cluster(find_node("ml.p5.48xlarge"), 1), 1e5, 0).hours_to_tokens is None
    unpriced = Cluster(find_node("dgx-h100"), 1)
    x = cost(unpriced, 1e5, 10**9)
    assert x.cost_per_hour is None and x.usd_to_tokens is None and x.hours_to_tokens is not None
