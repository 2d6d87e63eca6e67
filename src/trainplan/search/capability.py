"""Which candidates the chosen stack can run: `plan` recommends only those.

The reference trainer (stack `trainplan`) states what it runs in trainplan/supports.py; a stack
with an exporter (stacks.toml `exporter`) in that exporter's `refusal` (trainplan/export: what the
framework's pinned release cannot run as costed, the rule `export` raises); a stack with neither
is taken as running every layout costed for it. A refused candidate stays in the pool so that
`plan` can say what a faster layout would need ("ep=64 would be 1.4x faster but needs --stack
megatron", "... but torchtitan 0.3.0 does not run it: ...").
"""

from __future__ import annotations

from trainplan.export import refusal as framework_refusal
from trainplan.memo import memoised
from trainplan.search.candidate import Candidate
from trainplan.stacks import MAMBA_STACK
from trainplan.supports import TRAINER_STACK, other_stack, refusal


def why_not(c: Candidate) -> tuple[str, str | None] | None:
    """(reason, stack that runs it) when the candidate's stack cannot run it, else None."""
    if c.layout.stack != TRAINER_STACK:
        return _framework_refused(c.job, layout=c.layout)
    return _refused(c.job.model, layout=c.layout)


@memoised()
def _framework_refused(job, *, layout) -> tuple[str, str | None] | None:
    """The exporter's reason, and the stack to plan on instead: the one trainplan's refusals name for
    the model (supports.other_stack), or Megatron-Bridge when that is the refusing stack itself (its
    model providers build what the megatron exporter's GPT arguments cannot say: chunked and NoPE
    attention, linear attention, Mamba-2)."""
    r = framework_refusal(job, layout)
    if r is None:
        return None
    instead = other_stack(job.model)
    if instead == layout.stack:
        instead = MAMBA_STACK
    return r, (None if instead == layout.stack else instead)


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
        trainer = c.layout.stack == TRAINER_STACK
        if trainer and stack is None:
            continue
        diff = [f"{k}={getattr(c.layout, k)}" for k in ("tp", "pp", "cp", "ep", "sharding", "precision")
                if getattr(c.layout, k) != getattr(chosen.layout, k)] or [c.layout.short()]
        faster = f"{' '.join(diff)} would be {c.tokens_per_s / chosen.tokens_per_s:.2f}x faster ({c.layout.short()})"
        if not trainer:  # the framework's own refusal, said whole: it names the setting and what to change
            return f"{faster} but the framework of --stack {c.layout.stack} does not run it: {reason}"
        # the refusal's first clause says why (the rest says what to change, which is this note)
        return f"{faster} but needs --stack {stack}: {reason.split(';')[0].split(':')[0]}"
    return None
