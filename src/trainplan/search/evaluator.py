"""The evaluator is a parameter of the search: what it asks of a cost model.

    memory(job, layout) -> bytes            predicted peak per GPU, worst rank (point estimate)
    memory_band(job) -> MemoryBand           relative memory error a fitting layout leaves below capacity
    evaluate(job, layout, memory) -> Metrics step time, throughput, bytes moved
    detail(job, layout) -> Estimate | None   the full estimate, for the candidates a search returns

`ModelEvaluator` answers with trainplan's cost model (costs.memory, estimate); tests pass a small
fake. `Counting` wraps either with a cache, the fit rule and call counters (the benchmark reports
candidates evaluated per second from them).
"""

from __future__ import annotations

from typing import Protocol

from trainplan.costs.fit import capacity, within
from trainplan.job import Job
from trainplan.layout import Layout
from trainplan.profile import MemoryBand
from trainplan.search.candidate import Metrics


class Evaluator(Protocol):
    def memory_band(self, job: Job) -> MemoryBand: ...

    def memory(self, job: Job, layout: Layout) -> float: ...

    def evaluate(self, job: Job, layout: Layout, memory: float) -> Metrics: ...

    def detail(self, job: Job, layout: Layout): ...


def _key(job: Job, layout: Layout) -> tuple:
    # Job holds dicts (sources) and is not hashable; these fields are what varies during a search.
    c, w = job.cluster, job.workload
    return (job.model.name, c.node.name, c.nodes, w.seq_len, w.global_batch, layout)


class Counting:
    """Caches answers per (job, layout), applies the fit rule and counts calls to the cost model.

    Fit rule (costs.fit.within, the one definition): a layout fits when its memory band stays
    within the capacity, memory * (1 + band) <= capacity, the band being the evaluator's
    memory_band(job).error; with allow_risk, when the point estimate does (band 0). Layouts between
    the two are recorded as risky.
    """

    def __init__(self, inner: Evaluator, allow_risk: bool = False):
        self.inner = inner
        self.allow_risk = allow_risk
        self.memory_calls = 0
        self.evaluate_calls = 0
        self.risky: dict[tuple, MemoryBand] = {}  # layouts whose point fits but whose band does not
        self._memory: dict[tuple, float] = {}
        self._metrics: dict[tuple, Metrics] = {}

    def memory(self, job: Job, layout: Layout) -> float:
        k = _key(job, layout)
        hit = self._memory.get(k)
        if hit is None:
            self.memory_calls += 1
            hit = self._memory[k] = self.inner.memory(job, layout)
        return hit

    def fits(self, job: Job, layout: Layout) -> bool:
        mem, cap = self.memory(job, layout), capacity(job)
        if not within(mem, cap):
            return False
        band = self.inner.memory_band(job)
        if within(mem, cap, band.error):
            return True
        self.risky[_key(job, layout)] = band
        return self.allow_risk

    def risky_node_counts(self, instance: str) -> set[int]:
        """The node counts of `instance` where some layout was recorded as risky."""
        return {k[2] for k in self.risky if k[1] == instance}

    def risk_band(self) -> MemoryBand | None:
        """The widest band that set a layout aside (one model per search: one band)."""
        return max(self.risky.values(), key=lambda b: b.error, default=None)

    def evaluate(self, job: Job, layout: Layout) -> Metrics:
        k = _key(job, layout)
        hit = self._metrics.get(k)
        if hit is None:
            self.evaluate_calls += 1
            hit = self._metrics[k] = self.inner.evaluate(job, layout, self.memory(job, layout))
        return hit

    def detail(self, job: Job, layout: Layout):
        return self.inner.detail(job, layout)

    def memory_band(self, job: Job) -> MemoryBand:
        return self.inner.memory_band(job)


class ModelEvaluator:
    """trainplan's cost model. The memory band is the calibration profile's cross-validated p90
    error of peak memory for runs of the model's kind (Profile.memory_band)."""

    def __init__(self, profile=None):
        from trainplan.costs.memory import memory_total
        from trainplan.estimate import estimate
        from trainplan.profile import default_profile

        self.profile = profile or default_profile()
        self._memory, self._estimate = memory_total, estimate
        self._bands = {moe: self.profile.memory_band(moe) for moe in (False, True)}

    def memory_band(self, job: Job) -> MemoryBand:
        return self._bands[job.model.moe is not None]

    def memory(self, job: Job, layout: Layout) -> float:
        return self._memory(job, layout)

    def evaluate(self, job: Job, layout: Layout, memory: float) -> Metrics:
        # The memory is known already (the search asked for it first): skip it in the estimate.
        est = self._estimate(job, layout, self.profile, with_memory=False)
        return metrics_from_estimate(est, job, memory, self.memory_band(job).error)

    def detail(self, job: Job, layout: Layout):
        return self._estimate(job, layout, self.profile)


def model_evaluator(profile=None) -> Evaluator:
    return ModelEvaluator(profile)


def metrics_from_estimate(est, job: Job, memory: float, memory_error: float) -> Metrics:
    """The numbers the search compares, read from a `trainplan.estimate.Estimate`; traffic per
    token by costs/comm.traffic_per_token (the bytes that cross the network, as timed); the
    throughput band is the estimate's own (band.py, through Profile.throughput_band), over every GPU."""
    from trainplan.costs.comm import traffic_per_token

    inter, total = traffic_per_token(est.comm, job.cluster.num_gpus, job.workload.tokens_per_step)
    cap = capacity(job)
    tps = est.tokens_per_s
    return Metrics(
        tokens_per_s=tps,
        step_time_s=est.time.total,
        memory_bytes=memory,
        memory_high_bytes=memory * (1 + memory_error),
        capacity_bytes=cap,
        inter_node_bytes_per_token=inter,
        gpu_bytes_per_token=total,
        mfu=est.mfu,
        binding=est.binding,
        recompute_s=est.time.recompute,
        tokens_per_s_low=est.cluster_band[0],
        tokens_per_s_high=est.cluster_band[1],
    )
