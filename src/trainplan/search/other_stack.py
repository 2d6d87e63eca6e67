"""Another stack's answer to the same question, in the priority's own measure (issue 27).

`plan` searches a second time on the stack the trainer's refusals name (supports.other_stack), with
its own settings chosen (search/settings.py); when that plan is materially better on the priority's
metric, the plan's first reason says so in numbers, and why the chosen stack does not get there
(compare_stacks). When the trainer runs none of the layouts that fit, the search is made on that
stack instead (search_runnable).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from trainplan.search.candidate import Candidate
from trainplan.supports import TRAINER_STACK, refusal

MATERIAL = 0.10  # another stack is named first when it is more than 10% better


@dataclass(frozen=True, slots=True)
class Metric:
    value: Callable[[Candidate], float | None]
    lower_is_better: bool
    better: str  # the comparative: "cheaper", "faster"
    text: Callable[[float], str]


def _bytes(v: float) -> str:
    return f"{v / 1e6:.2f} MB over the network per token"


# priority -> the measure its ranking puts first (search/objectives.py)
METRICS = {
    "throughput": Metric(lambda c: c.tokens_per_s, False, "faster", lambda v: f"{v:,.0f} tokens/s"),
    "time": Metric(lambda c: c.tokens_per_s, False, "faster", lambda v: f"{v:,.0f} tokens/s"),
    "cost": Metric(lambda c: c.usd_per_million_tokens, True, "cheaper", lambda v: f"${v:.2f} per million tokens"),
    "communication": Metric(lambda c: c.metrics.inter_node_bytes_per_token, True, "less network traffic", _bytes),
    "context": Metric(lambda c: c.seq_len, False, "longer", lambda v: f"sequence {v:,.0f}"),
}


def advantage(chosen: Candidate, other: Candidate, priority: str) -> float | None:
    """How many times better `other` is than `chosen` on the priority's metric (> 1: better); None
    when either has no value (an unpriced instance) or the metric is zero for both."""
    m = METRICS[priority]
    a, b = m.value(chosen), m.value(other)
    if a is None or b is None:
        return None
    good, bad = (a, b) if m.lower_is_better else (b, a)
    if bad <= 0:
        return None if good <= 0 else float("inf")
    return good / bad


def _times(x: float) -> str:
    return "infinitely" if x == float("inf") else f"{x:.2f}x" if x < 2 else f"{x:.1f}x"


# settings that change nothing unless the layout has what they act on
_ACTS_ON = {"moe_dispatcher": lambda m, L: m.moe is not None, "ep_comm_overlap": lambda m, L: L.ep > 1,
            "moe_imbalance": lambda m, L: m.moe is not None, "moe_capacity_factor": lambda m, L: m.moe is not None,
            "moe_pad_to_capacity": lambda m, L: m.moe is not None, "cp_comm": lambda m, L: L.cp > 1,
            "pp_p2p_overlap": lambda m, L: L.pp > 1, "tp_comm_overlap": lambda m, L: L.tp > 1}


def _why(chosen: Candidate, other: Candidate) -> str:
    """What the other plan runs that the chosen one does not (its degrees, then the settings that act on
    its layout), and the trainer's refusal of it when the chosen plan is the trainer's."""
    L, O, m = chosen.layout, other.layout, chosen.job.model
    mine = L.execution.to_dict()
    runs = [f"{k}={getattr(O, k)}" for k in ("tp", "pp", "cp", "ep", "sharding", "precision")
            if getattr(O, k) != getattr(L, k)]
    runs += [f"{k}={'null' if v is None else str(v).lower()}" for k, v in O.execution.to_dict().items()
             if v != mine[k] and _ACTS_ON.get(k, lambda m, L: True)(m, O)]
    text = f"it runs {' '.join(runs) or O.short()}"
    if L.stack == TRAINER_STACK:
        r = refusal(replace(O, stack=TRAINER_STACK), "cuda", m)
        if r is not None:
            text += f", which trainplan's trainer refuses: {r.reason.split(';')[0]}"
    return text


def _on(c: Candidate, same: bool) -> str:
    return "" if same else f" on {c.nodes} node{'s' if c.nodes > 1 else ''}"


def other_stack_reason(chosen: Candidate, other: Candidate, priority: str) -> tuple[str, bool]:
    """(the reason, whether it is material: more than MATERIAL better), e.g. '--stack megatron: $1.61
    per million tokens on 16 nodes, 3.5x cheaper than trainplan's $5.60 on 48 (it runs ep=16, ...)'."""
    m, x = METRICS[priority], advantage(chosen, other, priority)
    name, mine = other.layout.stack, chosen.layout.stack
    if x is None or x <= 1 + MATERIAL:
        a, b = m.value(chosen), m.value(other)
        shown = "" if a is None or b is None else f": {m.text(b)}, against {mine}'s {m.text(a)}"
        return f"--stack {name} compared{shown}: not more than {MATERIAL:.0%} better", False
    same = other.nodes == chosen.nodes and other.instance == chosen.instance
    return (f"--stack {name}: {m.text(m.value(other))}{_on(other, same)}, {_times(x)} {m.better} than "
            f"{mine}'s {m.text(m.value(chosen))}{_on(chosen, same)} ({_why(chosen, other)})"), True


def on_stack(q, name: str, settings: Mapping[str, object] = MappingProxyType({})):
    """Query `q` for stack `name`: its preset with the user's own setting changes (`settings`, the
    parsed --set assignments) kept."""
    from trainplan.stacks import check_experts, stack

    execution = stack(name).execution.with_(**settings)
    check_experts(execution, q.model.moe is not None)
    return replace(q, stack=name, execution=execution)


def search_runnable(q, ev, update=None, *, stack_chosen: bool, settings: Mapping[str, object] = MappingProxyType({})):
    """search(q); when no stack was chosen and trainplan's trainer runs none of the layouts that fit,
    the search again on the stack the refusal names (its preset, the `settings` changes kept), with the
    reason first among the plan's reasons. A stack the user chose is kept: the refusal is the answer.
    Otherwise the same search on the stack the refusals name (compare_stacks)."""
    from trainplan.search import NoRunnablePlan, search

    tried, notes, here = [q.stack], [], q
    while True:
        try:
            result = search(here, ev, update)
            break
        except NoRunnablePlan as e:
            if stack_chosen or e.stack is None or e.stack in tried:
                raise
            who = "trainplan's trainer" if here.stack == TRAINER_STACK else f"the framework of --stack {here.stack}"
            notes.append(f"stack {e.stack}: {who} runs none of the layouts that fit {q.model.name} "
                         f"({e.reason.split(';')[0]}); planned for --stack {e.stack}, which runs them")
            tried.append(e.stack)
            here = on_stack(q, e.stack, settings)
    if notes:
        return replace(result, reasons=(*notes, *result.reasons))
    return compare_stacks(result, ev, settings)


def compare_stacks(result, ev, settings: Mapping[str, object] = MappingProxyType({})):
    """`result` with the same search on the stack trainplan's refusals name for the model
    (supports.other_stack: Megatron, which runs every layout and setting, or Megatron-Bridge for
    Mamba-2 hybrids), its settings chosen too: named first among the reasons when
    it is more than MATERIAL better on the priority's metric (other_stack_reason), else last. One extra
    search; none when the plan is on that stack already or it finds nothing."""
    from trainplan.errors import TrainplanError
    from trainplan.search import search
    from trainplan.supports import other_stack

    q = result.query
    instead = other_stack(q.model)  # Megatron-Bridge for a model with Mamba-2 layers, else Megatron
    if instead is None:  # Mamba-1 layers: no stack with model parallelism builds them
        note = (f"no other stack compared: none that trainplan knows builds {q.model.name}'s Mamba-1 layers "
                "(Megatron-Core's hybrid model has Mamba-2 mixers only)")
        return replace(result, reasons=(*result.reasons, note))
    if q.stack == instead:
        return result
    try:
        other = search(on_stack(q, instead, settings), ev)
    except TrainplanError:
        return result
    note, material = other_stack_reason(result.chosen, other.chosen, q.priority)
    return replace(result, reasons=(note, *result.reasons) if material else (*result.reasons, note))
