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
      "estimate": {...} | null,                    # the prediction: Estimate.to_dict()
      "reasons": ["..."],
      "runners_up": [{"cluster", "workload", "layout", "estimate"}],   # next best, in rank order
      "pareto": [{"cluster", "workload", "layout", "estimate"}],       # the Pareto set shown
      "scaling": [{"cluster", "workload", "layout", "estimate"}]       # the chosen family by node count
    }

Estimates are read back into `trainplan.estimate.Estimate` objects (estimate_from_dict): what a
report draws is what the planner wrote, never a new estimate.

Reading a plan re-checks its layout against its job: a plan edited into an impossible layout is
refused with the same one-line errors as the planner's. `plan_from_dict` is the one reader: the CLI's
--plan, the runtime, the launchers, the report, and the run directories compare-run and calibrate
read (with the run's world size) all go through it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from trainplan import __version__
from trainplan.errors import TrainplanError
from trainplan.estimate import BINDINGS, Estimate, estimate_from_dict
from trainplan.hardware import Cluster, find_node, node_for_world
from trainplan.job import MAX_TOKENS, OPTIMIZERS, Job, Workload
from trainplan.layout import Layout, check_layout, layout_from_dict
from trainplan.models.checks import check_context
from trainplan.models.spec import spec_from_dict, spec_to_dict
from trainplan.parsing import check_keys, check_types, nonfinite_at, read_json

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
class Alternative:
    """A plan the search ranked behind the chosen one, or a member of its Pareto set: the same
    model, possibly another instance, node count, sequence or batch, with its full estimate."""

    job: Job
    layout: Layout
    estimate: Estimate | None

    def to_dict(self) -> dict:
        return {"cluster": _cluster_dict(self.job), "workload": _workload_dict(self.job.workload),
                "layout": self.layout.to_dict(),
                "estimate": None if self.estimate is None else self.estimate.to_dict()}


def _cluster_dict(job: Job) -> dict:
    return {"instance": job.cluster.node.name, "nodes": job.cluster.nodes}


def _workload_dict(w: Workload) -> dict:
    # long_context is written only when set: plans within the model's context read as before
    return {k: v for k, v in asdict(w).items() if k != "long_context" or v}


@dataclass(frozen=True, slots=True)
class Plan:
    job: Job
    layout: Layout
    train: TrainSettings = TrainSettings()
    estimate: Estimate | None = None  # when the planner made one
    reasons: tuple[str, ...] = ()
    hf_config: dict | None = None
    created_by: str = f"trainplan {__version__}"
    runners_up: tuple[Alternative, ...] = ()  # in rank order
    pareto: tuple[Alternative, ...] = ()
    scaling: tuple[Alternative, ...] = ()  # the chosen layout's family at other node counts (search/scaling.py)

    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA,
            "created_by": self.created_by,
            "model": spec_to_dict(self.job.model),
            "hf_config": self.hf_config,
            "cluster": _cluster_dict(self.job),
            "workload": _workload_dict(self.job.workload),
            "layout": self.layout.to_dict(),
            "train": {**asdict(self.train), "betas": list(self.train.betas)},
            "estimate": None if self.estimate is None else self.estimate.to_dict(),
            "reasons": list(self.reasons),
            # written only when the search gave them, so that a plan made by hand reads as before
            **({"runners_up": [a.to_dict() for a in self.runners_up]} if self.runners_up else {}),
            **({"pareto": [a.to_dict() for a in self.pareto]} if self.pareto else {}),
            **({"scaling": [a.to_dict() for a in self.scaling]} if self.scaling else {}),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"


_TOP = {"schema", "created_by", "model", "hf_config", "cluster", "workload", "layout", "train",
        "estimate", "reasons", "runners_up", "pareto", "scaling"}

# Ranges of the TrainSettings numbers: (lowest, highest, lowest excluded). Types come from the
# dataclass (parsing.check_types); a field added there needs its range here (test_plan_json).
MAX_STEPS = 10**9
TRAIN_RANGES: dict[str, tuple[float, float, bool]] = {
    "steps": (0, MAX_STEPS, False),  # 0: derived from workload.tokens
    "lr": (0, 10, True),
    "min_lr_ratio": (0, 1, False),
    "warmup_steps": (0, MAX_STEPS, False),
    "weight_decay": (0, 10, False),
    "grad_clip": (0, 1e6, True),  # clipping to 0 would zero every update
    "seed": (0, 2**63 - 1, False),
    "checkpoint_every": (0, MAX_STEPS, False),  # 0: only at the end and on SIGTERM
    "log_every": (1, MAX_STEPS, False),
}


def _object(d: dict, key: str, where: str, optional: bool = False) -> dict | None:
    v = d.get(key)
    if v is None and optional:
        return None
    if not isinstance(v, dict):
        raise TrainplanError(f"{where}: {key} must be an object, got {type(v).__name__}")
    return v


def _in_range(v, lo, hi, open_lo: bool) -> bool:
    return (lo < v if open_lo else lo <= v) and v <= hi


def train_from_dict(td: dict, where: str) -> TrainSettings:
    """The `train` section: known keys, JSON types of the dataclass, TRAIN_RANGES."""
    check_keys(td, {f.name for f in fields(TrainSettings)}, where)
    check_types(TrainSettings, td, where)
    for k, v in td.items():
        if k in TRAIN_RANGES and not _in_range(v, *TRAIN_RANGES[k]):
            lo, hi, open_lo = TRAIN_RANGES[k]
            raise TrainplanError(f"{where}: {k} must be {'>' if open_lo else '>='} {lo:g} and <= {hi:g}, got {v!r}")
    # the defaults from the fields: on a slotted dataclass TrainSettings.steps is the slot, not 1000
    defaults = {f.name: f.default for f in fields(TrainSettings)}
    steps, warmup = td.get("steps", defaults["steps"]), td.get("warmup_steps", defaults["warmup_steps"])
    if steps and warmup > steps:  # steps 0: derived from the token budget, checked where it is
        raise TrainplanError(f"{where}: warmup_steps {warmup} is longer than the run's {steps} steps; "
                             f"use warmup_steps <= steps")
    if "betas" in td:
        if not all(0 <= b < 1 for b in td["betas"]):
            raise TrainplanError(f"{where}: betas must be two numbers in [0, 1), got {td['betas']!r}")
        td = {**td, "betas": tuple(td["betas"])}
    return TrainSettings(**td)


def workload_from_dict(wd: dict, where: str) -> Workload:
    check_keys(wd, {f.name for f in fields(Workload)}, where, required={"seq_len", "global_batch"})
    check_types(Workload, wd, where)
    for k in ("seq_len", "global_batch"):
        if not 0 < wd[k] <= MAX_STEPS:
            raise TrainplanError(f"{where}: {k} must be a positive integer up to {MAX_STEPS:,}, got {wd[k]!r}")
    if not 0 <= wd.get("tokens", 0) <= MAX_TOKENS:
        raise TrainplanError(f"{where}: tokens must be between 0 and {MAX_TOKENS:.0e}, got {wd['tokens']!r}")
    if wd.get("optimizer", "adamw") not in OPTIMIZERS:
        raise TrainplanError(f"{where}: unknown optimizer {wd['optimizer']!r}; known: {', '.join(OPTIMIZERS)}")
    return Workload(**wd)


def plan_from_dict(d: dict, where: str = "plan.json", world: int | None = None) -> Plan:
    """A plan.json, checked as the planner checks its own input: every section's keys, types and
    ranges, the model's architecture (models/checks.py), the sequence against the model's context
    (check_context), the layout against the job (check_layout), and the config it came from
    against the model.

    `world`: the processes a run started, for the plan.json its run directory holds. A run on part
    of a node (the demo, a plan fitted with --fit-world) writes its cluster as one node of the
    instance type; with another GPU count than `world` the cluster is read as `world` GPUs of that
    type (hardware.node_for_world), and the layout is checked against them."""
    if not isinstance(d, dict):
        raise TrainplanError(f"{where}: expected a JSON object")
    schema = d.get("schema")
    if schema != SCHEMA:
        raise TrainplanError(
            f"{where}: unknown schema {schema!r}; this trainplan reads {SCHEMA!r} "
            "(re-create the plan with `trainplan plan --out`)"
        )
    check_keys(d, _TOP, where, required={"schema", "model", "cluster", "workload", "layout"})
    model = spec_from_dict(_object(d, "model", where), f"{where}: model")
    job, layout = _job_layout(model, d, where, world)
    train = train_from_dict(_object(d, "train", where, optional=True) or {}, f"{where}: train")
    hf = _object(d, "hf_config", where, optional=True)
    if hf is not None:
        _check_hf_config(hf, model, f"{where}: hf_config")
    reasons = d.get("reasons") or []
    if not isinstance(reasons, list) or not all(isinstance(r, str) for r in reasons):
        raise TrainplanError(f"{where}: reasons must be a list of strings")
    created_by = d.get("created_by", "unknown")
    if not isinstance(created_by, str):
        raise TrainplanError(f"{where}: created_by must be a string, got {created_by!r}")
    estimate = _object(d, "estimate", where, optional=True)
    alternatives = {}
    for key in ("runners_up", "pareto", "scaling"):
        items = d.get(key) or []
        if not isinstance(items, list):
            raise TrainplanError(f"{where}: {key} must be a list, got {type(items).__name__}")
        alternatives[key] = tuple(_alternative(model, a, f"{where}: {key}[{i}]", created_by)
                                  for i, a in enumerate(items))
    return Plan(job=job, layout=layout, train=train,
                estimate=read_estimate(estimate, f"{where}: estimate", created_by),
                reasons=tuple(reasons), hf_config=hf, created_by=created_by, **alternatives)


def _job_layout(model, d: dict, where: str, world: int | None = None) -> tuple[Job, Layout]:
    """The job and layout of a plan or an alternative: the cluster (`world` GPUs of its instance
    type when given and different, plan_from_dict), the workload against the model's context
    (check_context), the layout against the job (check_layout)."""
    c = _object(d, "cluster", where)
    check_keys(c, {"instance", "nodes"}, f"{where}: cluster", required={"instance", "nodes"})
    if not isinstance(c["nodes"], int) or isinstance(c["nodes"], bool) or not 0 < c["nodes"] <= MAX_STEPS:
        raise TrainplanError(f"{where}: cluster.nodes must be a positive integer, got {c['nodes']!r}")
    if not isinstance(c["instance"], str):
        raise TrainplanError(f"{where}: cluster.instance must be a string, got {c['instance']!r}")
    cluster = Cluster(find_node(c["instance"]), c["nodes"])
    if world is not None and world != cluster.num_gpus:
        cluster = Cluster(node_for_world(cluster.node, world), 1)
    workload = workload_from_dict(_object(d, "workload", where), f"{where}: workload")
    check_context(model, workload.seq_len, workload.long_context)
    layout = layout_from_dict(_object(d, "layout", where), f"{where}: layout")
    job = Job(model, cluster, workload)
    check_layout(job, layout)
    return job, layout


def _check_hf_config(hf: dict, model, where: str) -> None:
    """The runtime builds the Hugging Face model from hf_config (--hf): it must describe the same
    architecture as `model`, which the plan's numbers are for."""
    from dataclasses import fields as dc_fields

    from trainplan.models import spec_from_config

    other = spec_from_config(hf, name=model.name, where=where, source=model.source)
    for f in dc_fields(other):
        a, b = getattr(other, f.name), getattr(model, f.name)
        if a != b:
            raise TrainplanError(f"{where} and model disagree on {f.name} ({a!r} vs {b!r}); "
                                 "re-create the plan with `trainplan plan --out`")


def _alternative(model, a, where: str, created_by: str) -> Alternative:
    if not isinstance(a, dict):
        raise TrainplanError(f"{where}: expected an object")
    check_keys(a, {"cluster", "workload", "layout", "estimate"}, where,
               required={"cluster", "workload", "layout", "estimate"})
    job, layout = _job_layout(model, a, where)
    return Alternative(job, layout, read_estimate(_object(a, "estimate", where), f"{where}: estimate", created_by))


def read_estimate(d: dict | None, where: str, created_by: str = "unknown") -> Estimate | None:
    """An estimate as plan.json holds it; one written by another trainplan version that does not
    read back is refused with what to do, since a report must draw what the planner wrote."""
    if d is None:
        return None
    try:
        est = estimate_from_dict(d, where)
        _check_estimate(d, est, where)
    except TrainplanError as e:
        raise TrainplanError(
            f"{e} (this {SCHEMA} estimate was written by {created_by}; re-create the plan with "
            f"trainplan {__version__}: `trainplan plan --out`)") from None
    return est


# What a step takes, so a number of zero or less cannot be a prediction.
_POSITIVE = ("tokens_per_s", "tokens_per_s_per_gpu", "step_time_s", "flops_per_step", "hardware_flops_per_step",
             "mfu", "hfu")


def _check_estimate(d: dict, est: Estimate, where: str) -> None:
    """What estimate_from_dict reads is what the planner wrote: every key Estimate.to_dict()
    writes is there (goodput and machine included: every writer since they were added writes them), the derived ones (totals, GiB, step_time_s) agree with the parts they come
    from, every number is >= 0 (the quantities and the band), and tokens/s, step time, FLOPs and
    MFU are > 0. A plan edited by hand or by a script is refused here, in one line, rather than
    shown or launched with numbers the planner never made."""
    import math

    from trainplan.costs.activations import GROUPS

    written = est.to_dict()
    if est.memory is not None and set(est.memory.activation_groups) != set(GROUPS):
        missing = sorted(set(GROUPS) - set(est.memory.activation_groups))
        raise TrainplanError(f"{where}: memory.activation_groups must name every group ({', '.join(GROUPS)})"
                             + (f"; missing {missing[0]!r}" if missing else ""))
    if est.binding not in BINDINGS:
        raise TrainplanError(f"{where}: binding must be one of {', '.join(BINDINGS)}, got {est.binding!r}")
    todo = [(written, d, "")]
    while todo:
        want, got, path = todo.pop()
        if isinstance(want, dict):
            for k in want:
                if not isinstance(got, dict) or k not in got:
                    raise TrainplanError(f"{where}: missing key {path + k!r}")
                todo.append((want[k], got[k], f"{path}{k}."))
        elif isinstance(want, list):
            todo += [(w, g, f"{path[:-1]}[{i}].") for i, (w, g) in enumerate(zip(want, got))]
        elif isinstance(want, (int, float)) and not isinstance(want, bool):
            name = path[:-1]
            ok = isinstance(got, (int, float)) and not isinstance(got, bool) and math.isclose(got, want, rel_tol=1e-9)
            if not ok:
                raise TrainplanError(f"{where}: {name} is {got!r} but the estimate's own parts give {want!r}; "
                                     "the estimate was edited")
            if not want >= 0:
                raise TrainplanError(f"{where}: {name} must be a number >= 0, got {want!r}")
    for k in _POSITIVE:
        if not written[k] > 0:
            raise TrainplanError(f"{where}: {k} must be > 0, got {written[k]!r}")
    low, high = est.band
    if not 0 < low <= high:
        raise TrainplanError(f"{where}: band must be two numbers 0 < low <= high, got {list(est.band)!r}")


def load_plan(path: str | Path, world: int | None = None) -> Plan:
    """plan_from_dict of the file at `path` (`world`: a run directory's plan.json, read_run)."""
    try:
        # the config.json it embeds keeps its Infinity (Mamba-2 time_step_limit) as transformers wrote
        # it; every other number of a plan is finite
        try:
            data = read_json(path, "plan")
        except TrainplanError:
            data = read_json(path, "plan", constants=True)
            rest = {k: v for k, v in data.items() if k != "hf_config"} if isinstance(data, dict) else data
            if nonfinite_at(rest, "$") is not None:
                raise
        return plan_from_dict(data, where=str(path), world=world)
    except TrainplanError as e:
        # The layout checks speak of flags; point at the file instead when they come from one.
        msg = str(e)
        raise TrainplanError(msg if str(path) in msg else f"{path}: {msg}") from None
