"""Cost per token has one definition (costs/cost.py): the search's candidates, the estimate in
plan.json and every printed view agree, units converted only where they are shown."""

import pytest

from trainplan.costs.cost import cost
from trainplan.hardware import find_node
from trainplan.models import resolve
from trainplan.report.terminal import days, per_billion
from trainplan.search import Query, search


@pytest.fixture(scope="module")
def result():
    q = Query(resolve("llama-3.1-8b"), (find_node("ml.p5.48xlarge"),), nodes=2, seq_len=4096,
              tokens=300_000_000_000, priority="throughput")
    return search(q)


def test_candidates_and_their_estimates_price_the_same(result):
    for c in (result.chosen, *result.runners_up, *result.pareto):
        tokens = result.query.tokens
        assert c.cost(tokens) == c.estimate.cost  # the same Cost, field for field
        assert c.to_dict(tokens)["usd_per_million_tokens"] == c.estimate.cost.usd_per_million_tokens
        assert c.usd_for(tokens) == c.estimate.cost.usd_to_tokens


def test_display_units_are_conversions_of_the_one_definition(result):
    c = result.chosen.estimate.cost
    price = find_node("ml.p5.48xlarge").price_per_hour * 2
    tps = result.chosen.tokens_per_s
    assert c == cost(result.chosen.job.cluster, tps, result.query.tokens)
    assert per_billion(c.usd_per_million_tokens) == pytest.approx(price / 3600 / tps * 1e9)
    assert days(c.hours_to_tokens) == pytest.approx(result.query.tokens / tps / 86400)


def test_a_candidates_throughput_band_is_its_estimates(result):
    # one rule for the band (Profile.throughput_error): what plan.json's candidate shows is the
    # estimate's per-GPU band over every GPU, not a second error read from the profile
    for c in (result.chosen, *result.runners_up):
        low, high = c.to_dict(result.query.tokens)["tokens_per_s_band"]
        n = c.job.cluster.num_gpus
        assert (low, high) == pytest.approx((c.estimate.band[0] * n, c.estimate.band[1] * n))
        assert low < c.tokens_per_s < high
