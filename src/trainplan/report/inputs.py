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
    inter_node_bytes_per_token: float | None = None  # all GPUs, per trained token
    extra: dict = field(default_factory=dict)

    @property
    def inter_node_bytes(self) -> float:
        """Bytes each GPU sends over inter-node links per step (from the ledger)."""
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


# Parallel dimensions: a step-time part named after one is the communication of that dimension
# that is not hidden behind compute (the step-time helper's StepTime fields).
_DIMS = ("dp", "fsdp", "hsdp", "tp", "pp", "cp", "ep", "sp")
# StepTime is an exact partition (costs/steptime.py): `compute` is GEMM + attention only.
_PART_NAMES = {"compute": "GEMM + attention", "nongemm": "non-GEMM", "non_gemm": "non-GEMM"}


def time_terms_s(t: dict | None) -> dict[str, float]:
    """Non-zero step-time parts in seconds. A part named after a parallel dimension, or nested
    under an 'exposed comm' dict, becomes 'exposed comm <dim>'; the total is not a part."""
    if not isinstance(t, dict):
        return {}
    out: dict[str, float] = {}
    for k, v in t.items():
        key = k.removesuffix("_s")
        if not _is_term(key):
            continue
        if isinstance(v, dict):
            for sub, sv in v.items():
                if _num(sv) and _is_term(sub):
                    out[f"{key.replace('_', ' ')} {sub.removesuffix('_s')}"] = float(sv)
        elif _num(v):
            name = f"exposed comm {key}" if key in _DIMS else _PART_NAMES.get(key, key.replace("_", " "))
            out[name] = float(v)
    return _reconcile(out, _num(_first(t, ("total", "total_s"))))


def _reconcile(parts: dict[str, float], total: float | None) -> dict[str, float]:
    """Make the stacked parts add up to the step's total: a total larger than its parts keeps the
    rest visible as 'other' (a step-time source with terms this report does not know)."""
    if total is None or not parts:
        return parts
    excess = sum(parts.values()) - total
    tol = 1e-6 * max(total, 1e-9)
    if excess < -tol:
        return {**parts, "other": -excess}
    return parts


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
    from trainplan.errors import TrainplanError
    from trainplan.layout import layout_from_dict

    try:
        return layout_from_dict(layout).short()
    except (TrainplanError, TypeError):
        pass  # a layout from another trainplan version: the same summary from the keys we know
    L = layout
    parts = [str(L.get("precision", "?")), f"ac={L.get('ac', '?')}",
             f"mb={L.get('micro_batch', '?')}", f"ga={L.get('grad_accum', '?')}",
             f"dp={L.get('dp_replicate', 1)}x{L.get('dp_shard', 1)}({L.get('sharding', '?')})"]
    parts += [f"{k}={L[k]}" for k in ("tp", "pp", "cp", "ep") if (L.get(k) or 1) > 1]
    return " ".join(parts)


def candidate(d: dict, label: str, gpus: int | None = None, tokens_per_step: int | None = None) -> Candidate:
    """A candidate with an estimate (a plan.json, or {"layout", "estimate"}) as a flat view.
    With `gpus` and `tokens_per_step`, inter-node bytes per token come from the ledger."""
    est = d.get("estimate") or {}
    mem = memory_terms_gib(est.get("memory"))
    tdict = _first(est, ("time_s", "time", "step_time_breakdown", "step_time"))
    t = time_terms_s(tdict if isinstance(tdict, dict) else None)
    step = _num(est.get("step_time_s"))
    if step is None and isinstance(tdict, dict):
        step = _num(_first(tdict, ("total", "total_s")))
    if step is None and t:
        step = sum(t.values())
    comm = comm_rows(_first(est, ("comm", "comm_ledger", "ledger")))
    inter = _num(est.get("inter_node_bytes_per_token"))
    if inter is None and gpus and tokens_per_step:
        inter = sum(r.bytes for r in comm if is_inter_node(r.tier)) * gpus / tokens_per_step
    return Candidate(
        label=label,
        layout_short=str(d.get("layout_short") or layout_short(d.get("layout"))),
        memory_gib=mem,
        peak_mem_gib=_memory_total_gib(est, mem),
        time_s=t,
        step_time_s=step,
        comm=comm,
        tokens_per_s=_num(est.get("tokens_per_s")),
        tokens_per_s_per_gpu=_num(est.get("tokens_per_s_per_gpu")),
        mfu=_num(est.get("mfu")),
        usd_per_million_tokens=_num(est.get("usd_per_million_tokens")),
        inter_node_bytes_per_token=inter,
        extra={k: est[k] for k in ("binding", "band", "hours_to_tokens", "usd_to_tokens",
                                   "cost_per_hour", "profile") if est.get(k) is not None},
    )


def search_candidate(entry: dict, label: str, plan: dict) -> Candidate:
    """A `trainplan plan --json` runner-up or Pareto entry (flat totals, no breakdown).

    The entry carries totals only; the breakdowns the plots stack are recomputed with
    `trainplan.estimate.estimate` for the entry's own instance, nodes, sequence and layout. If
    that is impossible (no estimate module, a profile other than the default) or disagrees with
    the entry's throughput by more than 1%, the report shows the totals without breakdown rather
    than a breakdown that does not add up to the number beside it.
    """
    if isinstance(entry.get("estimate"), dict):
        return candidate(entry, label)
    full = _recompute(entry, plan)
    tps = _num(entry.get("tokens_per_s"))
    if full is not None and tps and abs(full.get("tokens_per_s", 0) / tps - 1) > 0.01:
        full = None
    gpus = entry.get("gpus")
    tokens_per_step = (entry.get("seq_len") or 0) * (entry.get("global_batch") or 0)
    base = candidate({**entry, "estimate": full or {}}, label, gpus, tokens_per_step or None)
    usd_b = _num(entry.get("usd_per_billion_tokens"))
    peak = _num(entry.get("memory_gib"))
    return Candidate(
        label=label, layout_short=base.layout_short, memory_gib=base.memory_gib,
        peak_mem_gib=peak if peak is not None else base.peak_mem_gib,
        time_s=base.time_s, step_time_s=_num(entry.get("step_time_s")) or base.step_time_s,
        comm=base.comm, tokens_per_s=tps, tokens_per_s_per_gpu=_num(entry.get("tokens_per_s_per_gpu")),
        mfu=_num(entry.get("mfu")), usd_per_million_tokens=None if usd_b is None else usd_b / 1000,
        inter_node_bytes_per_token=_num(entry.get("inter_node_bytes_per_token")),
        extra={k: entry[k] for k in ("binding", "instance", "nodes", "seq_len", "oom_risk",
                                     "capacity_gib", "headroom_gib") if entry.get(k) is not None},
    )


def _recompute(entry: dict, plan: dict) -> dict | None:
    from trainplan.errors import TrainplanError

    try:
        from trainplan.estimate import estimate
        from trainplan.hardware import Cluster, find_node
        from trainplan.job import Job, Workload
        from trainplan.layout import layout_from_dict
        from trainplan.models.spec import spec_from_dict
    except ImportError:
        return None
    try:
        wl = plan.get("workload") or {}
        job = Job(spec_from_dict(plan["model"]),
                  Cluster(find_node(str(entry["instance"])), int(entry["nodes"])),
                  Workload(seq_len=int(entry["seq_len"]), global_batch=int(entry["global_batch"]),
                           tokens=int(wl.get("tokens") or 0)))
        return estimate(job, layout_from_dict(entry["layout"])).to_dict()
    except (TrainplanError, KeyError, TypeError, ValueError):
        return None


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
    cluster = plan.get("cluster") or {}
    wl = plan.get("workload") or {}
    capacity, gpu_name = _capacity_gib(str(cluster.get("instance", "")))
    gpus = _gpus(cluster)
    tokens_per_step = (wl.get("seq_len") or 0) * (wl.get("global_batch") or 0) or None
    runners = [search_candidate(c, f"#{i + 2}", plan) for i, c in
               enumerate(_first(result, ("runners_up", "runner_ups", "alternatives"), []) or [])]
    pareto = [search_candidate(c, f"P{i + 1}", plan) for i, c in
              enumerate(_first(result, ("pareto", "pareto_set"), []) or [])]
    model = (plan.get("model") or {}).get("name", "model")
    title = f"{model} on {cluster.get('nodes', '?')} x {cluster.get('instance', '?')}"
    return PlanView(title=title, plan=plan, chosen=candidate(plan, "chosen", gpus, tokens_per_step),
                    runners_up=tuple(runners), pareto=tuple(pareto), capacity_gib=capacity,
                    gpu_name=gpu_name, reasons=tuple(plan.get("reasons") or result.get("reasons") or ()))


def _gpus(cluster: dict) -> int | None:
    from trainplan.errors import TrainplanError
    from trainplan.hardware import find_node

    try:
        return find_node(str(cluster.get("instance", ""))).gpus_per_node * int(cluster.get("nodes", 0))
    except (TrainplanError, TypeError, ValueError):
        return None


def _capacity_gib(instance: str) -> tuple[float | None, str]:
    """The GPU memory of an instance from the catalog; (None, '?') for an unknown one."""
    from trainplan.errors import TrainplanError
    from trainplan.hardware import find_node

    try:
        node = find_node(instance)
    except TrainplanError:
        return None, "?"
    return node.gpu.memory_bytes / GiB, node.gpu.name
