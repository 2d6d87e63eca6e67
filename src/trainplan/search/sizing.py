"""Node counts by deadline and budget: the one rule `plan` and `compare` call to size a cluster.

A goal is the tokens to train with a deadline (days), a budget (dollars), both or neither. Among
the plans a search found (every node count it searched, each with its best layouts):

  * a deadline only: the cheapest plan that trains the tokens within the deadline;
  * a budget only: the fastest plan that trains them within the budget;
  * both: the cheapest plan that meets both;
  * neither: the cheapest plan (least dollars per token), shown beside a time-bounded choice, the
    fastest plan whose dollars per token are within TOLERANCE of the cheapest's.

When no plan meets the goal, the misses are ranked by how far they miss (the larger relative
overshoot, of days or of dollars), and the choice says by how much the best of them misses.

The search bounds the node counts with `skips` (engine.Stats.bounded): a count whose peak bound
(every GPU at MFU 1) cannot train the tokens by the deadline is skipped, and with a budget only, a
count whose peak bound cannot beat the fastest plan already found within the budget.

`throughput` without a node range also sizes by this module: the fewest nodes that fit is where it
starts, not where it stops (`probe`). Pure: no I/O (the search of a count is a callable).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from trainplan.errors import TrainplanError
from trainplan.search.candidate import Candidate
from trainplan.search.capability import runnable
from trainplan.search.objectives import Objective, objective

# A tenth: the time-bounded choice pays at most 10% more per token than the cheapest plan, and a
# count is "starved" when another gives over 10% more tokens/s per GPU. Smaller differences lie
# inside the estimate's own throughput band (the p90 out-of-sample error of runs like the plan's,
# band.py, README "How far to trust it"), so the planner cannot tell them apart.
TOLERANCE = 0.10
HOURS_PER_DAY = 24.0


@dataclass(frozen=True, slots=True)
class Goal:
    tokens: int = 0
    days: float | None = None
    budget_usd: float | None = None

    @classmethod
    def of(cls, q) -> Goal:
        return cls(q.tokens, q.days, q.budget_usd)

    @property
    def sized(self) -> bool:
        """A deadline or a budget to plan against."""
        return self.days is not None or self.budget_usd is not None

    def check(self) -> None:
        """A deadline or a budget is for a number of tokens: without --tokens it means nothing."""
        for flag, v, what in (("--days", self.days, "deadline"), ("--budget", self.budget_usd, "budget")):
            if v is not None and not self.tokens:
                raise TrainplanError(f"{flag} needs --tokens: the {what} is for training that many tokens "
                                     "(e.g. --tokens 1T)")
            if v is not None and not v > 0:
                raise TrainplanError(f"{flag} must be a positive number, got {v}")

    def describe(self) -> str:
        parts = []
        if self.days is not None:
            parts.append(f"within {self.days:g} days")
        if self.budget_usd is not None:
            parts.append(f"within ${self.budget_usd:,.0f}")
        return f"{_tokens(self.tokens)} tokens " + " and ".join(parts) if parts else "no deadline or budget"


def _tokens(n: int) -> str:
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return str(n)


def hours(c: Candidate, tokens: int) -> float:
    return tokens / c.tokens_per_s / 3600.0


def spend(c: Candidate) -> float:
    """Dollars per million tokens; an instance without a price, GPU-hours per million tokens (per
    instance type both give the same order: its price per GPU-hour is fixed)."""
    usd = c.usd_per_million_tokens
    return usd if usd is not None else c.gpus / (c.tokens_per_s * 3600.0) * 1e6


def overshoot(c: Candidate, goal: Goal) -> float:
    """How far the plan misses the goal: the larger relative excess of days or dollars (<= 0: meets)."""
    out = []
    if goal.days is not None:
        out.append(hours(c, goal.tokens) / (goal.days * HOURS_PER_DAY) - 1)
    if goal.budget_usd is not None:
        usd = c.usd_for(goal.tokens)
        out.append(float("inf") if usd is None else usd / goal.budget_usd - 1)
    return max(out, default=0.0)


def meets(c: Candidate, goal: Goal) -> bool:
    return overshoot(c, goal) <= 0


def rank(cands: list[Candidate], goal: Goal) -> list[Candidate]:
    """The rule's order: plans that meet the goal (the cheapest first, or with a budget only the
    fastest), then the misses, the nearest miss first."""
    if goal.budget_usd is not None and cands and all(c.usd_per_hour is None for c in cands):
        raise TrainplanError(f"no price known for {cands[0].instance}, so --budget cannot be checked; "
                             "give one with --price or TRAINPLAN_PRICES")
    ok = [c for c in cands if meets(c, goal)]
    miss = [c for c in cands if not meets(c, goal)]
    if goal.days is None and goal.budget_usd is not None:
        ok.sort(key=lambda c: (-c.tokens_per_s, spend(c)))
    else:
        ok.sort(key=lambda c: (spend(c), -c.tokens_per_s))
    miss.sort(key=lambda c: (overshoot(c, goal), spend(c)))
    return ok + miss


def cheapest(cands: list[Candidate]) -> Candidate:
    return min(cands, key=lambda c: (spend(c), -c.tokens_per_s))


def fastest_near(cands: list[Candidate], cheap: Candidate) -> Candidate:
    """The time-bounded choice: the fastest plan within TOLERANCE of the cheapest's spend."""
    near = [c for c in cands if spend(c) <= (1 + TOLERANCE) * spend(cheap)]
    return max(near, key=lambda c: (c.tokens_per_s, -spend(c)))


def skips(goal: Goal, peak_tokens_per_s: float, found: list[Candidate]) -> bool:
    """Whether a node count whose tokens/s cannot exceed `peak_tokens_per_s` can be left out,
    given the plans `found` so far on the same instance type (module docstring)."""
    if goal.days is not None:
        return goal.tokens / max(peak_tokens_per_s, 1e-30) / 3600.0 > goal.days * HOURS_PER_DAY
    if goal.budget_usd is not None:
        ok = [c.tokens_per_s for c in found if meets(c, goal)]
        return bool(ok) and peak_tokens_per_s < max(ok)
    return False


def sized_objective(goal: Goal) -> Objective:
    """The rule as a search objective: it chooses the node count, bounded by `skips`, and the
    engine refines around the count it picks."""
    return Objective("sized", f"the rule of search/sizing.py for {goal.describe()}",
                     lambda cands, tokens, tolerance: rank(cands, goal), chooses_count=True,
                     refine_counts=True, bound=lambda peak, found: skips(goal, peak, found))


def objective_for(q) -> Objective:
    """The ranking of a query: the sizing rule when it has a deadline or a budget, else its priority."""
    goal = Goal.of(q)
    if goal.sized:
        goal.check()
        return sized_objective(goal)
    return objective(q.priority)


# ---- the choice, in numbers ----------------------------------------------------------------------

def _plan_text(c: Candidate, tokens: int) -> str:
    s = f"{c.nodes} x {c.instance.removeprefix('ml.')} ({c.metrics.mfu:.1%} MFU"
    usd = c.usd_per_million_tokens
    if usd is not None:
        s += f", ${usd:.2f}/M tokens"
    if tokens:
        s += f", {hours(c, tokens) / HOURS_PER_DAY:,.1f} days"
        if c.usd_for(tokens) is not None:
            s += f", ${c.usd_for(tokens):,.0f}"
    return s + ")"


@dataclass(frozen=True, slots=True)
class Choice:
    """What the rule picked from one search's plans: `chosen`, whether it meets the goal, and the
    cost-optimal and time-bounded plans beside it."""

    goal: Goal
    chosen: Candidate
    meets: bool
    cheapest: Candidate
    fastest: Candidate  # the fastest within TOLERANCE of the cheapest's dollars per token
    last_nodes: int  # the most nodes searched (for "--max-nodes" in a miss)

    def miss(self) -> str | None:
        """By how much the best plan misses the goal, in days and dollars; None when it meets it."""
        if self.meets:
            return None
        c, g, out = self.chosen, self.goal, []
        if g.days is not None and hours(c, g.tokens) > g.days * HOURS_PER_DAY:
            d = hours(c, g.tokens) / HOURS_PER_DAY
            out.append(f"{d - g.days:,.1f} days past the {g.days:g}-day deadline ({d:,.1f} days)")
        if g.budget_usd is not None:
            usd = c.usd_for(g.tokens)
            if usd is not None and usd > g.budget_usd:
                out.append(f"${usd - g.budget_usd:,.0f} over the ${g.budget_usd:,.0f} budget (${usd:,.0f})")
        return "; ".join(out)

    def reason(self) -> str:
        g, t = self.goal, self.goal.tokens
        if not g.sized:
            head = f"nodes by cost, up to {self.last_nodes}: cheapest {_plan_text(self.cheapest, t)}"
            if self.fastest is not self.cheapest and self.fastest.tokens_per_s > self.cheapest.tokens_per_s:
                head += (f"; fastest within {TOLERANCE:.0%} of its $/token: {_plan_text(self.fastest, t)}, "
                         f"{_pct(self.fastest.tokens_per_s, self.cheapest.tokens_per_s)} tokens/s")
            return head + "; --days D or --budget USD (with --tokens) plan against a deadline or a budget"
        if self.meets:
            what = "fastest" if g.days is None else "cheapest"
            return f"{_plan_text(self.chosen, t)}: the {what} plan that trains {g.describe()}"
        return (f"no plan up to {self.last_nodes} nodes trains {g.describe()}: the nearest, "
                f"{_plan_text(self.chosen, t)}, misses by {self.miss()}; "
                "allow more nodes (--max-nodes), more days or a larger budget")

    def to_dict(self) -> dict:
        """The goal, whether the chosen plan meets it and by how much it misses; without a deadline or
        budget, the cost-optimal and time-bounded plans (with one, the search bounded the counts, so
        its cheapest and fastest are of the counts searched only and are not reported)."""
        t = self.goal.tokens

        def brief(c: Candidate) -> dict:
            return {"instance": c.instance, "nodes": c.nodes, "mfu": c.metrics.mfu, **c.cost(t).to_dict()}

        out = {"days": self.goal.days, "budget_usd": self.goal.budget_usd, "tokens": t, "max_nodes": self.last_nodes,
               "chosen": brief(self.chosen), "meets": self.meets, "miss": self.miss()}
        if not self.goal.sized:
            out |= {"cheapest": brief(self.cheapest), "fastest_within_tolerance": brief(self.fastest),
                    "tolerance": TOLERANCE}
        return out


def _pct(a: float, b: float) -> str:
    return f"{(a / b - 1) * 100:+.0f}%"


def choose(cands: list[Candidate], goal: Goal, last_nodes: int) -> Choice:
    """The rule applied to the plans of one search (module docstring)."""
    # dollars and GPU-hours do not compare: with some instances priced, the unpriced ones are left out
    cands = [c for c in cands if c.usd_per_hour is not None] or cands
    cheap = cheapest(cands)
    chosen = rank(cands, goal)[0] if goal.sized else cheap
    return Choice(goal, chosen, meets(chosen, goal), cheap, fastest_near(cands, cheap), last_nodes)


def applies(q) -> bool:
    """Whether a search covers the node counts the rule compares: a deadline or a budget, or the
    cost priority (which searches every count; the others stop at a fit or bound by peak)."""
    return Goal.of(q).sized or q.priority == "cost"


# ---- throughput without a node range -------------------------------------------------------------

def probe_counts(first: int, last: int) -> list[int]:
    """Counts tried above the fewest that fit, `first`: the powers of two up to `last`, then
    `last` (data-parallel degrees must divide the batch, and powers of two divide the most)."""
    out, p = [], 1
    while p <= last:
        if p > first:
            out.append(p)
        p *= 2
    if last > first and last not in out:
        out.append(last)
    return out


def per_gpu(found: list[Candidate]) -> float:
    return max(c.tokens_per_s_per_gpu for c in found)


def worth_more(best_per_gpu: float, found: list[Candidate]) -> bool:
    """Whether a larger count earned its nodes: over TOLERANCE more tokens/s per GPU."""
    return bool(found) and per_gpu(found) > (1 + TOLERANCE) * best_per_gpu


def efficient_count(by_count: dict[int, list[Candidate]]) -> int:
    """The fewest nodes whose tokens/s per GPU is within TOLERANCE of the best of any count."""
    best = max(per_gpu(v) for v in by_count.values())
    return min(n for n, v in by_count.items() if per_gpu(v) >= (1 - TOLERANCE) * best)


def probe(first: list[Candidate], last: int, search_at: Callable[[int], list[Candidate]]
          ) -> tuple[list[Candidate], str | None]:
    """Throughput without a node range: the plans of `first` (the fewest nodes that fit) and of the
    larger counts of probe_counts, searched with `search_at` while each earns its nodes
    (worth_more), kept up to the fewest that are not starved (efficient_count); and the reason.
    Judged on the plans the stack runs (capability.py): those are the ones `plan` recommends. When
    `first` has none and its best plan's refusal names a stack that runs it, the answer is that
    refusal (plan goes on to that stack), so no more counts are searched; when no stack runs it (a
    model only the trainer's --hf path builds, which has data parallelism alone), the counts go on to
    the fewest nodes where a plan the stack runs fits."""
    n0 = first[0].nodes
    found_at = {n0: first}
    by_count = {n0: [c for c in first if runnable(c)]}
    if not by_count[n0] and not _refusal_names_a_stack(first):
        del by_count[n0]
    for n in probe_counts(n0, last) if by_count.get(n0) or not by_count else ():
        found_at[n] = search_at(n)
        ok = [c for c in found_at[n] if runnable(c)]
        if not ok:
            continue
        if not by_count:  # the fewest nodes where the stack runs a plan: the probe starts here
            by_count[n] = ok
            continue
        more = worth_more(max(per_gpu(v) for v in by_count.values()), ok)
        by_count[n] = ok
        if not more:
            break
    if not by_count:  # nothing the stack runs on any count: the refusal on the fewest that fit
        return first, None
    chosen = efficient_count(by_count) if any(by_count.values()) else n0
    kept = [c for n, found in found_at.items() if n <= chosen for c in found]
    note = count_note(by_count, chosen, last)
    if min(by_count) > n0:
        note = (f"{min(by_count)} nodes, not the fewest that fit ({n0}): up to {max(n for n in found_at if n < min(by_count))}"
                f" nodes only layouts its stack cannot run fit ({why_not_best(first)})" + (f"; {note}" if note else ""))
    return kept, note


def _refusal_names_a_stack(found: list[Candidate]) -> bool:
    """Whether the fastest refused plan's refusal names a stack that runs it (capability.why_not)."""
    from trainplan.search.capability import why_not

    best = max(found, key=lambda c: c.tokens_per_s)
    got = why_not(best)
    return got is not None and got[1] is not None


def why_not_best(found: list[Candidate]) -> str:
    """The fastest plan of `found`, in short, and the first clause of why its stack cannot run it."""
    from trainplan.search.capability import why_not

    best = max(found, key=lambda c: c.tokens_per_s)
    got = why_not(best)
    return f"{best.layout.short()}: {got[0].split(';')[0]}" if got else best.layout.short()


def count_note(by_count: dict[int, list[Candidate]], chosen: int, last: int) -> str | None:
    """The first reason when throughput plans on more than the fewest nodes that fit, in numbers."""
    first = min(by_count)
    if chosen == first:
        return None
    top = lambda n: max(by_count[n], key=lambda c: c.tokens_per_s)
    a, b = top(first), top(chosen)
    best_n = max(by_count, key=lambda n: per_gpu(by_count[n]))
    tried = ", ".join(str(n) for n in sorted(by_count))
    return (f"{chosen} nodes, not the fewest that fit ({first}): on {first} the best plan reaches "
            f"{a.metrics.mfu:.1%} MFU ({a.tokens_per_s_per_gpu:,.0f} tokens/s per GPU), on {chosen} "
            f"{b.metrics.mfu:.1%} ({b.tokens_per_s_per_gpu:,.0f}, {_pct(b.tokens_per_s_per_gpu, a.tokens_per_s_per_gpu)}"
            f"), the fewest nodes within {TOLERANCE:.0%} of the best per GPU ({per_gpu(by_count[best_n]):,.0f} on "
            f"{best_n}; counts tried {tried}, up to {last}); --nodes {first} plans on {first}")
