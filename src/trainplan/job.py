"""Job = model x cluster x workload: the three inputs of every estimate, kept separate.

The Workload fields a person sets carry their flags (spelling.py; commands/_fields.py builds them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainplan.spelling import Variant, spelled

if TYPE_CHECKING:  # annotations only: `trainplan.job` stays cheap to import (the CLI reads its flags)
    from trainplan.hardware.types import Cluster
    from trainplan.models.spec import ModelSpec

OPTIMIZERS = ("adamw",)
MAX_TOKENS = 10**18  # the largest token budget a workload takes (--tokens, plan.json workload.tokens)
# The job a command prices when none is named: the model and the instance type of `plan` with no
# arguments (README), and of estimate, fit and compare.
DEFAULT_MODEL = "llama-3.1-70b"
DEFAULT_INSTANCE = "ml.p6-b200.48xlarge"
# The workload's sequence when none is given: Llama 3.1 pre-training's (arXiv:2407.21783, 3.4.1).
# `plan --seq-len max` and the context priority never answer with less (search Query.min_seq_len).
DEFAULT_SEQ_LEN = 8192


@dataclass(frozen=True, slots=True)
class Workload:
    # tokens per sequence
    seq_len: int = spelled(kind="positive", flag_default=DEFAULT_SEQ_LEN, help="tokens per sequence", variants={
        "max": Variant(kind="text", default=None,  # plan: the model's context where it is shorter (workload_seq)
                       help=f"tokens per sequence, or 'max' for the longest that fits (default {DEFAULT_SEQ_LEN}, "
                            "or the model's context where shorter; with --priority context: the shortest "
                            "acceptable, the search finds the longest)")})
    # sequences per optimizer step, all ranks together
    global_batch: int = spelled(kind="positive", flag_default=None,
                                help="sequences per step (default: micro-batch x data-parallel degree)",
                                variants={"range": Variant(kind="text", help="sequences per step: N or a range "
                                                           "LO:HI (default: about 4Mi tokens)")})
    # tokens to train (0 = unset); for time and cost to the budget
    tokens: int = spelled(0, kind="tokens", help="tokens to train, e.g. 15T, 300B")
    optimizer: str = "adamw"
    # seq_len is past the model's max_position_embeddings, asked for with --allow-long-context
    # (RoPE only: a learned position table is a hard limit). models/spec.check_context.
    long_context: bool = spelled(False, kind="switch", flag="--allow-long-context",
                                 help="a RoPE model past its max_position_embeddings (the plan or estimate is "
                                      "marked long_context)")

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.global_batch


@dataclass(frozen=True, slots=True)
class Job:
    model: ModelSpec = spelled(flag="--model", flag_default=DEFAULT_MODEL, help="catalog name or HF config.json path",
                               variants={"required": Variant(required=True)})
    # the flag names the cluster's instance type; --nodes (a command's own) its count
    cluster: Cluster = spelled(flag="--instance", flag_default=DEFAULT_INSTANCE, help="instance type", variants={
        "list": Variant(kind="names", default=None, help=f"instance type, or a comma list (default {DEFAULT_INSTANCE}; "
                                                         "cost and time: every priced SageMaker instance)"),
        # probe: the instance the measured machine is, if any (a machine profile need not name one)
        "probe": Variant(default=None, help="the instance type, named in the network tables across nodes")})
    workload: Workload
