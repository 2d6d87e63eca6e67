"""plan.json: the contract between the planner, the launchers and the runtime.

Schema `trainplan-plan/1` (documented field by field in docs/plan-schema.md):

    {
      "schema": "trainplan-plan/1",
      "created_by": "trainplan 0.1.0",
      "model": {...ModelSpec fields...},          # enough to rebuild the architecture
      "hf_config": {...} | null,                   # the config.json it came from, when there was one
      "cluster": {"instance": "ml.p6-b200.48xlarge", "nodes": 1},
      "workload": {"seq_len": 8192, "global_batch": 64, "tokens": 0, "optimizer": "adamw"},
      "layout": {...Layout fields...},
      "train": {...TrainSettings fields...},      # what the runtime needs beyond the layout
      "estimate": {...} | null,                    # the prediction, in Measurement units
      "reasons": ["..."]
    }

Reading a plan re-checks its layout against its job: a plan edited into an impossible layout is
refused with the same one-line errors as the planner's.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from trainplan import __version__
from trainplan.errors import TrainplanError
from trainplan.hardware import Cluster, find_node
from trainplan.job import Job, Workload
from trainplan.layout import Layout, check_layout, layout_from_dict
from trainplan.models.spec import spec_from_dict, spec_to_dict
from trainplan.parsing import check_keys, read_json

SCHEMA = "trainplan-plan/1"


@dataclass(frozen=True, slots=True)
class TrainSettings:
    """Runtime settings that are not part of the layout. Defaults suit a pre-training run."""

    steps: int = 1000  # optimizer steps to run (0 = derived from workload.tokens)
    lr: float = 3e-4
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio
    warmup_steps: int = 100
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0
    seed: int = 0
    checkpoint_every: int = 500  # steps; 0 = only at the end and on SIGTERM
    log_every: int = 1
    data: str = ""  # path(s) to training data; "" = the built-in corpus


@dataclass(frozen=True, slots=True)
class Plan:
    job: Job
    layout: Layout
    train: TrainSettings = TrainSettings()
    estimate: dict | None = None  # Estimate.to_dict(), when the planner made one
    reasons: tuple[str, ...] = ()
    hf_config: dict | None = None
    created_by: str = f"trainplan {__version__}"

    def to_dict(self) -> dict:
        w = self.job.workload
        return {
            "schema": SCHEMA,
            "created_by": self.created_by,
            "model": spec_to_dict(self.job.model),
            "hf_config": self.hf_config,
            "cluster": {"instance": self.job.cluster.node.name, "nodes": self.job.cluster.nodes},
            "workload": asdict(w),
            "layout": self.layout.to_dict(),
            "train": {**asdict(self.train), "betas": list(self.train.betas)},
            "estimate": self.estimate,
            "reasons": list(self.reasons),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"


_TOP = {"schema", "created_by", "model", "hf_config", "cluster", "workload", "layout", "train",
        "estimate", "reasons"}


def plan_from_dict(d: dict, where: str = "plan.json") -> Plan:
    if not isinstance(d, dict):
        raise TrainplanError(f"{where}: expected a JSON object")
    schema = d.get("schema")
    if schema != SCHEMA:
        raise TrainplanError(
            f"{where}: unknown schema {schema!r}; this trainplan reads {SCHEMA!r} "
            "(re-create the plan with `trainplan plan --out`)"
        )
    check_keys(d, _TOP, where, required={"schema", "model", "cluster", "workload", "layout"})
    model = spec_from_dict(d["model"], f"{where}: model")
    c = d["cluster"]
    check_keys(c, {"instance", "nodes"}, f"{where}: cluster", required={"instance", "nodes"})
    if not isinstance(c["nodes"], int) or isinstance(c["nodes"], bool) or c["nodes"] <= 0:
        raise TrainplanError(f"{where}: cluster.nodes must be a positive integer, got {c['nodes']!r}")
    cluster = Cluster(find_node(str(c["instance"])), c["nodes"])
    wd = d["workload"]
    check_keys(wd, {f.name for f in fields(Workload)}, f"{where}: workload",
               required={"seq_len", "global_batch"})
    for k in ("seq_len", "global_batch"):
        if not isinstance(wd[k], int) or isinstance(wd[k], bool) or wd[k] <= 0:
            raise TrainplanError(f"{where}: workload.{k} must be a positive integer, got {wd[k]!r}")
    workload = Workload(**wd)
    layout = layout_from_dict(d["layout"], f"{where}: layout")
    td = d.get("train") or {}
    check_keys(td, {f.name for f in fields(TrainSettings)}, f"{where}: train")
    if "betas" in td:
        td = {**td, "betas": tuple(td["betas"])}
    job = Job(model, cluster, workload)
    check_layout(job, layout)
    return Plan(
        job=job,
        layout=layout,
        train=TrainSettings(**td),
        estimate=d.get("estimate"),
        reasons=tuple(d.get("reasons") or ()),
        hf_config=d.get("hf_config"),
        created_by=d.get("created_by", "unknown"),
    )


def load_plan(path: str | Path) -> Plan:
    try:
        return plan_from_dict(read_json(path, "plan"), where=str(path))
    except TrainplanError as e:
        # The layout checks speak of flags; point at the file instead when they come from one.
        msg = str(e)
        raise TrainplanError(msg if str(path) in msg else f"{path}: {msg}") from None
