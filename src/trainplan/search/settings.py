"""Execution settings as decisions: `plan` chooses what its stack overlaps and fuses (issue 27).

A stack's preset (stacks.toml [NAME.settings]) is what `estimate` costs; `plan` chooses among what the
stack can run (stacks.toml [NAME.choices], each with the framework's flag), except the keys the person
fixed with --set (Query.fixed_settings). How each setting is chosen follows from how the cost model
prices it:

  by rule     tp_comm_overlap, grad_reduce_overlap, param_gather_overlap, pp_p2p_overlap: an overlap
              only hides time (costs/step_terms.exposed: max(c - window, c (1 - overlap)) <= c) and
              the memory model holds nothing for it (costs/memory.py), so true is never worse, on any
              layout; cross_entropy fused: no fp32 copy of the logits (costs/overheads.logits_bytes) and
              fewer loss bytes (costs/compute.py) than plain. Set on every point of the search, the
              screen's included, at no extra estimate; turned off where the framework does not run
              them (the choice's `only_if`).
  enumerated  moe_dispatcher with ep_comm_overlap: which dispatcher moves fewer bytes depends on ep and
              the nodes it spans, and DeepEP's own overlap (the profile's tp_overlap, behind the GEMMs)
              competes with the batch-level one (the profile's overlap, behind another micro-batch);
              cp_comm: memory (costs/context_parallel.working_bytes) against the exposed exchange.
              Tried on the expanded candidates only (engine.py's expand step), never on the screen.
  unpriced    cuda_graphs: the step time prices its launch part (costs/launch.py: no kernel-launch wait
              under graphs), but no memory term prices the graph pool, so the search cannot weigh
              it; it stays at the preset and the reasons say so.

The reference trainer's stack chooses only among the values supports.implemented() says it runs (the
one home of that rule), so a plan for it stays runnable.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import replace

from trainplan.search.candidate import Candidate
from trainplan.search.objectives import objective
from trainplan.stacks import Choice, Execution, drop_refused, stack
from trainplan.supports import TRAINER_STACK, implemented

BY_RULE = {"tp_comm_overlap": True, "grad_reduce_overlap": True, "param_gather_overlap": True,
           "pp_p2p_overlap": True, "cross_entropy": "fused"}
RULE_OFF = {"tp_comm_overlap": False, "grad_reduce_overlap": False, "param_gather_overlap": False,
             "pp_p2p_overlap": False, "cross_entropy": "plain"}
# what each setting the search chooses does, for the reasons
WHAT = {"tp_comm_overlap": "tp collectives hidden behind the GEMMs",
        "grad_reduce_overlap": "gradient reduction during backward",
        "param_gather_overlap": "parameter all-gathers ahead of use",
        "pp_p2p_overlap": "pipeline sends beside the next chunk's compute",
        "cross_entropy": "no fp32 copy of the logits"}
# groups tried together, each with the layouts it applies to (model, layout) -> bool
ENUMERATED: tuple[tuple[tuple[str, ...], Callable], ...] = (
    (("moe_dispatcher", "ep_comm_overlap"), lambda m, L: m.moe is not None and L.ep * L.tp > 1),
    (("cp_comm",), lambda m, L: L.cp > 1),
)
UNPRICED = ("cuda_graphs",)

TryLayout = Callable[[Candidate, object], Candidate | None]  # (candidate, layout) -> fits and valid, or None


@functools.cache
def choices(name: str) -> dict[str, Choice]:
    """What stack `name` can choose between: its [NAME.choices], settings with one value left out; for
    the trainer's stack only the values supports.implemented() says it runs."""
    out = dict(stack(name).choices)
    if name == TRAINER_STACK:
        runs = implemented()
        out = {k: replace(c, values=tuple(v for v in c.values if v in runs[k])) for k, c in out.items()}
    return {k: c for k, c in out.items() if len(c.values) > 1}


def free(q) -> dict[str, Choice]:
    """The settings the search chooses for `q`: its stack's choices the person did not fix."""
    return {k: c for k, c in choices(q.stack).items() if k not in q.fixed_settings}


def rule_execution(q) -> Execution:
    """`q`'s execution (its stack's preset with the --set values) with each by-rule setting it may
    choose at the rule's value."""
    ex = q.execution or stack(q.stack).execution
    cs = free(q)
    return ex.with_(**{k: v for k, v in BY_RULE.items() if k in cs and v in cs[k].values})


def conditional(q) -> tuple[tuple[str, Choice], ...]:
    """The by-rule booleans of `q` whose framework runs true only on some layouts (for settle)."""
    return tuple((k, c) for k, c in free(q).items() if k in BY_RULE and c.only_if)


def settle(layout, conditions: tuple[tuple[str, Choice], ...]):
    """`layout` with each by-rule setting in `conditions` off where its framework does not run it
    (tp_comm_overlap without sequence parallel in Megatron-Core, ...)."""
    off = {k: False for k, c in conditions if getattr(layout.execution, k) and not c.allows(layout, True)}
    return layout.with_(execution=layout.execution.with_(**off)) if off else layout


def enumerates(q) -> bool:
    cs = free(q)
    return any(k in cs for keys, _ in ENUMERATED for k in keys)


def options(layout, keys: tuple[str, ...], cs: dict) -> list[Execution]:
    """The executions of `layout` with every combination of `keys` the stack runs (the layout's own
    first), each as the framework would run it on this layout (stacks.RULES), without repeats."""
    own = layout.execution
    axes = [cs[k].values if k in cs else (getattr(own, k),) for k in keys]
    out = [own]
    for combo in itertools.product(*axes):
        ex = drop_refused(replace(layout, execution=own.with_(**dict(zip(keys, combo, strict=True))))).execution
        if ex not in out:
            out.append(ex)
    return out


def choose(c: Candidate, q, try_layout: TryLayout) -> Candidate:
    """The best of `c` and its enumerated alternatives by the priority's order, one ENUMERATED group at
    a time (the groups price different communication, so their best values do not interact)."""
    cs, obj = free(q), objective(q.priority)
    best = c
    for keys, applies in ENUMERATED:
        if not any(k in cs for k in keys) or not applies(q.model, best.layout):
            continue
        tried = [best]
        for ex in options(best.layout, keys, cs)[1:]:
            alt = try_layout(best, replace(best.layout, execution=ex))
            if alt is not None:
                tried.append(alt)
        best = obj.rank(tried, q.tokens, q.tolerance)[0]
    return best


def carry(layout, execution: Execution):
    """`layout` with the enumerated settings of `execution` (what `choose` picked on another candidate
    of the same mesh), as the framework runs them on this layout."""
    return drop_refused(replace(layout, execution=carry_values(layout.execution, execution)))


def carry_values(base: Execution, chosen: Execution) -> Execution:
    """`base` with the enumerated settings of `chosen`."""
    return base.with_(**{k: getattr(chosen, k) for group, _ in ENUMERATED for k in group})
