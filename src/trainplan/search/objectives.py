"""Priorities: how the search ranks the plans that fit. A plain registry dict, one entry per priority.

Each objective ranks feasible candidates best first. `chooses_count` says whether the node count
(and the instance type) is part of what it optimises; without --nodes or --max-nodes the others
start from the fewest nodes that fit (throughput goes on to the fewest that are not starved:
search/sizing.py, which also holds the rule for --days and --budget).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from trainplan.errors import unknown
from trainplan.search.candidate import Candidate


def _throughput_key(c: Candidate) -> tuple:
    # Ties (within a cost model's resolution) go to the plan that moves fewer bytes.
    return (-c.tokens_per_s, c.metrics.inter_node_bytes_per_token, c.metrics.gpu_bytes_per_token, c.nodes)


def rank_throughput(cands: list[Candidate], tokens: int, tolerance: float) -> list[Candidate]:
    return sorted(cands, key=_throughput_key)


def rank_communication(cands: list[Candidate], tokens: int, tolerance: float) -> list[Candidate]:
    """The fewest nodes, then fewest network bytes per token, then fewest bytes over any link,
    among plans within `tolerance` of the best tokens/s on the same hardware (instance and node
    count). Nodes come first: each node added puts another network hop into some process group,
    and a plan on more nodes can show fewer bytes per token only by spreading a pipeline thinly
    (the issue's check: "does not use more nodes than needed")."""
    best: dict[tuple, float] = {}
    for c in cands:
        k = (c.instance, c.nodes)
        best[k] = max(best.get(k, 0.0), c.tokens_per_s)
    ok = [c for c in cands if c.tokens_per_s >= (1 - tolerance) * best[(c.instance, c.nodes)]]
    rest = [c for c in cands if c.tokens_per_s < (1 - tolerance) * best[(c.instance, c.nodes)]]
    key = lambda c: (c.nodes, c.metrics.inter_node_bytes_per_token, c.metrics.gpu_bytes_per_token,
                     -c.tokens_per_s)
    return sorted(ok, key=key) + sorted(rest, key=_throughput_key)


def rank_context(cands: list[Candidate], tokens: int, tolerance: float) -> list[Candidate]:
    """Longest sequence first; among equal lengths the faster plan."""
    return sorted(cands, key=lambda c: (-c.seq_len, -c.tokens_per_s, c.nodes))


def _gpu_hours_per_million_tokens(c: Candidate) -> float:
    return c.gpus / (c.tokens_per_s * 3600.0) * 1e6


def rank_cost(cands: list[Candidate], tokens: int, tolerance: float) -> list[Candidate]:
    """Least dollars per token (the same order as dollars to the token budget); ties: less time.
    Unpriced plans are left out when any is priced (dollars and GPU-hours do not compare); where no
    plan has a price (an instance whose cloud publishes none), least GPU-hours per token: for one
    instance type the same order any price per GPU-hour would give (search/sizing.py spend)."""
    priced = [c for c in cands if c.usd_per_hour is not None]
    if not priced:
        return sorted(cands, key=lambda c: (_gpu_hours_per_million_tokens(c), -c.tokens_per_s))
    return sorted(priced, key=lambda c: (c.usd_per_million_tokens, -c.tokens_per_s))


def rank_time(cands: list[Candidate], tokens: int, tolerance: float) -> list[Candidate]:
    """Least wall time to the token budget (most tokens/s); ties: fewer dollars."""
    return sorted(cands, key=lambda c: (-c.tokens_per_s, c.usd_per_million_tokens or 0.0))


@dataclass(frozen=True, slots=True)
class Objective:
    name: str
    description: str
    rank: Callable[[list[Candidate], int, float], list[Candidate]]
    chooses_count: bool  # picks the node count (and instance) itself
    # search every count between the grid neighbours of the best one: only where the best count
    # can lie inside the grid (cost); the most tokens/s lies at the top of the range
    refine_counts: bool = False
    # ranks by tokens/s first: a node count whose peak bound is below the best found is skipped
    bound_by_peak: bool = False
    # ranks fewer nodes first: the search stops at the first node count that fits
    fewest_first: bool = False
    # (peak tokens/s of a node count, plans found so far on the instance) -> skip the count;
    # None: bound_by_peak's rule (search/sizing.py gives its own)
    bound: Callable[[float, list[Candidate]], bool] | None = None

    def skips(self, peak_tokens_per_s: float, found: list[Candidate]) -> bool:
        """Whether a node count that cannot exceed `peak_tokens_per_s` can be left unsearched."""
        if self.bound is not None:
            return self.bound(peak_tokens_per_s, found)
        return self.bound_by_peak and bool(found) and peak_tokens_per_s < max(c.tokens_per_s for c in found)


OBJECTIVES: dict[str, Objective] = {
    o.name: o
    for o in (
        Objective("throughput", "most tokens/s for the cluster (ties: less communication)",
                  rank_throughput, False, bound_by_peak=True),
        Objective("communication", "fewest nodes, then fewest bytes crossing GPUs per token, network "
                  "first, within --tolerance of the best tokens/s on the same nodes", rank_communication,
                  False, fewest_first=True),
        Objective("context", "longest sequence that fits, then most tokens/s", rank_context, False),
        Objective("cost", "least dollars to train --tokens (dollars per token)", rank_cost, True, True),
        Objective("time", "least wall time to train --tokens", rank_time, True, bound_by_peak=True),
    )
}


def objective(name: str) -> Objective:
    if name not in OBJECTIVES:
        raise unknown("priority", name, OBJECTIVES)
    return OBJECTIVES[name]
