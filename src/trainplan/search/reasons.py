"""A reason for each decision of the chosen plan, with the numbers a person can check.

Each reason compares the chosen plan with the alternative it beat: the same layout in another
precision, with less or more recompute, with the next micro-batch, with another parallel degree,
on another node count. Alternatives missing from the pool are evaluated here (cached).
"""

from __future__ import annotations

from dataclasses import replace

from trainplan.costs.fit import MAX_SEQ_LEN
from trainplan.errors import TrainplanError
from trainplan.layout import check_layout, expert_refusal
from trainplan.precision import searched
from trainplan.search import settings, space
from trainplan.search.candidate import Candidate
from trainplan.search.evaluator import Counting
from trainplan.search.query import Query
from trainplan.stacks import applicable, stack

GIB = 1024**3


def _pct(a: float, b: float) -> str:
    x = (a / b - 1) * 100
    return f"{x:+.1f}%" if abs(x) < 1 else f"{x:+.0f}%"


def _needs(alt: Candidate, ev: Counting) -> str:
    """'needs 187.1 of 179.0 GiB', or the band when only the band crosses the capacity."""
    m = alt.metrics
    head = f"needs {m.memory_bytes / GIB:.1f} of {m.capacity_bytes / GIB:.1f} GiB"
    if m.memory_bytes <= m.capacity_bytes:
        head += f" (+{ev.memory_band(alt.job).error:.0%} band crosses it)"
    return head


def _variant(best: Candidate, ev: Counting, **changes) -> tuple[bool, Candidate]:
    """(fits, candidate) for the chosen job with some layout fields changed."""
    job, layout = best.job, replace(best.layout, **changes)
    if "micro_batch" in changes:
        from trainplan.job import Workload

        w = job.workload
        layout = replace(layout, grad_accum=max(1, w.global_batch // (layout.micro_batch * layout.dp)))
        gb = layout.global_batch
        job = replace(job, workload=Workload(w.seq_len, gb, w.tokens, w.optimizer))
    return ev.fits(job, layout), Candidate(job, layout, ev.evaluate(job, layout))


def _compute_s(c: Candidate, ev: Counting) -> float | None:
    """Seconds of GEMMs and attention in the candidate's step (None: the evaluator has no breakdown)."""
    e = ev.detail(c.job, c.layout)
    return None if e is None else e.time.compute


def precision_reason(best: Candidate, q: Query, ev: Counting) -> str:
    gpu, p = best.job.cluster.gpu, best.layout.precision
    if q.precision:
        return f"precision {p}: as asked (--precision)"
    others = [r.name for r in searched(gpu) if r.name != p]
    if not others:
        return f"precision {p}: the only recipe searched that {gpu.name} ({gpu.arch}) runs"
    parts = []
    t_best = _compute_s(best, ev)
    for other in others:
        ok, alt = _variant(best, ev, precision=other, fp8_allgather=False)
        if ok:
            # the rate as priced, not the datasheet's: the same FLOPs over each estimate's GEMM and
            # attention seconds (measured rows, or bf16 rows x a cited ratio: costs/measured.py)
            t_alt = _compute_s(alt, ev)
            rate = "" if t_best is None or t_alt is None else f"{_pct(t_alt, t_best)} GEMM and attention rate and "
            parts.append(f"{rate}{_pct(best.tokens_per_s, alt.tokens_per_s)} tokens/s vs {other}")
        else:
            parts.append(f"{other} does not fit this layout")
    return f"precision {p} at hidden {best.job.model.hidden_size}: " + "; ".join(parts)


def ac_reason(best: Candidate, ev: Counting) -> list[str]:
    L = best.layout
    out = []
    i = space.AC_LADDER.index(L.ac)
    if i > 0:
        ok, alt = _variant(best, ev, ac="none", ac_layers=0)
        if not ok:
            out.append(f"checkpointing {L.ac}: none does not fit at micro-batch {L.micro_batch}, "
                       + _needs(alt, ev))
        else:
            out.append(f"checkpointing {L.ac}: none fits but is {_pct(alt.tokens_per_s, best.tokens_per_s)} "
                       "tokens/s at its largest micro-batch")
    if L.ac not in ("full", "offload"):
        ok, alt = _variant(best, ev, ac="full", ac_layers=0)
        dt = _pct(alt.metrics.step_time_s, best.metrics.step_time_s)
        out.append(f"full checkpointing rejected: {dt} step time, not needed to fit")
    if not out:
        out.append(f"checkpointing {L.ac}: the least recompute that fits")
    return out


def micro_batch_reason(best: Candidate, q: Query, ev: Counting) -> str:
    L = best.layout
    mbs = q.batch.micro_batches(L.dp, best.seq_len)
    bigger = [m for m in mbs if m > L.micro_batch]
    head = f"micro-batch {L.micro_batch} x {L.grad_accum} accumulation x dp {L.dp} = {best.global_batch} sequences"
    if not bigger:
        return head + ": the largest the global batch allows"
    ok, alt = _variant(best, ev, micro_batch=bigger[0])
    if not ok:
        return head + f": micro-batch {bigger[0]} " + _needs(alt, ev)
    return head + f": micro-batch {bigger[0]} fits but is {_pct(alt.tokens_per_s, best.tokens_per_s)} tokens/s"


def degree_reasons(best: Candidate, pool: list[Candidate]) -> list[str]:
    """For tp, pp, cp and sharding: the best plan on the same hardware, sequence and precision
    with another value (other precisions would mix the precision's gain into the comparison)."""
    same = [c for c in pool if c.instance == best.instance and c.nodes == best.nodes
            and c.seq_len == best.seq_len and c.layout.precision == best.layout.precision]
    out = []
    for dim in ("tp", "pp", "cp", "sharding"):
        v = getattr(best.layout, dim)
        others = [c for c in same if getattr(c.layout, dim) != v]
        if not others:
            if dim in ("tp", "pp") or v != 1:
                out.append(f"{dim}={v}: no {best.layout.precision} plan with another {dim} fits "
                           "or came through the screen")
            continue
        alt = max(others, key=lambda c: c.tokens_per_s)
        out.append(f"{dim}={v}: the best plan with {dim}={getattr(alt.layout, dim)} is "
                   f"{_pct(alt.tokens_per_s, best.tokens_per_s)} tokens/s ({alt.layout.short()})")
    return out


def _ep_traffic(c: Candidate, ev: Counting) -> tuple[float, float, float]:
    """(bytes over NVLink, bytes over the network, exposed seconds) of the expert dispatch and
    combine, per GPU per step, from the candidate's communication ledger."""
    entries = [e for e in ev.detail(c.job, c.layout).comm if e.dimension == "ep"]
    net = sum(e.network_bytes for e in entries)
    return sum(e.bytes for e in entries) - net, net, sum(e.exposed_seconds for e in entries)


def _traffic_text(L, nv: float, net: float, exposed: float) -> str:
    if L.ep == 1:
        return "no expert all-to-all"
    where = "inside the node" if net == 0 else "across nodes"
    return (f"all-to-all {where}: {nv / 1e9:.1f} GB over NVLink + {net / 1e9:.1f} GB over the network per GPU "
            f"per step, {exposed:.2f} s exposed")


def ep_reason(best: Candidate, pool: list[Candidate], ev: Counting) -> str | None:
    """MoE models: the chosen ep against the best plan with another ep on the same hardware,
    sequence and precision, in the bytes each sends per step and where they go."""
    if best.job.model.moe is None:
        return None
    L = best.layout
    others = [c for c in pool if c.instance == best.instance and c.nodes == best.nodes
              and c.seq_len == best.seq_len and c.layout.precision == L.precision and c.layout.ep != L.ep]
    if not others:
        return f"ep={L.ep}: no {L.precision} plan with another ep fits or came through the screen"
    alt = max(others, key=lambda c: c.tokens_per_s)
    return (f"ep={L.ep} ({_traffic_text(L, *_ep_traffic(best, ev))}) vs the best ep={alt.layout.ep} "
            f"({_traffic_text(alt.layout, *_ep_traffic(alt, ev))}): {_pct(alt.tokens_per_s, best.tokens_per_s)} "
            f"tokens/s ({alt.layout.short()})")


def _etp_text(c: Candidate, ev: Counting) -> str:
    """The traffic etp trades: the expert exchange (dispatch, and the gather of routed copies over
    etp) against the data-parallel sharding of the expert weights, which etp = 1 holds tp x."""
    nv, net, exposed = _ep_traffic(c, ev)
    e = ev.detail(c.job, c.layout)
    return (f"expert exchange {nv / 1e9:.1f} GB over NVLink + {net / 1e9:.1f} GB over the network per GPU per "
            f"step, {exposed:.2f} s exposed; weight sharding {e.time.dp:.2f} s exposed")


def etp_reason(best: Candidate, pool: list[Candidate], ev: Counting) -> str | None:
    """MoE models with tp > 1: the chosen expert tensor-parallel size against the best plan with
    the other one (same hardware, sequence, precision and tp), in the traffic each moves."""
    L = best.layout
    if best.job.model.moe is None or L.tp == 1:
        return None
    etp = L.expert_groups.etp
    others = [c for c in pool if c.instance == best.instance and c.nodes == best.nodes and c.seq_len == best.seq_len
              and c.layout.precision == L.precision and c.layout.tp == L.tp and c.layout.expert_groups.etp != etp]
    other = 1 if etp == L.tp else L.tp
    if others:
        alt = max(others, key=lambda c: c.tokens_per_s)
        other = alt.layout.expert_groups.etp
    else:  # the same layout with the other etp, when that layout is a valid one
        why = expert_refusal(best.job.model, replace(L, etp=other))
        if why:
            return f"etp={etp}: etp={other} cannot run this layout ({why})"
        fits, alt = _variant(best, ev, etp=other)
        if not fits:
            return f"etp={etp} ({_etp_text(best, ev)}): etp={other} {_needs(alt, ev)}"
    return (f"etp={etp} ({_etp_text(best, ev)}) vs the best etp={other} "
            f"({_etp_text(alt, ev)}): {_pct(alt.tokens_per_s, best.tokens_per_s)} tokens/s ({alt.layout.short()})")


# Overlap settings (stacks.py), the communication each hides, and when the layout has any of it.
_OVERLAPS = (
    ("tp_comm_overlap", "tp communication", lambda L: L.tp > 1),
    ("grad_reduce_overlap", "gradient reduction", lambda L: L.dp > 1 or L.cp > 1),
    ("param_gather_overlap", "parameter all-gather", lambda L: L.sharding != "none" and L.dp_shard * L.cp > 1),
    ("pp_p2p_overlap", "pipeline send/receive", lambda L: L.pp > 1),
)
MATTERS = 0.01  # a setting is worth a reason when it moves the step time by 1% or more


def execution_reasons(best: Candidate, ev: Counting, skip: frozenset = frozenset()) -> list[str]:
    """What the stack's settings cost the chosen plan: each overlap that is off and the layout has
    communication for ('tp communication not overlapped: +0.8 s per step'), and the context-parallel
    exchange against the other kinds; `skip`: settings the search chose (setting_reasons says why)."""
    L, t = best.layout, best.metrics.step_time_s
    can = settings.choices(L.stack)
    out = []
    for key, what, applies in _OVERLAPS:
        if key in skip or getattr(L.execution, key) or not applies(L):
            continue
        _, alt = _variant(best, ev, execution=L.execution.with_(**{key: True}))
        dt = t - alt.metrics.step_time_s
        if dt >= MATTERS * t:
            hint = f"; --set {key}=true" if key in can and can[key].allows(L, True) else ""
            out.append(f"{what} not overlapped ({L.stack}: {key}=false): +{dt:.2g} s per step "
                       f"({_pct(t, alt.metrics.step_time_s)}){hint}")
    if L.cp > 1 and "cp_comm" not in skip:
        from trainplan.stacks import CHOICES

        times = {}
        for kind in CHOICES["cp_comm"]:
            layout = replace(L, execution=L.execution.with_(cp_comm=kind))
            try:
                check_layout(best.job, layout)
            except TrainplanError:
                continue
            times[kind] = ev.evaluate(best.job, layout).step_time_s
        fastest = min(times, key=times.get)
        if fastest != L.execution.cp_comm and times[fastest] <= (1 - MATTERS) * t:
            out.append(f"cp_comm {L.execution.cp_comm} ({L.stack}): {fastest} would be "
                       f"{_pct(times[fastest], t)} step time (--set cp_comm={fastest})")
    return out


def _label(ex, keys) -> str:
    return ", ".join(f"{k}={_text(getattr(ex, k))}" for k in keys)


def _text(v) -> str:
    return "null" if v is None else str(v).lower()


def setting_reasons(best: Candidate, q: Query, ev: Counting) -> list[str]:
    """The execution settings the search chose (search/settings.py), each with its gain on the chosen
    layout in tokens/s against the value it beat; the ones considered and not taken, with why."""
    L, ex = best.layout, best.layout.execution
    can, preset = settings.free(q), applicable(L, stack(L.stack).execution)
    out, small = [], []
    for key, value in settings.BY_RULE.items():
        if key not in can or getattr(ex, key) != value or settings.RULE_OFF[key] not in can[key].values:
            continue  # not the stack's to choose, or off where its framework does not run it
        _, alt = _variant(best, ev, execution=ex.with_(**{key: settings.RULE_OFF[key]}))
        gain = best.tokens_per_s / alt.tokens_per_s - 1
        if gain < MATTERS:
            small.append(f"{key}={_text(value)}")
            continue
        was = "" if getattr(preset, key) == value else f", the {L.stack} preset's"
        out.append(f"{key}={_text(value)}: {_pct(best.tokens_per_s, alt.tokens_per_s)} tokens/s over "
                   f"{_text(settings.RULE_OFF[key])}{was} ({settings.WHAT[key]})")
    if small:
        out.append(f"{', '.join(small)}: chosen by rule (never slower, never more memory in the cost model); "
                   "under 1% tokens/s each on this layout")
    for keys, applies in settings.ENUMERATED:
        mine = tuple(k for k in keys if k in can)
        if not mine or not applies(q.model, L):
            continue
        parts = []
        for other in settings.options(L, keys, can)[1:]:
            diff = _label(other, [k for k in keys if getattr(other, k) != getattr(ex, k)])
            try:
                check_layout(best.job, replace(L, execution=other))
            except TrainplanError:
                parts.append(f"{diff} cannot run this layout")
                continue
            fits, alt = _variant(best, ev, execution=other)
            parts.append(f"{diff} {_pct(alt.tokens_per_s, best.tokens_per_s) + ' tokens/s' if fits else 'does not fit'}")
        if parts:
            out.append(f"{_label(ex, mine)}: chosen on this mesh's best layout; against it here: " + "; ".join(parts))
    for key in settings.UNPRICED:
        if key in can:
            out.append(f"{key}={_text(getattr(ex, key))} (the {L.stack} preset's): not weighed, the cost model "
                       f"prices the kernel launches {key.replace('_', ' ')} remove but not the memory they hold")
    for key in sorted(q.fixed_settings & set(settings.BY_RULE) & set(settings.choices(L.stack))):
        other = settings.RULE_OFF[key] if getattr(ex, key) == settings.BY_RULE[key] else settings.BY_RULE[key]
        _, alt = _variant(best, ev, execution=ex.with_(**{key: other}))
        out.append(f"{key}={_text(getattr(ex, key))}: as asked (--set); {_text(other)} would be "
                   f"{_pct(alt.tokens_per_s, best.tokens_per_s)} tokens/s")
    return out


def nodes_reason(best: Candidate, pool: list[Candidate], q: Query, no_fit: list) -> str:
    n, inst = best.nodes, best.instance
    if q.nodes is not None:
        head = f"{n} x {inst}: as asked (--nodes)"
    else:
        below = [c for (i, c) in no_fit if i == inst and c < n]
        head = f"{n} x {inst}"
        if below:
            head += f": with {max(below)} nodes no layout fits"
        fewer = [c for c in pool if c.instance == inst and c.nodes < n]
        if fewer:
            alt = max(fewer, key=lambda c: c.tokens_per_s)
            head += (f"; best on {alt.nodes} nodes: {_pct(alt.tokens_per_s, best.tokens_per_s)} tokens/s"
                     + (f", {_pct(alt.usd_per_million_tokens, best.usd_per_million_tokens)} $/token" if best.usd_per_million_tokens else ""))
    if best.metrics.inter_node_bytes_per_token == 0 and n == 1:
        head += "; no traffic leaves the node"
    return head


def instance_reason(best: Candidate, pool: list[Candidate]) -> str | None:
    """With several instance types: the best plan of each other type, by tokens/s and $/token."""
    others: dict[str, Candidate] = {}
    for c in pool:
        if c.instance != best.instance and c.usd_per_million_tokens is not None:
            o = others.get(c.instance)
            if o is None or c.usd_per_million_tokens < o.usd_per_million_tokens:
                others[c.instance] = c
    if not others:
        return None
    parts = [f"{name.removeprefix('ml.')} on {c.nodes}: {_pct(c.usd_per_million_tokens, best.usd_per_million_tokens)} $/token, "
             f"{_pct(c.tokens_per_s, best.tokens_per_s)} tokens/s"
             for name, c in sorted(others.items(), key=lambda kv: kv[1].usd_per_million_tokens)[:3]]
    return f"instance {best.instance}: cheapest plans of the others: " + "; ".join(parts)


def reasons(best: Candidate, pool: list[Candidate], q: Query, ev: Counting, no_fit: list,
            risky: int) -> list[str]:
    out = [nodes_reason(best, pool, q, no_fit), precision_reason(best, q, ev)]
    if len(q.instances) > 1:
        why = instance_reason(best, pool)
        if why:
            out.insert(0, why)
    out += ac_reason(best, ev)
    if q.seq_len is not None:
        out.append(micro_batch_reason(best, q, ev))
    elif best.seq_len >= q.seq_limit and q.seq_limit < MAX_SEQ_LEN:
        out.append(f"sequence {best.seq_len}: the model's context ({q.model.max_position_embeddings} "
                   "positions); longer may fit in memory"
                   + ("" if q.model.position_embedding == "learned" else " (--allow-long-context)"))
    elif best.seq_len >= MAX_SEQ_LEN:
        out.append(f"sequence {best.seq_len}: the cap of --seq-len max; longer may fit")
    else:
        out.append(f"sequence {best.seq_len}: the longest that fits this layout at micro-batch 1")
    out += degree_reasons(best, pool)
    for why in (ep_reason(best, pool, ev), etp_reason(best, pool, ev)):
        if why:
            out.append(why)
    out += setting_reasons(best, q, ev)
    out += execution_reasons(best, ev, skip=frozenset(settings.free(q)))
    out.append(f"binding: {best.metrics.binding}")
    if risky:
        out.append(risk_reason(best, pool, q, ev, risky))
    return out


def risk_reason(best: Candidate, pool: list[Candidate], q: Query, ev: Counting, risky: int) -> str:
    """How many layouts the memory band set aside, the band and what it was measured on, and the
    smaller node counts where only such layouts fit (the band, not the model, chose the count)."""
    band = ev.memory_band(best.job)
    out = (f"{risky} layouts set aside as OOM risks (memory +{band.error:.0%} band above capacity: "
           f"{band.basis})")
    fitted = {c.nodes for c in pool if c.instance == best.instance}
    only = sorted(n for n in ev.risky_node_counts(best.instance) - fitted if n < best.nodes)
    if only and q.nodes is None:
        out += (f"; on {', '.join(map(str, only))} x {best.instance} layouts fit only without the band")
    return out + "; --allow-risk admits them"
