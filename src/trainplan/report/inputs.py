"""What the reports read: the JSON the planner commands print, turned into a few flat views.

The reports work from the commands' dict/JSON output, never from planner objects, so that any
`--json` output saved yesterday can still be drawn today. This module is the one place that knows
the shapes; the plot builders take the views below.

An estimate (`Estimate.to_dict()`, also the `estimate` of a plan.json) is read as:

    {"memory": {<term>: bytes, ...}          # or {<term>_gib: GiB} / {"gib": {<term>: GiB}};
                                              # nested dicts are summed into their term;
                                              # keys starting total/peak/capacity/headroom/worst
                                              # and allocated/reserved totals are not terms
     "peak_mem_gib": GiB,                     # else memory total, else the sum of the terms
     "time": {<part>: s, "exposed_comm": {<dim>: s}, "total": s}   # or "step_time"; keys may end _s
     "step_time_s": s,
     "comm": [{"collective", "dimension", "tier", "bytes", "seconds", "exposed_s", "count"}],
     "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "usd_per_million_tokens", "hours_to_tokens"}

A plan result (`trainplan plan --json`) is `{"plan": <plan.json>, "runners_up": [cand],
"pareto": [cand]}` where a candidate is `{"layout": {...}, "estimate": {...}}` (a plan.json is a
candidate too). A bare plan.json is a plan result without runners-up.
"""

from __future__ import annotations

from dataclasses import dataclass, field

GiB = 1024**3
INTER_NODE_TIERS = ("efa", "ib", "infiniband", "ethernet", "roce", "inter_node", "inter-node")

_NOT_TERMS = ("total", "peak", "capacity", "headroom", "worst", "band", "fits", "gpu")


@dataclass(frozen=True)
class CommRow:
    collective: str
    dimension: str
    tier: str
    bytes: float  # per GPU per step
    seconds: float
    exposed_s: float
    count: float


@dataclass(frozen=True)
class Candidate:
    """One plan as the report draws it: a label, its memory and time terms, its ledger."""

    label: str
    layout_short: str
    memory_gib: dict[str, float]
    peak_mem_gib: float
    time_s: dict[str, float]
    step_time_s: float | None
    comm: tuple[CommRow, ...]
    tokens_per_s: float | None
    tokens_per_s_per_gpu: float | None
    mfu: float | None
    usd_per_million_tokens: float | None
    extra: dict = field(default_factory=dict)

    @property
    def inter_node_bytes(self) -> float:
        return sum(r.bytes for r in self.comm if is_inter_node(r.tier))

    @property
    def comm_bytes(self) -> float:
        return sum(r.bytes for r in self.comm)


def is_inter_node(tier: str) -> bool:
    return tier.lower() in INTER_NODE_TIERS


def _num(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _sum_nested(v) -> float | None:
    if isinstance(v, dict):
        vals = [_sum_nested(x) for x in v.values()]
        vals = [x for x in vals if x is not None]
        return sum(vals) if vals else None
    return _num(v)


def _is_term(key: str) -> bool:
    k = key.lower()
    return not k.startswith(_NOT_TERMS) and k not in ("allocated", "reserved", "stage", "kind")


def memory_terms_gib(mem: dict | None) -> dict[str, float]:
    """Memory terms in GiB from any of the accepted shapes (module docstring)."""
    if not isinstance(mem, dict):
        return {}
    if isinstance(mem.get("gib"), dict):
        return {k: v for k, v in ((k, _sum_nested(v)) for k, v in mem["gib"].items() if _is_term(k))
                if v is not None}
    source = mem["bytes"] if isinstance(mem.get("bytes"), dict) else mem
    out: dict[str, float] = {}
    has_gib = any(k.endswith("_gib") for k in source)
    for k, v in source.items():
        if has_gib and not k.endswith("_gib"):
            continue  # bytes and GiB side by side: read the GiB ones only
        name = k.removesuffix("_gib").removesuffix("_bytes")
        if not _is_term(name):
            continue
        val = _sum_nested(v)
        if val is None:
            continue
        out[name] = val if k.endswith("_gib") else val / GiB
    return out


def _memory_total_gib(est: dict, terms: dict[str, float]) -> float:
    for v in (est.get("peak_mem_gib"),):
        if _num(v) is not None:
            return float(v)
    mem = est.get("memory") or {}
    if isinstance(mem, dict):
        for key, scale in (("total_gib", 1.0), ("peak_mem_gib", 1.0), ("total", 1 / GiB),
                           ("total_bytes", 1 / GiB)):
            if _num(mem.get(key)) is not None:
                return float(mem[key]) * scale
    return sum(terms.values())


def time_terms_s(t: dict | None) -> dict[str, float]:
    """Step-time parts in seconds; nested dicts (exposed comm per dimension) become 'name dim'."""
    if not isinstance(t, dict):
        return {}
    out: dict[str, float] = {}
    for k, v in t.items():
        name = k.removesuffix("_s").replace("_", " ")
        if not _is_term(k):
            continue
        if isinstance(v, dict):
            for sub, sv in v.items():
                if _num(sv) is not None and _is_term(sub):
                    out[f"{name} {sub.removesuffix('_s')}"] = float(sv)
        elif _num(v) is not None:
            out[name] = float(v)
    return out


def _first(d: dict, keys: tuple[str, ...], default=None):
    for k in keys:
        if k in d and d[k] is not None:
            return d[k]
    return default


def comm_rows(ledger) -> tuple[CommRow, ...]:
    rows = []
    for e in ledger or ():
        if not isinstance(e, dict):
            continue
        rows.append(CommRow(
            collective=str(_first(e, ("collective", "op", "kind"), "?")),
            dimension=str(_first(e, ("dimension", "dim", "group"), "?")),
            tier=str(_first(e, ("tier", "link"), "?")),
            bytes=float(_first(e, ("bytes", "bytes_per_gpu", "bytes_per_step"), 0.0)),
            seconds=float(_first(e, ("seconds", "time_s", "s"), 0.0)),
            exposed_s=float(_first(e, ("exposed_s", "exposed_seconds", "exposed"), 0.0)),
            count=float(_first(e, ("count", "calls"), 1)),
        ))
    return tuple(rows)


def layout_short(layout: dict | None) -> str:
    """'bf16 ac=full mb=2 ga=4 dp=1x8(fsdp) tp=2' from a layout dict, like Layout.short()."""
    if not isinstance(layout, dict):
        return "?"
    L = layout
    parts = [str(L.get("precision", "?")), f"ac={L.get('ac', '?')}",
             f"mb={L.get('micro_batch', '?')}", f"ga={L.get('grad_accum', '?')}",
             f"dp={L.get('dp_replicate', 1)}x{L.get('dp_shard', 1)}({L.get('sharding', '?')})"]
    parts += [f"{k}={L[k]}" for k in ("tp", "pp", "cp", "ep") if (L.get(k) or 1) > 1]
    return " ".join(parts)


def candidate(d: dict, label: str) -> Candidate:
    """A candidate (plan.json, or {"layout", "estimate"}) as a flat view."""
    est = d.get("estimate") or {}
    mem = memory_terms_gib(est.get("memory"))
    tdict = _first(est, ("time", "step_time_breakdown", "step_time"))
    t = time_terms_s(tdict if isinstance(tdict, dict) else None)
    step = _num(est.get("step_time_s"))
    if step is None and isinstance(tdict, dict):
        step = _num(_first(tdict, ("total", "total_s")))
    if step is None and t:
        step = sum(t.values())
    return Candidate(
        label=label,
        layout_short=str(d.get("short") or layout_short(d.get("layout"))),
        memory_gib=mem,
        peak_mem_gib=_memory_total_gib(est, mem),
        time_s=t,
        step_time_s=step,
        comm=comm_rows(_first(est, ("comm", "comm_ledger", "ledger"))),
        tokens_per_s=_num(est.get("tokens_per_s")),
        tokens_per_s_per_gpu=_num(est.get("tokens_per_s_per_gpu")),
        mfu=_num(est.get("mfu")),
        usd_per_million_tokens=_num(est.get("usd_per_million_tokens")),
        extra={k: est[k] for k in ("binding", "band", "hours_to_tokens", "usd_to_tokens",
                                   "cost_per_hour") if k in est},
    )


@dataclass(frozen=True)
class PlanView:
    title: str
    plan: dict  # the chosen plan.json
    chosen: Candidate
    runners_up: tuple[Candidate, ...]
    pareto: tuple[Candidate, ...]
    capacity_gib: float | None
    gpu_name: str
    reasons: tuple[str, ...]


def plan_view(result: dict) -> PlanView:
    from trainplan.errors import TrainplanError

    if not isinstance(result, dict):
        raise TrainplanError("plan report: expected a JSON object from `trainplan plan --json`")
    plan = result if "layout" in result and "model" in result else _first(
        result, ("plan", "chosen", "best"))
    if not isinstance(plan, dict):
        raise TrainplanError(
            "plan report: no plan found; expected a plan.json or `trainplan plan --json` output "
            "with a 'plan' key")
    runners = [candidate(c, f"#{i + 2}") for i, c in
               enumerate(_first(result, ("runners_up", "runner_ups", "alternatives"), []) or [])]
    pareto = [candidate(c, f"P{i + 1}") for i, c in
              enumerate(_first(result, ("pareto", "pareto_set"), []) or [])]
    cluster = plan.get("cluster") or {}
    capacity, gpu_name = _capacity_gib(str(cluster.get("instance", "")))
    model = (plan.get("model") or {}).get("name", "model")
    title = f"{model} on {cluster.get('nodes', '?')} x {cluster.get('instance', '?')}"
    return PlanView(title=title, plan=plan, chosen=candidate(plan, "chosen"),
                    runners_up=tuple(runners), pareto=tuple(pareto), capacity_gib=capacity,
                    gpu_name=gpu_name, reasons=tuple(plan.get("reasons") or result.get("reasons") or ()))


def _capacity_gib(instance: str) -> tuple[float | None, str]:
    """The GPU memory of an instance from the catalog; (None, '?') for an unknown one."""
    from trainplan.errors import TrainplanError
    from trainplan.hardware import find_node

    try:
        node = find_node(instance)
    except TrainplanError:
        return None, "?"
    return node.gpu.memory_bytes / GiB, node.gpu.name
