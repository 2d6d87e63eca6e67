"""Money and wall time: cost per hour of the cluster, dollars and hours to a token budget."""

from __future__ import annotations

from dataclasses import dataclass

from trainplan.hardware.types import Cluster


@dataclass(frozen=True, slots=True)
class Cost:
    cost_per_hour: float | None  # USD per hour for all nodes; None when the node has no price
    usd_per_million_tokens: float | None
    hours_to_tokens: float | None  # None when the workload has no token budget
    usd_to_tokens: float | None
    price_kind: str  # where the price came from (EC2 on-demand, user override, ...)

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__slots__}


def cost(cluster: Cluster, tokens_per_s: float, budget_tokens: int) -> Cost:
    """Price x time: hours = tokens / (tokens/s) / 3600; dollars = hours x cluster price per hour."""
    per_hour = cluster.price_per_hour
    hours = budget_tokens / tokens_per_s / 3600.0 if budget_tokens > 0 and tokens_per_s > 0 else None
    per_m = per_hour / (tokens_per_s * 3600.0) * 1e6 if per_hour is not None and tokens_per_s > 0 else None
    usd = per_hour * hours if per_hour is not None and hours is not None else None
    return Cost(per_hour, per_m, hours, usd, cluster.node.price_kind)
