"""Job = model x cluster x workload: the three inputs of every estimate, kept separate."""

from __future__ import annotations

from dataclasses import dataclass

from trainplan.hardware.types import Cluster
from trainplan.models.spec import ModelSpec

OPTIMIZERS = ("adamw",)
MAX_TOKENS = 10**18  # the largest token budget a workload takes (--tokens, plan.json workload.tokens)


@dataclass(frozen=True, slots=True)
class Workload:
    seq_len: int  # tokens per sequence
    global_batch: int  # sequences per optimizer step, all ranks together
    tokens: int = 0  # tokens to train (0 = unset); for time and cost to the budget
    optimizer: str = "adamw"
    # seq_len is past the model's max_position_embeddings, asked for with --allow-long-context
    # (RoPE only: a learned position table is a hard limit). models/spec.check_context.
    long_context: bool = False

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.global_batch


@dataclass(frozen=True, slots=True)
class Job:
    model: ModelSpec
    cluster: Cluster
    workload: Workload
