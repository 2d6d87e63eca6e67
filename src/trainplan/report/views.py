"""What the plan report draws, read from a typed `trainplan.plan.Plan` and nothing else.

A plan.json carries the chosen plan, its runners-up and its Pareto set, each with the full
estimate the planner made (memory breakdown, step-time breakdown, communication ledger, cost;
plan.py reads them back into `Estimate` objects). This module only names and groups those
numbers for tables and plots: it never estimates, so the report shows exactly what the planner
wrote. Units: GiB for memory and seconds for time, as the report prints them; bytes stay bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainplan.costs.comm import traffic_per_token
from trainplan.job import Job
from trainplan.layout import Layout
from trainplan.plan import Plan
from trainplan.units import GiB

# StepTime fields (costs/steptime.py, an exact partition of the step) as the report names them
_PART_NAMES = {"compute": "GEMM + attention", "nongemm": "non-GEMM", "offload": "exposed offload copies",
               "launch": "kernel launch",
               **{d: f"exposed comm {d}" for d in ("dp", "tp", "pp", "cp", "ep")}}

# Memory terms (costs/memory.MemoryBreakdown) grouped for the stacked bars; hover lists the terms.
MEMORY_GROUPS = {
    "parameters": ("params", "master_params", "unsharded_params", "fp8_weights", "fp8_scales"),
    "gradients": ("grads", "unsharded_grads"),
    "optimizer states": ("optimizer_states",),
    "activations": ("activations", "recompute_working", "activation_grads", "cp_buffers"),
    "logits and loss": ("logits",),
    "runtime overheads": ("workspace", "fragmentation", "nccl_buffers", "cuda_context"),
}


@dataclass(frozen=True)
class Row:
    """One plan as the report draws it: a label, its job and layout, its estimate."""

    label: str
    job: Job
    layout: Layout
    estimate: object | None  # trainplan.estimate.Estimate

    @property
    def instance(self) -> str:
        return self.job.cluster.node.name

    @property
    def nodes(self) -> int:
        return self.job.cluster.nodes

    @property
    def capacity_gib(self) -> float:
        return self.job.cluster.gpu.memory_bytes / GiB

    @property
    def peak_mem_gib(self) -> float | None:
        return None if self.estimate is None else self.estimate.peak_mem_gib

    @property
    def headroom_gib(self) -> float | None:
        p = self.peak_mem_gib
        return None if p is None else self.capacity_gib - p

    def memory_gib(self) -> dict[str, dict[str, float]]:
        """{group: {term: GiB}} of the non-zero terms of the worst rank."""
        mem = None if self.estimate is None else self.estimate.memory
        if mem is None:
            return {}
        terms = mem.terms()
        out: dict[str, dict[str, float]] = {}
        for group, names in MEMORY_GROUPS.items():
            parts = {n: terms[n] / GiB for n in names if terms.get(n)}
            if parts:
                out[group] = parts
        return out

    def time_s(self) -> dict[str, float]:
        """The non-zero parts of the step, named for people; they add up to the step time."""
        if self.estimate is None:
            return {}
        t = self.estimate.time.to_dict()
        return {_PART_NAMES.get(k, k): v for k, v in t.items() if k != "total" and v}

    def traffic_per_token(self) -> tuple[float, float] | None:
        """(inter-node, any link) bytes per trained token, all GPUs (costs/comm.traffic_per_token)."""
        if self.estimate is None:
            return None
        return traffic_per_token(self.estimate.comm, self.job.cluster.num_gpus, self.job.workload.tokens_per_step)

    def network_bytes_per_gpu(self) -> float:
        """Bytes each GPU sends over the inter-node network per step (the ledger's network part)."""
        return 0.0 if self.estimate is None else sum(e.network_bytes for e in self.estimate.comm)

    def summary(self) -> dict:
        """The numbers of this row as `trainplan report --json` prints them (SI, units in names)."""
        e = self.estimate
        w = self.job.workload
        d = {"label": self.label, "instance": self.instance, "nodes": self.nodes, "seq_len": w.seq_len,
             "global_batch": w.global_batch, "layout": self.layout.short(), "capacity_gib": self.capacity_gib}
        if e is None:
            return d
        inter, between = self.traffic_per_token()
        return {**d, "tokens_per_s": e.tokens_per_s, "tokens_per_s_per_gpu": e.tokens_per_s_per_gpu,
                "mfu": e.mfu, "step_time_s": e.step_time_s, "peak_mem_gib": e.peak_mem_gib,
                "inter_node_bytes_per_token": inter, "gpu_bytes_per_token": between,
                "binding": e.binding, **e.cost.to_dict(),
                "memory_gib": {g: sum(t.values()) for g, t in self.memory_gib().items()},
                "time_s": self.time_s()}


@dataclass(frozen=True)
class PlanView:
    title: str
    plan: Plan
    chosen: Row
    runners_up: tuple[Row, ...]
    pareto: tuple[Row, ...]
    scaling: tuple[Row, ...] = ()  # the chosen layout's family by node count

    @property
    def ranked(self) -> tuple[Row, ...]:
        return (self.chosen, *self.runners_up)


def _same(a, job: Job, layout: Layout) -> bool:
    return a.layout == layout and a.job.cluster.node.name == job.cluster.node.name \
        and a.job.cluster.nodes == job.cluster.nodes and a.job.workload == job.workload


def plan_view(plan: Plan) -> PlanView:
    """Labels: 'chosen', then '#2', '#3' ... for the runners-up in rank order; a Pareto member
    that is one of those keeps its label, the others are 'P1', 'P2' ..."""
    chosen = Row("chosen", plan.job, plan.layout, plan.estimate)
    runners = tuple(Row(f"#{i + 2}", a.job, a.layout, a.estimate) for i, a in enumerate(plan.runners_up))
    pareto = []
    for i, a in enumerate(plan.pareto):
        known = next((r for r in (chosen, *runners) if _same(r, a.job, a.layout)), None)
        pareto.append(known or Row(f"P{i + 1}", a.job, a.layout, a.estimate))
    c = plan.job.cluster
    title = f"{plan.job.model.name} on {c.nodes} x {c.node.name}"
    scaling = tuple(Row(f"{a.job.cluster.nodes} nodes", a.job, a.layout, a.estimate) for a in plan.scaling)
    return PlanView(title, plan, chosen, runners, tuple(pareto), scaling)


def as_plan(data, where: str = "plan report") -> Plan:
    """A Plan from itself, a plan.json dict, or `trainplan plan --json` output (its 'plan')."""
    from trainplan.errors import TrainplanError
    from trainplan.plan import plan_from_dict

    if isinstance(data, Plan):
        return data
    if isinstance(data, dict) and isinstance(data.get("plan"), dict) and "schema" not in data:
        data = data["plan"]
    if not isinstance(data, dict) or "schema" not in data:
        raise TrainplanError(f"{where}: no plan found; expected a plan.json or `trainplan plan --json` "
                             "output with a 'plan' key")
    return plan_from_dict(data, where)
