"""Which candidates the chosen stack can run: `plan` recommends only those.

Only the reference trainer (stack `trainplan`) states its capabilities (trainplan/supports.py); a
layout costed for another stack is taken as runnable there. A refused candidate
stays in the pool so that `plan` can say what a faster layout would need ("ep=64 would be 1.4x
faster but needs --stack megatron").
"""

from __future__ import annotations

from trainplan.memo import memoised
from trainplan.search.candidate import Candidate
from trainplan.supports import TRAINER_STACK, refusal


def why_not(c: Candidate) -> tuple[str, str | None] | None:
    """(reason, stack that runs it) when the candidate's stack cannot run it, else None."""
    if c.layout.stack != TRAINER_STACK:
        return None
    return _refused(c.job.model, layout=c.layout)


@memoised()  # a search asks for each candidate more than once (the screen's ranking, the result's)
def _refused(model, *, layout) -> tuple[str, str | None] | None:
    r = refusal(layout, "cuda", model)
    return None if r is None else (r.reason, r.stack)


def runnable(c: Candidate) -> bool:
    return why_not(c) is None


def refused_note(chosen: Candidate, refused_ranked: list[Candidate]) -> str | None:
    """One reason naming the best refused candidate, when it beats the chosen one."""
    for c in refused_ranked:
        if c.tokens_per_s <= chosen.tokens_per_s:
            return None
        reason, stack = why_not(c)
        if stack is None:
            continue
        diff = [f"{k}={getattr(c.layout, k)}" for k in ("tp", "pp", "cp", "ep", "sharding", "precision")
                if getattr(c.layout, k) != getattr(chosen.layout, k)] or [c.layout.short()]
        # the refusal's first clause says why (the rest says what to change, which is this note)
        return (f"{' '.join(diff)} would be {c.tokens_per_s / chosen.tokens_per_s:.2f}x faster "
                f"({c.layout.short()}) but needs --stack {stack}: {reason.split(';')[0].split(':')[0]}")
    return None
