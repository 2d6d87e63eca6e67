"""What the search knows about one evaluated candidate: its job, its layout and a few numbers.

`Metrics` is the search's view of an estimate: only the quantities objectives, the Pareto set and
the reasons compare. The evaluator (evaluator.py) fills it from `trainplan.estimate.Estimate`;
tests fill it from a small fake model, so the search logic is tested apart from the cost model.
The candidates a search returns (chosen, runners-up, Pareto set) also carry the full `Estimate`
(memory breakdown, step-time breakdown, communication ledger, cost), which plan.json keeps.

Money and time come from costs/cost.py, the one definition of cost: per million tokens and hours,
converted to other units only where they are displayed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainplan.costs.cost import Cost, cost
from trainplan.job import Job
from trainplan.layout import Layout


@dataclass(frozen=True, slots=True)
class Metrics:
    tokens_per_s: float  # whole cluster
    step_time_s: float
    memory_bytes: float  # predicted peak per GPU, worst rank
    memory_high_bytes: float  # upper end of the memory uncertainty band
    capacity_bytes: float  # GPU memory the framework can use
    inter_node_bytes_per_token: float  # bytes sent over the network (EFA/IB) per trained token, all GPUs
    gpu_bytes_per_token: float  # bytes sent between GPUs over any link per trained token, all GPUs
    mfu: float  # model FLOPs / (step time x GPUs x bf16 dense peak: precision.mfu_peak, every recipe)
    binding: str  # what limits the step: "compute", "memory", "efa", "nvlink", "pipeline bubble", ...
    recompute_s: float = 0.0  # part of step_time_s spent re-running checkpointed forwards
    tokens_per_s_low: float = 0.0  # lower end of the throughput band (0 = no band known)
    tokens_per_s_high: float = 0.0


@dataclass(frozen=True, slots=True)
class Candidate:
    job: Job
    layout: Layout
    metrics: Metrics
    # the full trainplan.estimate.Estimate, filled for the candidates a search returns
    estimate: object | None = field(default=None, compare=False)

    @property
    def nodes(self) -> int:
        return self.job.cluster.nodes

    @property
    def gpus(self) -> int:
        return self.job.cluster.num_gpus

    @property
    def instance(self) -> str:
        return self.job.cluster.node.name

    @property
    def seq_len(self) -> int:
        return self.job.workload.seq_len

    @property
    def global_batch(self) -> int:
        return self.job.workload.global_batch

    @property
    def tokens_per_s(self) -> float:
        return self.metrics.tokens_per_s

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.metrics.tokens_per_s / self.gpus

    @property
    def tokens_per_s_without_recompute(self) -> float:
        """An upper bound on what a finer checkpointing choice of this mesh can reach."""
        m = self.metrics
        return self.job.workload.tokens_per_step / max(m.step_time_s - m.recompute_s, 1e-12)

    @property
    def headroom_bytes(self) -> float:
        return self.metrics.capacity_bytes - self.metrics.memory_bytes

    @property
    def oom_risk(self) -> bool:
        """The memory band crosses the GPU's capacity (issue 5: not recommended by default)."""
        return self.metrics.memory_high_bytes > self.metrics.capacity_bytes

    @property
    def usd_per_hour(self) -> float | None:
        return self.job.cluster.price_per_hour

    def cost(self, tokens: int = 0) -> Cost:
        """Price and time of this candidate's throughput, to `tokens` when given (costs/cost.py)."""
        return cost(self.job.cluster, self.tokens_per_s, tokens)

    @property
    def usd_per_million_tokens(self) -> float | None:
        return self.cost().usd_per_million_tokens

    def usd_for(self, tokens: int) -> float | None:
        return self.cost(tokens).usd_to_tokens

    def to_dict(self, tokens: int = 0) -> dict:
        m = self.metrics
        # goodput comes with the full estimate (the chosen plan, runners-up and Pareto set have one)
        g = None if self.estimate is None else self.estimate.goodput
        return {
            "instance": self.instance,
            "nodes": self.nodes,
            "gpus": self.gpus,
            "seq_len": self.seq_len,
            "global_batch": self.global_batch,
            "layout": self.layout.to_dict(),
            "layout_short": self.layout.short(),
            "tokens_per_s": m.tokens_per_s,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "tokens_per_s_band": [m.tokens_per_s_low or None, m.tokens_per_s_high or None],
            "step_time_s": m.step_time_s,
            "mfu": m.mfu,
            "memory_gib": m.memory_bytes / 1024**3,
            "memory_high_gib": m.memory_high_bytes / 1024**3,
            "capacity_gib": m.capacity_bytes / 1024**3,
            "headroom_gib": self.headroom_bytes / 1024**3,
            "oom_risk": self.oom_risk,
            "inter_node_bytes_per_token": m.inter_node_bytes_per_token,
            "gpu_bytes_per_token": m.gpu_bytes_per_token,
            "binding": m.binding,
            **self.cost(tokens).to_dict(),
            "goodput": None if g is None else g.goodput,
            "checkpoint_interval_steps": None if g is None else g.checkpoint_interval_steps,
        }
