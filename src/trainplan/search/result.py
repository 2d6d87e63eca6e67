"""The answer of a search: the chosen plan, runners-up, Pareto set, binding constraint, reasons."""

from __future__ import annotations

from dataclasses import dataclass, replace

from trainplan.errors import TrainplanError
from trainplan.search.candidate import Candidate
from trainplan.search.capability import refused_note, runnable, why_not
from trainplan.search.engine import Progress, Stats, feasible, run_search
from trainplan.search.evaluator import Evaluator, model_evaluator
from trainplan.search.pareto import pareto_front
from trainplan.search.query import Query
from trainplan.search.reasons import reasons
from trainplan.search.sizing import Choice, Goal, applies, choose, objective_for
from trainplan.supports import TRAINER_STACK

PARETO_SHOWN = 12


class NoRunnablePlan(TrainplanError):
    """Every layout that fits is one the reference trainer refuses; `stack` names the stack that
    runs the best of them (None when the refusal names none)."""

    def __init__(self, message: str, stack: str | None, reason: str):
        super().__init__(message)
        self.stack, self.reason = stack, reason


@dataclass(frozen=True)
class SearchResult:
    query: Query
    chosen: Candidate
    runners_up: tuple[Candidate, ...]
    pareto: tuple[Candidate, ...]
    reasons: tuple[str, ...]
    stats: Stats
    oom_risks: int  # layouts set aside because their memory band crosses capacity
    over_budget: int  # plans that miss the deadline or the budget (search/sizing.py)
    sizing: Choice | None = None  # the node-count rule's choice, where the search covers the counts

    @property
    def binding(self) -> str:
        return self.chosen.metrics.binding

    def to_dict(self) -> dict:
        t = self.query.tokens
        return {
            "priority": self.query.priority,
            "model": self.query.model.name,
            "chosen": self.chosen.to_dict(t),
            "binding": self.binding,
            "reasons": list(self.reasons),
            "runners_up": [c.to_dict(t) for c in self.runners_up],
            "pareto": [c.to_dict(t) for c in self.pareto],
            "oom_risks_set_aside": self.oom_risks,
            "over_budget": self.over_budget,
            "sizing": None if self.sizing is None else self.sizing.to_dict(),
            "search": self.stats.to_dict(),
        }


def _distinct(ranked: list[Candidate], n: int) -> list[Candidate]:
    """The first n candidates with distinct layouts (expansions revisit the same point)."""
    seen, out = set(), []
    for c in ranked:
        k = (c.instance, c.nodes, c.seq_len, c.layout)
        if k not in seen:
            seen.add(k)
            out.append(c)
            if len(out) == n:
                break
    return out


def search(q: Query, evaluator: Evaluator | None = None, progress: Progress | None = None) -> SearchResult:
    """Search the layouts of `q`, rank them by its priority, explain the winner."""
    obj = objective_for(q)
    pool, stats, ev = run_search(q, evaluator or model_evaluator(), progress)
    fit, over = feasible(pool, q)
    risky = 0 if q.allow_risk else len(ev.risky)
    if not fit:
        raise TrainplanError(_nothing(q, pool, risky, over, ev))
    ok = [c for c in fit if runnable(c)]
    refused = [c for c in fit if not runnable(c)]
    if not ok:
        best_refused = obj.rank(refused, q.tokens, q.tolerance)[0]
        reason, stack = why_not(best_refused)
        who = "trainplan's trainer" if q.stack == TRAINER_STACK else f"the framework of --stack {q.stack}"
        raise NoRunnablePlan(f"no plan that fits {q.model.name} can be run by {who}; the best "
                             f"({best_refused.layout.short()}) is refused: {reason}"
                             + (f"; --stack {stack} plans it" if stack and f"--stack {stack}" not in reason else ""),
                             stack, reason)
    ranked = _distinct(obj.rank(ok, q.tokens, q.tolerance), q.top + 1)
    best = ranked[0]
    front = pareto_front(ok)
    if len(front) > PARETO_SHOWN:
        # keep the ends of the front and an even spread between them
        step = (len(front) - 1) / (PARETO_SHOWN - 1)
        front = [front[round(i * step)] for i in range(PARETO_SHOWN)]
    why = reasons(best, ok, q, ev, stats.no_fit_counts, risky)
    sized = choose(ok, Goal.of(q), q.node_range()[1]) if applies(q) else None
    why[:0] = stats.notes + ([sized.reason()] if sized else [])
    note = refused_note(best, obj.rank(refused, q.tokens, q.tolerance)) if refused else None
    if note:
        why.append(note)
    full = _with_estimates(ev, [best, *ranked[1:], *front])
    return SearchResult(q, full[0], tuple(full[1:len(ranked)]), tuple(full[len(ranked):]), tuple(why),
                        stats, risky, over, sized)


def _with_estimates(ev, cands: list[Candidate]) -> list[Candidate]:
    """The candidates with their full estimate (breakdowns, ledger, cost), each estimated once:
    the search itself only keeps the few numbers it compares."""
    done: dict = {}
    out = []
    for c in cands:
        k = (c.instance, c.nodes, c.seq_len, c.global_batch, c.layout)
        if k not in done:
            done[k] = ev.detail(c.job, c.layout)
        out.append(replace(c, estimate=done[k]))
    return out


def _nothing(q: Query, pool: list, risky: int, over: int, ev) -> str:
    where = ", ".join(n.name for n in q.instances)
    first, last, _ = q.node_range()
    nodes = f"{first}" if first == last else f"up to {last}"
    if risky:
        band = ev.risk_band()
        return (f"every plan that fits {q.model.name} on {nodes} x {where} is an OOM risk "
                f"({risky} plans over capacity with the +{band.error:.0%} memory band, {band.basis}); "
                "add nodes or use --allow-risk")
    if q.seq_len is None:
        return (f"{q.model.name} does not fit the workload's sequence {q.min_seq_len} (the shortest acceptable) on "
                f"{nodes} x {where} with any layout; add nodes (--nodes/--max-nodes), shorten --seq-len or use a "
                "larger instance")
    return (f"{q.model.name} does not fit at sequence {q.seq_len} on {nodes} x {where} with any layout; "
            "add nodes (--nodes/--max-nodes), shorten --seq-len or use a larger instance")
