"""Software stacks and their execution settings: the one home of "what the framework overlaps and fuses".

A layout carries a `stack` (which software runs it: trainplan's own trainer, torchtitan, Megatron-Core,
NeMo, ...) and an `Execution` (the settings below). The stack's preset (stacks.toml, a source per value)
gives the defaults; `--set KEY=VALUE`, a plan.json or a validation record's `train.execution` override
single keys. Memory, step time, the recompute family, the validation loader and the trainer read them
from here, never from a framework name.

Settings (exactly these keys, so plans and datasets can carry them):
  tp_comm_overlap       tensor-parallel all-gathers / reduce-scatters hidden behind the GEMMs
                        (TE userbuffers comm-GEMM overlap, async TP)
  grad_reduce_overlap   data-parallel gradient reduce-scatter / all-reduce issued during backward
  param_gather_overlap  sharded parameters all-gathered ahead of use (FSDP prefetch, Megatron
                        overlap_param_gather)
  pp_p2p_overlap        pipeline sends/receives overlapped with the neighbouring chunk's compute
  moe_dispatcher        alltoall | allgather | deepep: how tokens reach their experts
  ep_comm_overlap       expert-parallel dispatch/combine all-to-alls hidden behind another micro-batch's
                        compute (Megatron-Core --overlap-moe-expert-parallel-comm)
  moe_imbalance         routed tokens on the busiest expert-parallel rank over the mean (>= 1): the
                        slowest rank's expert GEMMs and dispatch bytes (costs/moe.py); 1 = balanced
  moe_capacity_factor   null = dropless; c > 0: each expert keeps at most ceil(c * T * k / E) of the
                        T*k routed copies of a rank's T tokens (GShard per-group capacity; Megatron-Core
                        --moe-expert-capacity-factor), the rest dropped (costs/moe.routed_load)
  moe_pad_to_capacity   every expert's input padded to its capacity (Megatron-Core
                        --moe-pad-expert-input-to-capacity): exactly c x the balanced rows and bytes
  cp_comm               p2p (ring) | a2a (Ulysses) | allgather | a2a+p2p: context-parallel exchange
  cross_entropy         plain (fp32 logits) | fused (fused kernel, no fp32 copy) | chunked (vocabulary
                        chunks, no full logits)
  cuda_graphs           the step is captured as CUDA graphs (no launch gaps)
  power_limit_w         a GPU power cap in watts, or null (the GPU's own limit)

The capacity factor is a setting, not a Layout field: like moe_imbalance it is a property of how the
run routes its tokens, which the search never varies (it changes what the model learns, not where
tensors live), a validation record states it beside the dispatcher (train.execution), and every
framework that has it spells it as a run flag; a setting reaches --set, plan.json, the layout line and
the trainer through the one parse below.

A stack's choices (Stack.choices: [NAME.choices] in stacks.toml, with the framework's flag for each)
are what it can run; the preset is what `estimate` costs, and `plan` chooses among the choices
(search/settings.py).

RULES: values a framework's own argument checks refuse on some layouts. Asked for explicitly, they are
a one-line refusal naming the rule and its source (check_settings, called by layout.check_layout); a
preset's own value is turned off where a rule fails (applicable), as `only_if` does.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from trainplan.errors import TrainplanError
from trainplan.parsing import check_keys, read_toml

DEFAULT_STACK = "trainplan"
# The stack that runs every parallel dimension and every value of every setting (Megatron-Core with
# TransformerEngine): the one supports.py names when trainplan's trainer refuses a layout.
COMPLETE_STACK = "megatron"
# Megatron-Bridge builds Nemotron-H (NemotronHModelProvider: Megatron-Core's hybrid Mamba model), which
# the megatron exporter's GPT arguments cannot say: the stack named for models with Mamba-2 layers.
MAMBA_STACK = "megatron_bridge"
CHOICES = {
    "moe_dispatcher": ("alltoall", "allgather", "deepep"),
    "cp_comm": ("p2p", "a2a", "allgather", "a2a+p2p"),
    "cross_entropy": ("plain", "fused", "chunked"),
}
BOOLEAN = ("tp_comm_overlap", "grad_reduce_overlap", "param_gather_overlap", "pp_p2p_overlap", "ep_comm_overlap",
           "moe_pad_to_capacity", "cuda_graphs")
NUMBER_OR_NULL = ("moe_capacity_factor", "power_limit_w")  # a finite number > 0, or null
# Conditions a preset's `only_if` names (stacks.toml): a boolean setting is off unless the layout
# meets its condition, as the framework's own argument checks force it.
CONDITIONS = {
    "interleaved": lambda L: L.pp > 1 and L.vp > 1,
    "tp_sequence_parallel": lambda L: L.tp > 1 and L.sequence_parallel,
    # Megatron-Core's --overlap-param-gather: a sharded optimizer (the distributed optimizer or FSDP)
    # and --overlap-grad-reduce (MLM-args validate_args)
    "sharded_grad_overlap": lambda L: L.sharding != "none" and L.execution.grad_reduce_overlap,
}
AT_LEAST_ONE = ("moe_imbalance",)
# Where the rules below come from (the version read).
_MCORE = "Megatron-Core transformer_config.py TransformerConfig.__post_init__ (NVIDIA/Megatron-LM @d98e8a64dd)"
FULL_RECOMPUTE = ("full", "partial", "offload")  # layout AC modes that recompute whole layers


@dataclass(frozen=True, slots=True)
class Rule:
    """A value of `setting` that a framework refuses unless `holds(layout, execution)`: `needs` says
    what it asks in the layout's terms, `source` where the check is and the framework's own words."""

    setting: str
    holds: Callable[..., bool]  # (layout, Execution) -> the framework accepts the value
    needs: str
    source: str


# Megatron-Core's checks of overlap_moe_expert_parallel_comm (ep_comm_overlap), each as asserted there.
# Read and left out: torch >= 2.6; bf16 or fp16 model (every recipe of recipes.toml runs a bf16 or
# fp16 model); moe_shared_expert_overlap and MTP > 1 layer (not layout fields); CUDA graphs only when
# scoped to the moe / mlp modules (cuda_graph_modules default "full" passes, and cuda_graphs here is
# whole-step capture).
RULES = (
    Rule("ep_comm_overlap", lambda L, ex: L.ep > 1, "expert parallelism (ep > 1)",
         f"{_MCORE}: 'overlap_moe_expert_parallel_comm is only supported with expert model parallelism'"),
    Rule("ep_comm_overlap", lambda L, ex: ex.moe_dispatcher in ("alltoall", "deepep"),
         "the alltoall or deepep dispatcher (--set moe_dispatcher=alltoall)",
         f"{_MCORE}: 'overlap_moe_expert_parallel_comm is supported with alltoall/flex token dispatcher'"),
    Rule("ep_comm_overlap", lambda L, ex: L.pp == 1 or L.vp > 1,
         "virtual pipeline stages with pp > 1 (the interleaved schedule, vp > 1)",
         f"{_MCORE}: 'virtual_pipeline_model_parallel_size must be specified when pipeline_model_parallel_size"
         " > 1'; megatron/training/arguments.py turns vp = 1 into None"),
    Rule("ep_comm_overlap", lambda L, ex: L.ac not in FULL_RECOMPUTE,
         "no full-layer recompute (ac none or selective)",
         f"{_MCORE}: 'disable full recomputation' / 'disable recomputation method' / 'recompute_num_layers "
         "must be None' when enabling overlap_moe_expert_parallel_comm"),
    Rule("moe_pad_to_capacity", lambda L, ex: ex.moe_capacity_factor is not None,
         "a capacity factor (--set moe_capacity_factor=C)",
         f"{_MCORE}: 'moe_expert_capacity_factor must be set to use moe_pad_expert_input_to_capacity'"),
    Rule("moe_pad_to_capacity", lambda L, ex: ex.moe_dispatcher != "deepep",
         "a dispatcher other than deepep",
         f"{_MCORE}: 'Flex token dispatcher with deepep backend does not support "
         "moe_pad_expert_input_to_capacity'"),
)
_OFF = {"ep_comm_overlap": False, "moe_pad_to_capacity": False}  # a ruled setting's value when off
FAMILIES = ("pytorch", "megatron")
_STACK_KEYS = {"description", "recompute_family", "fused_kernels", "frameworks", "source", "settings", "conventions"}
# [NAME.record_defaults] (optional): layout fields the stack's code or recipes set that a validation
# record may leave unstated (validation/dataset.py applies them): field -> allowed value type.
RECORD_DEFAULTS = {"sequence_parallel": bool, "fp8_allgather": bool, "compiled_loss": bool, "precision": str}
# Conditions a record default's `only_if` names: (layout, facts) -> applies, where the caller gives
# the facts a layout does not carry: tied_embeddings (the model's) and low_precision (the layout's
# recipe has low-precision matmuls; precision.py sits above this module).
RECORD_CONDITIONS = {
    "tp": lambda L, f: L.tp > 1,
    "tp_untied_embeddings": lambda L, f: L.tp > 1 and not f["tied_embeddings"],
    "replicated_low_precision": lambda L, f: L.sharding != "fsdp" and f["low_precision"],
    "torch_compile": lambda L, f: L.torch_compile,
}
# Memory conventions (stacks.toml documents each): allowed values; bool for the booleans.
CONVENTION_CHOICES = {
    "activations": ("pytorch", "megatron"),
    "lowp_weight_copies": ("per_use", "cached"),
    "zero1": ("distributed_optimizer", "zero_redundancy"),
    "zero2": ("deepspeed", "fsdp2_no_reshard"),
    "grad_reduce_fp32": bool,
    "vocab_parallel_loss": bool,
    "bf16_loss": bool,
    "grad_sync": ("every_microbatch", "last_microbatch"),
    "peak_memory": ("reserved", "allocated", "device"),
    "expert_tp": ("tp", "one_under_ep"),
    "lowp_experts": bool,
}
# Layout knobs that override a convention for one layout (None: the stack's): knob -> convention.
LAYOUT_OVERRIDES = {"grad_reduce_fp32": "grad_reduce_fp32", "vocab_parallel_loss": "vocab_parallel_loss",
                    "bf16_loss": "bf16_loss", "fsdp_sync_last_microbatch": "grad_sync"}


@dataclass(frozen=True, slots=True)
class Execution:
    """How a stack runs a layout: what it overlaps, which kernels it uses (module doc)."""

    tp_comm_overlap: bool
    grad_reduce_overlap: bool
    param_gather_overlap: bool
    pp_p2p_overlap: bool
    moe_dispatcher: str
    ep_comm_overlap: bool
    moe_imbalance: float
    moe_capacity_factor: float | None
    moe_pad_to_capacity: bool
    cp_comm: str
    cross_entropy: str
    cuda_graphs: bool
    power_limit_w: float | None

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in SETTINGS}

    def with_(self, **changes) -> Execution:
        return replace(self, **changes)


SETTINGS = tuple(f.name for f in fields(Execution))


@dataclass(frozen=True, slots=True)
class Conventions:
    """How a stack's code keeps tensors in memory (stacks.toml [NAME.conventions]): the one home of
    what costs/memory.py, costs/states.py and the validation loader used to infer from `sharding`."""

    activations: str  # "pytorch" | "megatron": which tensors a layer saves (costs/activations.py)
    lowp_weight_copies: str  # "per_use" (torchao) | "cached" (TransformerEngine)
    zero1: str  # "distributed_optimizer" (Megatron) | "zero_redundancy" (DDP + torch ZeRO-1)
    zero2: str  # "deepspeed" (stage 2) | "fsdp2_no_reshard" (FSDP2, reshard_after_forward=False)
    grad_reduce_fp32: bool  # gradients accumulated and reduced in fp32
    vocab_parallel_loss: bool  # tp > 1: loss on vocabulary-sharded logits
    bf16_loss: bool  # eager loss on bf16 logits kept through backward
    grad_sync: str  # "every_microbatch" | "last_microbatch" (FSDP with gradient accumulation)
    peak_memory: str  # what the stack logs as peak memory: "reserved" | "allocated" | "device"
    expert_tp: str  # etp when the layout states none: "tp" | "one_under_ep" (layout.expert_groups)
    lowp_experts: bool  # an fp8 recipe runs the routed experts' grouped GEMMs in fp8 too (else in the compute dtype)

    @property
    def torch_style(self) -> bool:
        return self.activations == "pytorch"


assert tuple(f.name for f in fields(Conventions)) == tuple(CONVENTION_CHOICES)


@dataclass(frozen=True, slots=True)
class Stack:
    name: str
    description: str
    recompute_family: str  # costs/flops.py FAMILIES
    fused_kernels: bool  # TE/Apex fused element-wise kernels and TE attention (costs/compute.py)
    frameworks: tuple[str, ...]  # other names validation records use for it
    source: str
    execution: Execution  # the preset
    sources: dict  # setting -> where its preset value comes from
    only_if: tuple[tuple[str, str], ...]  # (setting, condition): off unless the layout meets it
    conventions: Conventions
    convention_sources: dict  # convention -> the framework code it comes from
    record_defaults: tuple[RecordDefault, ...] = ()
    choices: dict = field(default_factory=dict)  # setting -> Choice: what the stack can run ([NAME.choices])
    exporter: str | None = None  # module of trainplan.export writing this stack's configuration (#22)
    exporters: tuple[str, ...] = ()  # every such module, `exporter` first: one stack, several targets (nemo)


@dataclass(frozen=True, slots=True)
class Choice:
    """The values of one execution setting a stack can run (stacks.toml [NAME.choices]): the
    preset's value is one of them; `only_if` (a CONDITIONS key, booleans) the layouts where the
    framework runs true."""

    values: tuple
    source: str
    only_if: str | None = None

    def allows(self, layout, value) -> bool:
        """The framework runs `value` on `layout`."""
        return value in self.values and not (value is True and self.only_if and not CONDITIONS[self.only_if](layout))


@dataclass(frozen=True, slots=True)
class RecordDefault:
    """A layout field a stack sets that a validation record may not state (stacks.toml
    [NAME.record_defaults]): applied when `only_if` holds and the record is not dated before `since`."""

    field: str  # a Layout field (RECORD_DEFAULTS)
    value: object
    source: str
    only_if: str | None = None  # RECORD_CONDITIONS key
    since: int | None = None  # the year the stack's code began doing it

    def holds(self, layout, facts: dict) -> bool:
        """The `only_if` condition (none: always); `facts` as RECORD_CONDITIONS says."""
        return self.only_if is None or RECORD_CONDITIONS[self.only_if](layout, facts)

    def predates(self, year: int | None) -> bool:
        """A record dated before the stack's code did this (undated records get the default)."""
        return self.since is not None and year is not None and year < self.since


def _allowed(key: str) -> str:
    if key in BOOLEAN:
        return "true or false"
    if key in NUMBER_OR_NULL:
        return "a finite number > 0, or null"
    if key in AT_LEAST_ONE:
        return "a number >= 1"
    return " | ".join(CHOICES[key])


def check_value(key: str, value, where: str):
    """The value of one setting, checked; a wrong key or value is a one-line error naming the allowed ones."""
    if key not in SETTINGS:
        raise TrainplanError(f"{where}: unknown execution setting {key!r}; allowed: {', '.join(SETTINGS)}")
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    ok = (isinstance(value, bool) if key in BOOLEAN else
          (value is None or (number and 0 < value < float("inf"))) if key in NUMBER_OR_NULL else
          (number and 1 <= value < float("inf")) if key in AT_LEAST_ONE else value in CHOICES[key])
    if not ok:
        raise TrainplanError(f"{where}: {key} must be {_allowed(key)}, got {value!r}")
    return float(value) if key in NUMBER_OR_NULL + AT_LEAST_ONE and value is not None else value


def parse_assignment(text: str) -> tuple[str, object]:
    """'KEY=VALUE' from the command line (--set) -> (key, typed value)."""
    key, sep, raw = text.partition("=")
    key, raw = key.strip(), raw.strip()
    if not sep or not key:
        raise TrainplanError(f"--set expects KEY=VALUE, got {text!r}; keys: {', '.join(SETTINGS)}")
    if key not in SETTINGS:
        raise TrainplanError(f"--set: unknown execution setting {key!r}; allowed: {', '.join(SETTINGS)}")
    low = raw.lower()
    value: object = raw
    if key in BOOLEAN and low in ("true", "false", "1", "0", "on", "off", "yes", "no"):
        value = low in ("true", "1", "on", "yes")
    elif key in NUMBER_OR_NULL + AT_LEAST_ONE:
        if low in ("null", "none", "") and key in NUMBER_OR_NULL:
            value = None
        else:
            try:
                value = float(raw)
            except ValueError:
                pass
    return key, check_value(key, value, "--set")


def execution_from_dict(d: dict, where: str, base: Execution) -> Execution:
    """`base` with the settings of `d` (plan.json layout.execution, a record's train.execution)."""
    if not isinstance(d, dict):
        raise TrainplanError(f"{where}: expected an object of execution settings, got {d!r}")
    check_keys(d, set(SETTINGS), where)
    return replace(base, **{k: check_value(k, v, where) for k, v in d.items()})


def _load_stack(name: str, d: dict) -> Stack:
    where = f"stacks.toml [{name}]"
    check_keys(d, _STACK_KEYS | {"record_defaults", "choices", "exporter", "exporters"}, where, required=_STACK_KEYS)
    assert d["recompute_family"] in FAMILIES, (name, d["recompute_family"])
    raw = d["settings"]
    check_keys(raw, set(SETTINGS), f"{where}.settings", required=set(SETTINGS))
    values, sources, only_if = {}, {}, []
    for key, entry in raw.items():
        check_keys(entry, {"value", "source", "only_if"}, f"{where}.settings.{key}", required={"source"})
        values[key] = check_value(key, entry.get("value"), f"{where}.settings.{key}")
        sources[key] = entry["source"]
        if "only_if" in entry:
            assert key in BOOLEAN and entry["only_if"] in CONDITIONS, (where, key, entry["only_if"])
            only_if.append((key, entry["only_if"]))
    conv, conv_sources = _load_conventions(d["conventions"], f"{where}.conventions")
    return Stack(name=name, description=d["description"], recompute_family=d["recompute_family"],
                 fused_kernels=bool(d["fused_kernels"]), frameworks=tuple(d["frameworks"]),
                 source=d["source"], execution=Execution(**values), sources=sources, only_if=tuple(only_if),
                 conventions=conv, convention_sources=conv_sources,
                 record_defaults=_load_record_defaults(d.get("record_defaults", {}), f"{where}.record_defaults"),
                 choices=_load_choices(d.get("choices", {}), values, f"{where}.choices"),
                 exporter=d.get("exporter") or next(iter(d.get("exporters", ())), None),
                 exporters=tuple(dict.fromkeys([*([d["exporter"]] if "exporter" in d else []), *d.get("exporters", ())])))


def _load_choices(raw: dict, preset: dict, where: str) -> dict:
    check_keys(raw, set(SETTINGS), where)
    out = {}
    for key, entry in raw.items():
        check_keys(entry, {"values", "source", "only_if"}, f"{where}.{key}", required={"values", "source"})
        values = tuple(check_value(key, v, f"{where}.{key}") for v in entry["values"])
        cond = entry.get("only_if")
        # packaged data, not user input: the preset runs one of its stack's values
        assert preset[key] in values and (cond is None or key in BOOLEAN and cond in CONDITIONS), (where, key)
        out[key] = Choice(values, entry["source"], cond)
    return out


def _load_record_defaults(raw: dict, where: str) -> tuple[RecordDefault, ...]:
    check_keys(raw, set(RECORD_DEFAULTS), where)
    out = []
    for key, entry in raw.items():
        check_keys(entry, {"value", "source", "only_if", "since"}, f"{where}.{key}", required={"value", "source"})
        v, cond = entry["value"], entry.get("only_if")
        # packaged data, not user input
        assert isinstance(v, RECORD_DEFAULTS[key]) and (cond is None or cond in RECORD_CONDITIONS), (where, key)
        out.append(RecordDefault(key, v, entry["source"], cond, entry.get("since")))
    return tuple(out)


def applicable(layout, execution: Execution) -> Execution:
    """`execution` as the layout's stack really runs it: every setting whose `only_if` condition the
    layout does not meet is off (stacks.toml; e.g. Megatron overlaps pipeline P2P only when
    interleaved), and so is a setting left at its preset's value where a RULES rule fails (asked for
    explicitly, check_settings refuses it instead). The one place conditional defaults are applied:
    Layout calls it on construction."""
    preset = stack(layout.stack)
    off = {key: False for key, cond in preset.only_if
           if getattr(execution, key) and not CONDITIONS[cond](layout)}
    for rule in broken_rules(layout, execution):
        if getattr(execution, rule.setting) == getattr(preset.execution, rule.setting):
            off[rule.setting] = _OFF[rule.setting]
    return replace(execution, **off) if off else execution


def broken_rules(layout, execution: Execution) -> list[Rule]:
    """The RULES that `execution`, run with `layout`, breaks (a setting off breaks none)."""
    return [r for r in RULES if getattr(execution, r.setting) != _OFF[r.setting] and not r.holds(layout, execution)]


def check_settings(layout, has_experts: bool) -> None:
    """Refuse, in one line, settings the layout's model or its framework cannot run: a capacity factor
    without experts, and every broken RULES rule with its source."""
    ex = layout.execution
    check_experts(ex, has_experts)
    for r in broken_rules(layout, ex):
        raise TrainplanError(f"{r.setting}={_text(getattr(ex, r.setting))} needs {r.needs} ({r.source}); "
                             f"change the layout or --set {r.setting}={_text(_OFF[r.setting])}")


def check_experts(ex: Execution, has_experts: bool) -> None:
    """The capacity settings need a model with experts (`plan` checks them once for its whole search)."""
    if not has_experts and (ex.moe_capacity_factor is not None or ex.moe_pad_to_capacity):
        key = "moe_capacity_factor" if ex.moe_capacity_factor is not None else "moe_pad_to_capacity"
        raise TrainplanError(f"{key} applies to mixture-of-experts models only; this model has no experts "
                             f"(drop --set {key})")


def drop_refused(layout):
    """`layout` with every setting whose RULES fail on it turned off: a search applies one --set to
    layouts where the framework accepts it and to layouts where it does not, and costs each as it runs."""
    off = {r.setting: _OFF[r.setting] for r in broken_rules(layout, layout.execution)}
    return layout.with_(execution=replace(layout.execution, **off)) if off else layout


def _text(v) -> str:
    return "null" if v is None else str(v).lower()


def _load_conventions(raw: dict, where: str) -> tuple[Conventions, dict]:
    check_keys(raw, set(CONVENTION_CHOICES), where, required=set(CONVENTION_CHOICES))
    values, sources = {}, {}
    for key, entry in raw.items():
        check_keys(entry, {"value", "source"}, f"{where}.{key}", required={"value", "source"})
        allowed, v = CONVENTION_CHOICES[key], entry["value"]
        ok = isinstance(v, bool) if allowed is bool else v in allowed
        assert ok, f"{where}.{key} = {v!r}: expected {allowed}"  # packaged data, not user input
        values[key], sources[key] = v, entry["source"]
    return Conventions(**values), sources


def conventions(layout) -> Conventions:
    """The memory conventions a layout runs with: its stack's, with the layout's own knobs
    (LAYOUT_OVERRIDES, None = the stack's) taking precedence. Every consumer reads them here."""
    return _conventions(layout.stack, *_override_values(layout))


_override_values = operator.attrgetter(*LAYOUT_OVERRIDES)  # the knobs' values, in LAYOUT_OVERRIDES' order


@functools.lru_cache(maxsize=256)
def _conventions(name: str, *knobs) -> Conventions:
    changes = {}
    for (knob, key), v in zip(LAYOUT_OVERRIDES.items(), knobs, strict=True):
        if v is not None:
            changes[key] = ("last_microbatch" if v else "every_microbatch") if key == "grad_sync" else v
    base = stack(name).conventions
    return replace(base, **changes) if changes else base


@functools.cache
def stacks() -> dict[str, Stack]:
    """Every stack preset, by name (stacks.toml, read once)."""
    data = read_toml(Path(__file__).with_name("stacks.toml"))
    return {name: _load_stack(name, d) for name, d in data.items()}


def stack(name: str) -> Stack:
    try:
        return stacks()[name]
    except KeyError:
        raise TrainplanError(f"unknown stack {name!r}; known: {', '.join(stacks())}") from None


def stack_for_framework(framework: str | None) -> Stack | None:
    """The preset a validation record's `train.framework` names (its own name or one of `frameworks`)."""
    for s in stacks().values():
        if framework == s.name or framework in s.frameworks:
            return s
    return None


def a2a_group(cp: int, tp: int, gpus_per_node: int) -> int:
    """cp_comm a2a+p2p: ranks of the all-to-all (inner) level, the cp ranks that share a node."""
    return math.gcd(cp, max(1, gpus_per_node // tp))


def cp_heads_split(cp_comm: str, cp: int, tp: int, gpus_per_node: int) -> int:
    """Ways the context-parallel all-to-all splits each tp rank's attention heads (1: ring, all-gather)."""
    if cp_comm == "a2a":
        return cp
    if cp_comm == "a2a+p2p":
        return a2a_group(cp, tp, gpus_per_node)
    return 1
