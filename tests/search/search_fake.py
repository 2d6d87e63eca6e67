"""A small, transparent cost model for testing the search logic apart from trainplan's own.

Memory: 16 bytes per parameter sharded per the sharding mode (Rajbhandari et al. 2020, ZeRO,
section 3.1: 2 + 2 + 12 bytes for mixed-precision Adam), activations of 34 h bytes per token per
layer without checkpointing (Korthikanti et al. 2022, eq. 1 without the attention-score term),
2 h with full checkpointing, fp32 logits. Time: 6N FLOPs per token at 60% of the GEMM dtype's peak,
a pipeline bubble of (pp - 1) / micro-batches, and data-parallel traffic over the network when
the job spans nodes. Not calibrated: only its monotonic shape matters to the tests.
"""

from __future__ import annotations

from trainplan.models import count_params
from trainplan.precision import recipe
from trainplan.profile import MemoryBand
from trainplan.search import Metrics

GiB = 1024**3
ACT = {"none": 34, "selective": 20, "full": 2, "offload": 0}
RECOMPUTE = {"none": 0.0, "selective": 0.05, "full": 1 / 3, "offload": 1 / 3}


class FakeEvaluator:
    band = MemoryBand(0.10, "the fake's band")

    def memory_band(self, job) -> MemoryBand:
        return self.band

    def __init__(self):
        self.memory_calls = self.evaluate_calls = 0

    def _params(self, m) -> int:
        return count_params(m).total

    def memory(self, job, L) -> float:
        self.memory_calls += 1
        m, w = job.model, job.workload
        p = self._params(m) / (L.tp * L.pp)
        per_param = {"fsdp": 16 / L.dp_shard, "zero1": 4 + 12 / L.dp_shard, "zero2": 2 + 14 / L.dp_shard,
                     "none": 16}[L.sharding]
        states = p * per_param + (p if recipe(L.precision).low_precision else 0)
        lps = -(-m.num_layers // L.pp)
        tokens = L.micro_batch * w.seq_len / L.cp
        if L.ac == "partial":
            per_layer = (L.ac_layers * 2 + (lps - L.ac_layers) * 34) / lps
        else:
            per_layer = ACT[L.ac]
        act = tokens * m.hidden_size * per_layer * lps / L.tp
        if L.ac in ("full", "offload", "partial"):
            act += tokens * m.hidden_size * 34 / L.tp  # one layer recomputed in backward
        act *= min(L.pp, L.grad_accum) if L.pp > 1 else 1
        logits = tokens * m.vocab_size * 4 / L.tp / (8 if L.chunked_loss else 1)
        return states + act + logits + 3 * GiB

    def evaluate(self, job, L, memory: float) -> Metrics:
        self.evaluate_calls += 1
        m, c, w = job.model, job.cluster, job.workload
        n = self._params(m)
        G = c.num_gpus
        rate = recipe(L.precision).peak(c.gpu) * 0.6 / (1 + 0.04 * (L.tp - 1)) / (1 + 0.2 / L.micro_batch)
        if L.ac == "partial":
            rec = L.ac_layers / -(-m.num_layers // L.pp) / 3
        else:
            rec = RECOMPUTE[L.ac]
        compute = 6 * n * w.tokens_per_step * (1 + rec) / (G * rate)
        bubble = compute * (L.pp - 1) / (L.grad_accum * L.vp)
        grad_bytes = 2 * 2 * n / (L.tp * L.pp)  # reduce-scatter + all-gather of bf16 values, per GPU
        tp_bytes = 0 if L.tp == 1 else 8 * m.hidden_size * m.num_layers / L.pp * w.tokens_per_step / G
        p2p = 0 if L.pp == 1 else 4 * m.hidden_size * (L.pp - 1) * w.tokens_per_step / G  # fwd + bwd
        inter = (grad_bytes if L.dp > 1 else 0.0) + p2p if c.nodes > 1 else 0.0
        exposed = 0.3 * inter / c.node.inter_node_bandwidth_per_gpu + 0.2 * tp_bytes / c.gpu.nvlink_bandwidth
        step = compute + bubble + exposed
        per_token = G / w.tokens_per_step
        return Metrics(
            tokens_per_s=w.tokens_per_step / step, step_time_s=step, memory_bytes=memory,
            memory_high_bytes=memory * (1 + self.band.error), capacity_bytes=c.gpu.memory_bytes,
            inter_node_bytes_per_token=inter * per_token,
            gpu_bytes_per_token=(grad_bytes + tp_bytes + p2p) * per_token,
            mfu=6 * n * w.tokens_per_step / step / (G * recipe(L.precision).peak(c.gpu)),
            binding="compute" if compute > bubble + exposed else "bubble",
            recompute_s=compute * rec / (1 + rec),
        )

    def detail(self, job, L):
        return None  # the fake has no breakdowns to give
