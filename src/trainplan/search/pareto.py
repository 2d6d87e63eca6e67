"""The Pareto set: plans no other plan beats on throughput, memory headroom and network bytes at once.

Axes (issue 5): tokens/s (more is better), memory headroom per GPU (more is better: room for
fragmentation and longer sequences) and bytes over the network per token (fewer is better).
"""

from __future__ import annotations

from trainplan.search.candidate import Candidate


def _axes(c: Candidate) -> tuple[float, float, float]:
    # All three as "larger is better".
    return (c.tokens_per_s, c.headroom_bytes, -c.metrics.inter_node_bytes_per_token)


def _dominates(a: tuple, b: tuple) -> bool:
    return all(x >= y for x, y in zip(a, b)) and any(x > y for x, y in zip(a, b))


def pareto_front(cands: list[Candidate]) -> list[Candidate]:
    """Non-dominated candidates, by tokens/s descending. O(n * front) after one sort."""
    ordered = sorted(cands, key=lambda c: tuple(-x for x in _axes(c)))
    front: list[tuple[tuple, Candidate]] = []
    seen: set[tuple] = set()
    for c in ordered:
        a = _axes(c)
        if a in seen:  # equal on every axis: keep the first (the sort put it first)
            continue
        if any(_dominates(f, a) for f, _ in front):
            continue
        front.append((a, c))
        seen.add(a)
    return [c for _, c in front]
