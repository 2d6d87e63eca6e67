"""What a person asks the search: model, hardware, sequence, batch, budget and priority."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainplan.costs.fit import MAX_SEQ_LEN
from trainplan.errors import TrainplanError
from trainplan.hardware.types import NodeType
from trainplan.job import DEFAULT_SEQ_LEN  # the workload's sequence when none is given
from trainplan.models.checks import context_limit
from trainplan.models.spec import ModelSpec
from trainplan.stacks import DEFAULT_STACK

# Default tokens per optimizer step when no --global-batch is given: 4 Mi tokens, the batch
# Llama 3 405B pre-training started with (Llama 3 paper, arXiv:2407.21783, section 3.4.1:
# "initial batch size of 4M tokens and sequences of length 4,096"). The global batch is the
# multiple of dp x micro-batch nearest to it; a layout whose dp x micro-batch alone holds more
# sequences than that has no default batch (one step would exceed 4 Mi tokens): on many GPUs the
# search then needs tp, pp or cp to keep dp small, as large runs do, instead of growing the batch.
DEFAULT_STEP_TOKENS = 2**22
MAX_MICRO_BATCH = 64


@dataclass(frozen=True, slots=True)
class BatchSpec:
    """Global batch in sequences: fixed (lo == hi), a range, or the default (both None)."""

    lo: int | None = None
    hi: int | None = None

    @property
    def fixed(self) -> bool:
        return self.lo is not None and self.lo == self.hi

    def _target(self, seq_len: int) -> int:
        return max(1, DEFAULT_STEP_TOKENS // seq_len)

    def micro_batches(self, dp: int, seq_len: int) -> list[int]:
        """Micro-batches (ascending) for which some gradient accumulation gives a valid batch."""
        if self.lo is None:
            top = self._target(seq_len) // dp
            return [m for m in (1, 2, 4, 8, 16, 32, 64) if m <= min(top, MAX_MICRO_BATCH)]
        if self.fixed:
            if self.lo % dp:
                return []
            per_rank = self.lo // dp
            return [m for m in range(1, min(per_rank, MAX_MICRO_BATCH) + 1) if per_rank % m == 0]
        return [m for m in range(1, min(self.hi // dp, MAX_MICRO_BATCH) + 1)
                if self.grad_accum(dp, m, seq_len) is not None]

    def grad_accum(self, dp: int, mb: int, seq_len: int) -> int | None:
        """Micro-batches per step for this dp and micro-batch; None when no batch in range works."""
        per_step = dp * mb
        if self.lo is None:
            if per_step > self._target(seq_len):
                return None  # even one micro-batch per rank is more than the default step
            return round(self._target(seq_len) / per_step)
        ga = self.hi // per_step
        if ga < 1 or per_step * ga < self.lo:
            return None
        return ga

    def describe(self) -> str:
        if self.lo is None:
            return f"about {DEFAULT_STEP_TOKENS / 2**20:.0f} Mi tokens per step"
        return str(self.lo) if self.fixed else f"{self.lo}..{self.hi} sequences"


def parse_batch(text: str | None) -> BatchSpec:
    """'512' (fixed) or '256:1024' / '256-1024' (a range of sequences per step)."""
    if text is None:
        return BatchSpec()
    t = text.strip().replace("-", ":")
    try:
        parts = [int(x) for x in t.split(":")]
    except ValueError:
        raise TrainplanError(f"--global-batch must be N or LO:HI sequences, got {text!r}") from None
    if len(parts) not in (1, 2) or any(p <= 0 for p in parts):
        raise TrainplanError(f"--global-batch must be N or LO:HI positive sequences, got {text!r}")
    lo, hi = parts[0], parts[-1]
    if lo > hi:
        raise TrainplanError(f"--global-batch range {text!r} is empty: {lo} > {hi}")
    return BatchSpec(lo, hi)


@dataclass(frozen=True)
class Query:
    model: ModelSpec
    instances: tuple[NodeType, ...]
    nodes: int | None = None  # a fixed node count
    max_nodes: int | None = None  # search 1..max_nodes; both None: the fewest nodes that fit
    seq_len: int | None = DEFAULT_SEQ_LEN  # None: the longest sequence that fits (--seq-len max)
    # with seq_len None: the shortest acceptable sequence, the workload's (costs.fit.longest_seq)
    min_seq_len: int = DEFAULT_SEQ_LEN
    batch: BatchSpec = field(default_factory=BatchSpec)
    tokens: int = 0  # tokens to train, for cost and time
    precision: str | None = None  # a fixed recipe; None lets the search choose
    priority: str = "throughput"
    tolerance: float = 0.05  # communication: plans within this fraction of the best tokens/s/GPU
    budget_usd: float | None = None  # USD cap for training `tokens` (search/sizing.py)
    days: float | None = None  # deadline for training `tokens` (search/sizing.py)
    allow_risk: bool = False
    top: int = 5  # runners-up to report
    hf_config: dict | None = None
    fewest_nodes: bool = False  # with max_nodes: stop at the first node count that fits
    allow_long_context: bool = False  # RoPE past max_position_embeddings (models/checks.py)

    @property
    def seq_limit(self) -> int:
        """The longest sequence --seq-len max may reach: the model's context, and MAX_SEQ_LEN."""
        return min(MAX_SEQ_LEN, context_limit(self.model, self.allow_long_context) or MAX_SEQ_LEN)
    stack: str = DEFAULT_STACK  # the software every candidate layout runs on (stacks.py)
    execution: object = None  # its stacks.Execution; None: the stack's preset
    # settings the person fixed (--set): the search chooses the others the stack can run (settings.py)
    fixed_settings: frozenset = frozenset()

    def node_range(self) -> tuple[int, int, bool]:
        """(first, last, stop_at_first_fit)."""
        if self.nodes is not None:
            return self.nodes, self.nodes, False
        if self.max_nodes is not None:
            return 1, self.max_nodes, self.fewest_nodes
        return 1, DEFAULT_MAX_NODES, True


DEFAULT_MAX_NODES = 64
