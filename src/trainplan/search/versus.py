"""A team's own configuration beside the plan the search chose (`plan --from FILE`): term by term.

Both sides are estimated by the same cost model on the same model, sequence and global batch, so
every difference is a difference of layout and settings, which `layout_changes` lists. Rows:
throughput and MFU, each step-time term, each memory term, and the dollars; the reasons for the
chosen plan's decisions are the plan's own (search/reasons.py), printed with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainplan.units import GiB

STEP_TERMS = ("compute", "nongemm", "recompute", "dp", "tp", "pp", "cp", "ep", "bubble", "optimizer", "overhead")


@dataclass(frozen=True)
class Row:
    what: str  # "tokens/s", "step time: tp", "memory: activations", "USD per million tokens"
    yours: float | None
    plan: float | None
    unit: str

    @property
    def change(self) -> float | None:
        """plan / yours - 1 (None when either is missing or yours is 0)."""
        if self.yours is None or self.plan is None or self.yours == 0:
            return None
        return self.plan / self.yours - 1

    def to_dict(self) -> dict:
        return {"what": self.what, "yours": self.yours, "plan": self.plan, "unit": self.unit, "change": self.change}


def rows(yours, plan) -> list[Row]:
    """The rows of two estimates (trainplan.estimate.Estimate): `yours` and the plan's."""
    out = [Row("tokens/s", yours.tokens_per_s, plan.tokens_per_s, "tokens/s"),
           Row("tokens/s per GPU", yours.tokens_per_s_per_gpu, plan.tokens_per_s_per_gpu, "tokens/s"),
           Row("MFU", yours.mfu, plan.mfu, "fraction"),
           Row("step time", yours.time.total, plan.time.total, "s")]
    out += [Row(f"step time: {k}", getattr(yours.time, k), getattr(plan.time, k), "s") for k in STEP_TERMS
            if getattr(yours.time, k) or getattr(plan.time, k)]
    out.append(Row("memory per GPU", yours.memory.total / GiB, plan.memory.total / GiB, "GiB"))
    ty, tp = yours.memory.terms(), plan.memory.terms()
    out += [Row(f"memory: {k}", ty.get(k, 0) / GiB, tp.get(k, 0) / GiB, "GiB") for k in tp if ty.get(k) or tp.get(k)]
    out += [Row("USD per hour", yours.cost_per_hour, plan.cost_per_hour, "USD"),
            Row("USD per million tokens", yours.usd_per_million_tokens, plan.usd_per_million_tokens, "USD")]
    if yours.hours_to_tokens is not None and plan.hours_to_tokens is not None:
        out += [Row("hours to the token budget", yours.hours_to_tokens, plan.hours_to_tokens, "h"),
                Row("USD to the token budget", yours.usd_to_tokens, plan.usd_to_tokens, "USD")]
    return out


def layout_changes(yours, plan) -> list[str]:
    """'tp 4 -> 2', 'ac full -> selective', 'nodes 8 -> 4', 'tp_comm_overlap false -> true': what the
    plan changes in the team's layout (Layout.to_dict, execution settings included) and cluster."""
    def text(v) -> str:
        return "null" if v is None else str(v).lower() if isinstance(v, bool) else str(v)

    out = []
    for what, a, b in (("instance", yours.job.cluster.node.name, plan.job.cluster.node.name),
                       ("nodes", yours.job.cluster.nodes, plan.job.cluster.nodes)):
        if a != b:
            out.append(f"{what} {a} -> {b}")
    ly, lp = yours.layout.to_dict(), plan.layout.to_dict()
    ey, ep = ly.pop("execution", {}) or {}, lp.pop("execution", {}) or {}
    for k in lp:
        if ly.get(k) != lp[k]:
            out.append(f"{k} {text(ly.get(k))} -> {text(lp[k])}")
    for k in ep:
        if ey.get(k) != ep[k]:
            out.append(f"{k} {text(ey.get(k))} -> {text(ep[k])}")
    return out


@dataclass(frozen=True)
class Versus:
    source: str  # what was read: "job/trainplan_job.py as torchtitan 0.3.0"
    yours: object  # Candidate with its full estimate
    plan: object  # the chosen Candidate with its full estimate
    fits: bool  # the team's layout fits its GPUs (with the memory model's estimate)

    @property
    def rows(self) -> list[Row]:
        return rows(self.yours.estimate, self.plan.estimate)

    @property
    def changes(self) -> list[str]:
        return layout_changes(self.yours, self.plan)

    def headline(self) -> str:
        """One line: what the plan gains over the team's configuration, in tokens/s, memory and dollars."""
        y, p = self.yours.estimate, self.plan.estimate
        if not self.fits:
            return (f"yours does not fit: {y.memory.total / GiB:.1f} GiB per GPU of "
                    f"{self.yours.job.cluster.gpu.memory_bytes / GiB:.0f}; the plan fits in {p.memory.total / GiB:.1f}")
        words = [f"{p.tokens_per_s / y.tokens_per_s - 1:+.1%} tokens/s",
                 f"{(p.memory.total - y.memory.total) / GiB:+.1f} GiB per GPU"]
        if y.usd_per_million_tokens and p.usd_per_million_tokens:
            words.append(f"{p.usd_per_million_tokens / y.usd_per_million_tokens - 1:+.1%} USD per million tokens")
        if y.usd_to_tokens is not None and p.usd_to_tokens is not None:
            words.append(f"{p.usd_to_tokens - y.usd_to_tokens:+,.0f} USD to the token budget")
        return "the plan vs yours: " + ", ".join(words)

    def to_dict(self) -> dict:
        return {"source": self.source, "fits": self.fits, "headline": self.headline(),
                "layout": self.yours.layout.to_dict(), "instance": self.yours.job.cluster.node.name,
                "nodes": self.yours.job.cluster.nodes, "changes": self.changes,
                "rows": [r.to_dict() for r in self.rows]}
