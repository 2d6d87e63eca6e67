"""The node-count rule (search/sizing.py) on hand-made plans whose speed and price are chosen so
that each branch of the rule has one right answer: cheapest within a deadline, fastest within a
budget, cheapest meeting both, the nearest miss, and throughput's efficient node count."""

import pytest

from trainplan.errors import TrainplanError
from trainplan.hardware import find_node
from trainplan.hardware.types import Cluster
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.models import resolve
from trainplan.search import Metrics
from trainplan.search.candidate import Candidate
from trainplan.search.sizing import (
    TOLERANCE,
    Goal,
    choose,
    count_note,
    efficient_count,
    meets,
    probe_counts,
    rank,
    skips,
)

NODE = find_node("ml.p6-b200.48xlarge")
TOKENS = 10**12


def plan(nodes: int, tokens_per_s_per_gpu: float, node=NODE) -> Candidate:
    job = Job(resolve("llama-3.1-8b"), Cluster(node, nodes), Workload(8192, 512, TOKENS))
    tps = tokens_per_s_per_gpu * nodes * node.gpus_per_node
    m = Metrics(tokens_per_s=tps, step_time_s=1.0, memory_bytes=1.0, memory_high_bytes=1.0, capacity_bytes=2.0,
                inter_node_bytes_per_token=0.0, gpu_bytes_per_token=0.0, mfu=tokens_per_s_per_gpu / 10_000,
                binding="compute")
    return Candidate(job, Layout(dp_shard=nodes * node.gpus_per_node), m)


# per-GPU speed falls as nodes are added, so dollars per token rise with the count and days fall
PLANS = [plan(n, r) for n, r in ((1, 3000), (2, 2900), (4, 2800), (8, 2500), (16, 2000))]


def days(c: Candidate) -> float:
    return TOKENS / c.tokens_per_s / 86400


def usd(c: Candidate) -> float:
    return c.usd_for(TOKENS)


def test_a_deadline_gets_the_cheapest_plan_that_meets_it():
    deadline = (days(PLANS[2]) + days(PLANS[1])) / 2  # 4 nodes make it, 2 do not
    c = choose(PLANS, Goal(TOKENS, days=deadline), 16)
    assert c.meets and c.chosen.nodes == 4
    assert c.reason().endswith(f"the cheapest plan that trains 1T tokens within {deadline:g} days")


def test_a_budget_gets_the_fastest_plan_within_it():
    budget = (usd(PLANS[3]) + usd(PLANS[4])) / 2  # 8 nodes fit in it, 16 cost more
    c = choose(PLANS, Goal(TOKENS, budget_usd=budget), 16)
    assert c.meets and c.chosen.nodes == 8


def test_both_get_the_cheapest_that_meets_both():
    deadline = days(PLANS[1]) * 1.01  # 2 nodes and more
    budget = usd(PLANS[3]) * 1.01  # 8 nodes and fewer
    c = choose(PLANS, Goal(TOKENS, days=deadline, budget_usd=budget), 16)
    assert c.meets and c.chosen.nodes == 2


def test_when_none_meets_the_nearest_miss_is_chosen_and_the_miss_is_in_numbers():
    deadline = days(PLANS[-1]) / 2  # twice as fast as the fastest
    c = choose(PLANS, Goal(TOKENS, days=deadline), 16)
    assert not c.meets and c.chosen.nodes == 16
    late = days(PLANS[-1]) - deadline
    assert c.miss() == f"{late:,.1f} days past the {deadline:g}-day deadline ({days(PLANS[-1]):,.1f} days)"
    assert c.reason().startswith(f"no plan up to 16 nodes trains 1T tokens within {deadline:g} days: the nearest, 16 x")
    # both missed: the one that misses least, relative to each limit
    tight = Goal(TOKENS, days=days(PLANS[2]) * 0.9, budget_usd=usd(PLANS[2]) * 0.9)
    assert not meets(rank(PLANS, tight)[0], tight)


def test_without_either_the_cheapest_is_shown_beside_the_fastest_near_its_cost():
    c = choose(PLANS, Goal(TOKENS), 16)
    assert c.chosen is c.cheapest and c.cheapest.nodes == 1
    # 2 and 4 nodes are within 10% of the cheapest's $/token (3000/2800 = 1.07), 8 nodes are not
    assert c.fastest.nodes == 4
    assert 3000 / 2800 - 1 < TOLERANCE < 3000 / 2500 - 1
    assert "fastest within 10% of its $/token: 4 x p6-b200.48xlarge" in c.reason()


def test_a_budget_on_instances_without_a_price_is_an_error():
    from dataclasses import replace

    free = replace(find_node("dgx-h100"), price_per_hour=None)
    with pytest.raises(TrainplanError, match="no price known for dgx-h100, so --budget cannot be checked"):
        rank([plan(1, 1000, free)], Goal(TOKENS, budget_usd=1e6))


def test_the_bound_skips_counts_that_cannot_meet_the_deadline_or_beat_the_fastest_within_budget():
    deadline = Goal(TOKENS, days=30)
    need = TOKENS / (30 * 86400)  # tokens/s the deadline needs
    assert skips(deadline, need * 0.99, []) and not skips(deadline, need * 1.01, [])
    budget = Goal(TOKENS, budget_usd=usd(PLANS[2]) * 1.01)
    assert not skips(budget, 1e12, [])  # nothing within the budget found yet: nothing to beat
    assert skips(budget, PLANS[2].tokens_per_s * 0.99, PLANS) and not skips(budget, PLANS[2].tokens_per_s * 1.01, PLANS)
    assert not skips(Goal(TOKENS), 0.0, PLANS)


def test_throughput_probes_powers_of_two_and_takes_the_fewest_nodes_near_the_best_per_gpu():
    assert probe_counts(10, 64) == [16, 32, 64]
    assert probe_counts(5, 40) == [8, 16, 32, 40]
    assert probe_counts(64, 64) == []
    starved = {10: [plan(10, 78)], 16: [plan(16, 1155)], 32: [plan(32, 1258)]}
    assert efficient_count(starved) == 16  # 1155 is within 10% of 1258
    note = count_note(starved, 16, 64)
    assert note.startswith("16 nodes, not the fewest that fit (10): on 10 the best plan reaches 0.8% MFU "
                           "(78 tokens/s per GPU), on 16 11.6% (1,155, +1381%)")
    assert note.endswith("--nodes 10 plans on 10")
    fine = {2: [plan(2, 2900)], 4: [plan(4, 2950)]}
    assert efficient_count(fine) == 2 and count_note(fine, 2, 64) is None


def test_probe_searches_larger_counts_while_they_earn_their_nodes_and_keeps_up_to_the_efficient_one():
    from trainplan.search.sizing import probe

    rate = {10: 78, 16: 1155, 32: 1258, 64: 1300}  # 32 earns under 10% over 16: the probe stops there
    asked = []

    def search_at(n):
        asked.append(n)
        return [plan(n, rate[n])]

    kept, note = probe([plan(10, 78)], 64, search_at)
    assert asked == [16, 32]
    assert sorted({c.nodes for c in kept}) == [10, 16]  # throughput's most tokens/s is then on 16
    assert note.startswith("16 nodes, not the fewest that fit (10)")
    kept, note = probe([plan(10, 1000)], 64, lambda n: [plan(n, 1050)])
    assert {c.nodes for c in kept} == {10} and note is None
