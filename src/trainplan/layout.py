"""Layout: one candidate way to run a job (precision, checkpointing, batch split, parallel degrees).

GPU count = dp_replicate * dp_shard * tp * pp * cp. The routed experts are laid out on their own
grid over the same ranks ("parallel folding": Megatron-Core parallel_state.py builds the expert
groups from their own RankGenerator, order tp-ep-dp; torchtitan's ParallelDims the same two ways):
per pipeline stage and data-parallel replica, dp_shard * cp * tp = etp * ep * edp_shard, etp
innermost (contiguous ranks), then ep (stride etp), then edp_shard (stride etp * ep). `etp` (expert
tensor parallelism) splits each expert's matrices, `ep` splits the experts, and the experts' states
are sharded over edp_shard (and replicated over dp_replicate). etp divides tp (the etp group lies
inside the tp group): torchtitan's two foldings are etp = tp (ep taken out of dp_shard * cp) and
etp = 1 (out of dp_shard * cp * tp); Megatron-Core also runs the sizes between; None is the
stack's default (stacks.toml [NAME.conventions] expert_tp: Megatron's = tp, torchtitan's 1 once
ep > 1). `expert_groups` is the one home of these degrees: memory, step time, the dispatcher's
groups and the search read them there.
`sharding` applies over the dp_shard group: "fsdp" shards parameters, gradients and optimizer
states (FSDP2 / ZeRO-3; with dp_replicate > 1 this is HSDP); "zero2" shards gradients and optimizer
states; "zero1" shards optimizer states and fp32 master weights (Megatron's distributed optimizer);
"none" is plain data parallel (dp_shard must be 1). The stack says how each runs (costs/states.py):
trainplan's trainer runs zero2 as FSDP2 without resharding after forward and zero1 as DDP + torch's
ZeroRedundancyOptimizer (runtime/parallel.py).

`stack` names the software that runs the layout and `execution` its settings (stacks.py): what it
overlaps (TP, DP, PP communication), its MoE dispatcher, context-parallel exchange, cross-entropy
kernel, CUDA graphs and power cap. Left out, `execution` is the stack's preset.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields, replace
from operator import attrgetter

from trainplan.errors import TrainplanError
from trainplan.models.stages import Uneven, check_split, max_stage_layers
from trainplan.precision import DEFAULT as DEFAULT_PRECISION
from trainplan.precision import Recipe
from trainplan.precision import canonical as canonical_precision
from trainplan.precision import names as recipe_names
from trainplan.precision import recipe as recipe_named
from trainplan.spelling import Variant, spelled, spellings
from trainplan.stacks import (
    DEFAULT_STACK,
    Conventions,
    Execution,
    applicable,
    check_settings,
    cp_heads_split,
    execution_from_dict,
    stacks,
)
from trainplan.stacks import conventions as stack_conventions
from trainplan.stacks import stack as stack_preset

SHARDING = ("none", "zero1", "zero2", "fsdp")
# Activation checkpointing policies (costs/memory.py documents what each keeps):
#   none: keep everything for backward
#   selective: per-op selective checkpointing (keep matmul and attention outputs, recompute the
#              cheap element-wise ops, norms and activations); Megatron's attention-core recompute
#              is the same memory with flash attention
#   full: keep only each layer's input, recompute the layer in backward
#   partial: full checkpointing on `ac_layers` layers (per pipeline stage), none on the rest
#   offload: keep each layer's input in host memory (full recompute, no GPU copy)
AC_MODES = ("none", "selective", "full", "partial", "offload")
PP_SCHEDULES = ("1f1b", "interleaved", "gpipe")


_OPTIONAL = ("etp", "grad_reduce_fp32", "compiled_loss", "vocab_parallel_loss", "bf16_loss", "fsdp_sync_last_microbatch",
             "pp_first_stage_layers", "pp_last_stage_layers", "pp_embedding_in_split", "pp_loss_in_split")


class _Resolved:
    """What a Layout resolves from its names, once, on first use: its recipe, its stack's memory
    conventions, its expert groups and its hash. Slots of a base class, not fields: they are not compared,
    hashed, copied by `replace` or written out, and a layout built by `replace` resolves its own."""

    __slots__ = ("_conventions", "_expert_groups", "_hash", "_recipe")


@dataclass(frozen=True, slots=True)
class Layout(_Resolved):
    """One candidate plan layout. Defaults are one GPU, bf16, no checkpointing."""

    # Each field a person sets carries its spellings (spelling.py): its flag (--NAME unless named),
    # its key in the layout text (the name unless named), the kind of value the flag parses, and the
    # flag's default where it is not the field's. The JSON key is the name.
    precision: str = spelled(DEFAULT_PRECISION, help=lambda: ", ".join(recipe_names()), variants={  # a recipe's name (aliases are canonicalised where they enter)
        "searched": Variant(default=None, help="fix the precision recipe (default: searched)"),
        "trace": Variant(help="a recipe the tracer runs (one with a runtime converter), or an alias, "
                              "e.g. fp8 = fp8_tensorwise")})
    # A layout given by hand (estimate, fit, trace) is costed with full checkpointing unless told
    # otherwise: the choice that fits; Layout() itself keeps everything (none).
    ac: str = spelled("none", choices=AC_MODES, flag_default="full", help="activation checkpointing")
    # with ac="partial": layers per pipeline stage that are fully recomputed; trace counts the
    # traced model's layers and defaults to 1, so that `trace --ac partial` recomputes one
    ac_layers: int = spelled(0, kind="int", help="with --ac partial: layers per stage recomputed", variants={
        "trace": Variant(default=1, help="with --ac partial: layers fully recomputed")})
    micro_batch: int = spelled(1, kind="positive", text="mb", help="sequences per GPU per forward/backward")
    # micro-batches per optimizer step per data-parallel rank (pp: per stage); the flags give the global batch
    grad_accum: int = spelled(1, flag=None, text="ga")
    dp_replicate: int = spelled(1, kind="positive", help="data-parallel replicas (HSDP: each holds a full copy)")
    dp_shard: int = spelled(1, kind="positive", flag_default=None,
                            help="default: the GPUs left after tp*pp*cp*dp_replicate")
    sharding: str = spelled("fsdp", choices=SHARDING, help="what the dp_shard group shards")
    tp: int = spelled(1, kind="positive", help="tensor-parallel degree")
    # with tp > 1: norms/dropout activations sharded over tp
    sequence_parallel: bool = spelled(True, kind="switch", const=False, flag="--no-sequence-parallel",
                                      help="with tp > 1: norms and dropout activations whole on every tp rank")
    pp: int = spelled(1, kind="positive", help="pipeline-parallel degree")
    pp_schedule: str = spelled("1f1b", choices=PP_SCHEDULES, flag_default=None,
                               help="default: interleaved when --vp > 1, else 1f1b")
    vp: int = spelled(1, kind="positive", help="virtual pipeline stages per pp rank (interleaved schedule)")
    # Uneven pipeline split (models/stages.py; Megatron's options of the same meaning): layers on the
    # first / last pipeline rank (0: the even split), or the embedding / loss counted as a layer each.
    pp_first_stage_layers: int = spelled(0, kind="int", help="layers on the first pipeline stage "
                                         "(Megatron --decoder-first-pipeline-num-layers)")
    pp_last_stage_layers: int = spelled(0, kind="int", help="layers on the last pipeline stage "
                                        "(Megatron --decoder-last-pipeline-num-layers)")
    pp_embedding_in_split: bool = spelled(False, kind="switch", help="the embedding counts as a layer in the "
                                          "pipeline split (Megatron --account-for-embedding-in-pipeline-split)")
    pp_loss_in_split: bool = spelled(False, kind="switch",
                                     help="the output layer and loss count as a layer in the pipeline split")
    cp: int = spelled(1, kind="positive", help="context-parallel degree")
    ep: int = spelled(1, kind="positive", help="expert-parallel degree")
    etp: int | None = spelled(None, kind="positive", help="expert tensor parallel size, a divisor of tp "
                              "(default: the stack's; layout.expert_groups)")
    fp8_allgather: bool = spelled(False, kind="switch", help="FSDP all-gathers fp8 weights (fp8 recipes only)")
    chunked_loss: bool = spelled(False, kind="switch", help="cross-entropy over vocabulary chunks, no full fp32 "
                                 "logits")
    optimizer_offload: bool = spelled(False, kind="switch", help="optimizer states and master weights in host "
                                      "memory")
    flash_attention: bool = spelled(True, kind="switch", const=False, flag="--no-flash-attention",
                                    help="materialised s x s attention scores (no fused attention)")
    torch_compile: bool = spelled(False, kind="switch", help="the model compiled with torch.compile")
    # Memory-only knobs (costs/states.py, costs/overheads.py); defaults are the conservative choice.
    # None: the stack's memory convention (stacks.toml [NAME.conventions], read by stacks.conventions).
    grad_reduce_fp32: bool | None = spelled(None, kind="switch", const=False, flag="--grad-reduce-bf16",
                                            help="gradients reduced and kept in bf16 (NeMo performance recipes), "
                                                 "not fp32")
    compiled_loss: bool = spelled(False, kind="switch", help="the loss is compiled with the model (torch.compile): "
                                  "its upcast fused (torchtitan 2025+)")
    vocab_parallel_loss: bool | None = None  # with tp > 1: loss on vocabulary-sharded logits (False: gathered)
    bf16_loss: bool | None = None  # eager cross-entropy straight on bf16 logits, which the loop keeps through backward
    fsdp_sync_last_microbatch: bool | None = None  # FSDP reduce-scatters on the last micro-batch only
    # Which software runs the layout and how (stacks.py); execution None = the stack's preset, its
    # settings changed by --set KEY=VALUE (commands/_layout_args.py).
    stack: str = spelled(DEFAULT_STACK, flag_default=None, help=lambda: (
        f"software that runs the layout: {', '.join(stacks())} (default {DEFAULT_STACK}); its preset gives the "
        "execution settings"))
    execution: Execution | None = None

    def __post_init__(self):
        # frozen: fill the preset in at construction, then turn off what the stack cannot run with
        # this layout (the presets' only_if conditions, stacks.applicable), on every construction
        execution = stack_preset(self.stack).execution if self.execution is None else self.execution
        object.__setattr__(self, "execution", applicable(self, execution))

    # Each resolved value is read from its slot (the search's hot path), resolved on the first miss.
    def _resolve(self, slot: str, rule):
        """Set `slot` to `rule(self)` (frozen: past __setattr__) and return it."""
        value = rule(self)
        object.__setattr__(self, slot, value)
        return value

    def __hash__(self) -> int:
        # the dataclass's own hash (of every field, in order), computed once: the search keys its
        # caches by layout
        try:
            return self._hash
        except AttributeError:
            return self._resolve("_hash", lambda L: hash(_field_values(L)))

    @property
    def recipe(self) -> Recipe:
        """The precision recipe the layout runs (precision.recipe of its name)."""
        try:
            return self._recipe
        except AttributeError:
            return self._resolve("_recipe", lambda L: recipe_named(L.precision))

    @property
    def conventions(self) -> Conventions:
        """The memory conventions it runs with: the one rule is stacks.conventions."""
        try:
            return self._conventions
        except AttributeError:
            return self._resolve("_conventions", stack_conventions)

    @property
    def expert_groups(self) -> ExpertGroups:
        """The routed experts' degrees: the one rule is expert_groups (module doc)."""
        try:
            return self._expert_groups
        except AttributeError:
            return self._resolve("_expert_groups", expert_groups)  # the module function

    @property
    def dp(self) -> int:
        return self.dp_replicate * self.dp_shard

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer step: micro_batch x grad_accum x dp (the batch identity that
        check_layout holds the workload's global batch to)."""
        return self.micro_batch * self.grad_accum * self.dp

    @property
    def num_gpus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def uneven(self) -> Uneven:
        """The pipeline split rule of models/stages.py these fields name."""
        return Uneven(self.pp_first_stage_layers, self.pp_last_stage_layers, self.pp_embedding_in_split,
                      self.pp_loss_in_split)

    def with_(self, **changes) -> Layout:
        """This layout with `changes` (dataclasses.replace's meaning, at a fraction of its cost: the
        search builds layouts in its inner loop)."""
        if not changes.keys() <= _FIELD_NAMES:
            raise TypeError(f"Layout has no field {min(changes.keys() - _FIELD_NAMES)!r}")
        values = dict(zip(_FIELD_ORDER, _field_values(self), strict=True))
        values.update(changes)
        return Layout(**values)

    def with_stack(self, name: str, **settings) -> Layout:
        """The same layout run by stack `name`: its preset settings, with `settings` overriding keys."""
        return replace(self, stack=name, execution=stack_preset(name).execution.with_(**settings))

    @property
    def loss_kind(self) -> str:
        """The cross-entropy that runs ('plain', 'fused', 'chunked'): the stack's `cross_entropy`
        setting, unless the layout's own options ask for more (chunked_loss, compiled_loss: the loss
        compiled with the model fuses its upcast like a fused kernel)."""
        if self.chunked_loss:
            return "chunked"
        if self.compiled_loss and self.execution.cross_entropy == "plain":
            return "fused"
        return self.execution.cross_entropy

    def to_dict(self) -> dict:
        # The memory-only knobs are written only when set, so a plan.json of a layout that does not
        # use them reads and renders exactly as before they existed. Stack and execution always are.
        out = {f.name: getattr(self, f.name) for f in fields(self)
               if f.name not in _OPTIONAL or getattr(self, f.name) != f.default}
        out["execution"] = self.execution.to_dict()
        return out

    def short(self) -> str:
        """The layout as one line that `parse_layout` reads back to an equal Layout.

        'bf16 ac=full mb=2 ga=4 dp=1x8(fsdp) tp=2 pp=4 interleaved/v2', then `field=value` for every
        other field that differs from its default (`fp8_allgather=true`), `stack=NAME` when not the
        default stack, and `setting=value` for each execution setting that differs from the stack's
        preset. A field added to Layout or Execution round-trips without a change here.
        """
        key = _KEY
        parts = [self.precision, f"{key['ac']}={self.ac}" + (f"({self.ac_layers})" if self.ac == "partial" else ""),
                 f"{key['micro_batch']}={self.micro_batch}", f"{key['grad_accum']}={self.grad_accum}",
                 f"dp={self.dp_replicate}x{self.dp_shard}({self.sharding})"]
        for k in ("tp", "pp", "cp", "ep"):
            v = getattr(self, k)
            if v > 1:
                parts.append(f"{key[k]}={v}")
        if self.pp > 1:
            parts.append(self.pp_schedule + (f"/v{self.vp}" if self.vp > 1 else ""))
        shown = set(_HEAD) | ({"pp_schedule", "vp"} if self.pp > 1 else set())
        if self.ac == "partial":
            shown.add("ac_layers")
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name not in shown and f.name != "execution" and v != f.default:
                parts.append(f"{key[f.name]}={_text(v)}")
        preset = applicable(self, stack_preset(self.stack).execution)
        for k, v in self.execution.to_dict().items():
            if v != getattr(preset, k):
                parts.append(f"{k}={_text(v)}")
        return " ".join(parts)


_FIELD_ORDER = tuple(f.name for f in fields(Layout))
_FIELD_NAMES = frozenset(_FIELD_ORDER)
_field_values = attrgetter(*_FIELD_ORDER)


@dataclass(frozen=True, slots=True)
class ExpertGroups:
    """The routed experts' parallel degrees for one layout (module doc: the folding)."""

    tp: int  # the dense tensor-parallel size
    etp: int  # ranks splitting each expert's matrices (column-parallel w1/w3, row-parallel w2)
    ep: int  # ranks splitting the experts
    edp_shard: int  # ranks sharding (fsdp / zero) each expert's states: dp_shard * cp * tp / (ep * etp)

    @property
    def weight_split(self) -> int:
        """Ways a layer's routed-expert weights are divided before data-parallel sharding: the
        number of ranks that share one copy of them."""
        return self.ep * self.etp

    @property
    def ep_stride(self) -> int:
        """Rank stride of the ep group (etp innermost)."""
        return self.etp

    @property
    def edp_stride(self) -> int:
        return self.ep * self.etp

    @property
    def routed_share(self) -> float:
        """Rows each rank runs through its experts, as a share of its micro-batch's routed copies
        (tokens x top-k): sequence parallel leaves tokens/tp on a rank and the etp group gathers
        etp of those shares; without sequence parallel the tp ranks hold the same tokens and
        etp = tp (check_layout), so the share is 1 both ways."""
        return self.etp / self.tp


def expert_tp(L: Layout) -> int:
    """The layout's etp: its own, else its stack's default (stacks.toml expert_tp)."""
    if L.etp is not None:
        return L.etp
    if L.conventions.expert_tp == "one_under_ep" and L.ep > 1:
        return 1
    return L.tp


def expert_groups(L: Layout) -> ExpertGroups:
    """The one home of the rule 'how many ranks share one expert's weights' (module doc)."""
    return _expert_groups(L.tp, expert_tp(L), L.ep, L.dp_shard, L.cp)


@functools.lru_cache(maxsize=4096)  # a search resolves thousands of layouts over a few dozen degree sets
def _expert_groups(tp: int, etp: int, ep: int, dp_shard: int, cp: int) -> ExpertGroups:
    return ExpertGroups(tp=tp, etp=etp, ep=ep, edp_shard=max(1, dp_shard * cp * tp // (ep * etp)))


# Fields the head of Layout.short() spells in its own notation.
_HEAD = ("precision", "ac", "micro_batch", "grad_accum", "dp_replicate", "dp_shard", "sharding", "tp", "pp",
         "cp", "ep")
# Each field's key in the text (spelling.py: `mb` for micro_batch), and the field each key names;
# the text also takes a field's own name (micro_batch=2).
_KEY = {name: s.key for name, s in spellings(Layout).items() if name != "execution"}
_ABBREV = {k: name for name, k in _KEY.items() if k != name}
# Integer fields whose null means "the stack's default".
_INT_OR_NULL = ("etp",)


def _text(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return "null" if v is None else str(v)


def parse_layout(text: str, where: str = "--layout") -> Layout:
    """The Layout that `Layout.short()` printed as `text`; a malformed token is a one-line error."""
    import re

    from trainplan.stacks import SETTINGS, parse_assignment

    tokens = text.split()
    if not tokens:
        raise TrainplanError(f"{where}: empty layout; expected e.g. 'bf16 ac=full mb=1 ga=1 dp=1x8(fsdp)'")
    data: dict = {"precision": tokens[0]}
    settings: dict = {}
    names = {f.name: f for f in fields(Layout)}
    for tok in tokens[1:]:
        sched = re.fullmatch(r"([a-z0-9]+)(?:/v(\d+))?", tok)
        if sched and sched.group(1) in PP_SCHEDULES:
            data["pp_schedule"] = sched.group(1)
            data["vp"] = int(sched.group(2) or 1)
            continue
        key, sep, raw = tok.partition("=")
        if not sep:
            raise TrainplanError(f"{where}: cannot read {tok!r}; expected KEY=VALUE or a pipeline schedule "
                                 f"({', '.join(PP_SCHEDULES)})")
        if key == "dp":
            m = re.fullmatch(r"(\d+)x(\d+)\(([a-z0-9]+)\)", raw)
            if not m:
                raise TrainplanError(f"{where}: cannot read {tok!r}; expected dp=REPLICATExSHARD(SHARDING)")
            data.update(dp_replicate=int(m.group(1)), dp_shard=int(m.group(2)), sharding=m.group(3))
        elif key == "ac" and (m := re.fullmatch(r"([a-z]+)\((\d+)\)", raw)):
            data.update(ac=m.group(1), ac_layers=int(m.group(2)))
        elif key in SETTINGS:
            settings[key] = parse_assignment(tok)[1]
        elif _ABBREV.get(key, key) in names and key != "execution":
            name = _ABBREV.get(key, key)
            data[name] = _value(raw, getattr(Layout(), name), tok, where, name)
        else:
            raise TrainplanError(f"{where}: unknown key {key!r} in {tok!r}; known: {', '.join(_ABBREV)}, dp, "
                                 f"{', '.join(n for n in names if n != 'execution')}, {', '.join(SETTINGS)}")
    if settings:
        data["execution"] = settings  # over the stack's preset (layout_from_dict)
    return layout_from_dict(data, where)


def _value(raw: str, default, tok: str, where: str, name: str = ""):
    """A field's text as the type of its default (layout_from_dict then checks it)."""
    if name in _INT_OR_NULL:  # null: the stack's default; else read as an integer
        if raw == "null":
            return None
        default = 0
    if isinstance(default, bool) or default is None:  # None: a convention knob (a boolean)
        if raw not in ("true", "false"):
            raise TrainplanError(f"{where}: {tok!r} must be true or false")
        return raw == "true"
    if isinstance(default, int):
        try:
            return int(raw)
        except ValueError:
            raise TrainplanError(f"{where}: {tok!r} must be an integer") from None
    return raw


def layout_from_dict(data: dict, where: str = "layout") -> Layout:
    """Parse a layout written by a person or a file; unknown keys and bad values are one-line errors,
    a precision alias is read as its recipe's name (precision.canonical)."""
    from trainplan.parsing import check_keys

    names = {f.name: f for f in fields(Layout)}
    check_keys(data, set(names), where)
    data = dict(data)
    name = data.get("stack", DEFAULT_STACK)
    if not isinstance(name, str):
        raise TrainplanError(f"{where}: stack must be a string, got {name!r}")
    preset = stack_preset(name).execution
    if "execution" in data:  # keys left out come from the stack's preset
        data["execution"] = execution_from_dict(data["execution"], f"{where}: execution", preset)
    for k, v in data.items():
        if k == "execution":
            continue
        default = getattr(Layout(), k)
        if k in _INT_OR_NULL:
            if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
                raise TrainplanError(f"{where}: {k} must be an integer or null, got {v!r}")
        elif default is None:  # a convention knob: a boolean, or null for the stack's convention
            if v is not None and not isinstance(v, bool):
                raise TrainplanError(f"{where}: {k} must be true, false or null, got {v!r}")
        elif isinstance(default, bool):
            if not isinstance(v, bool):
                raise TrainplanError(f"{where}: {k} must be true or false, got {v!r}")
        elif isinstance(default, int):
            if isinstance(v, bool) or not isinstance(v, int):
                raise TrainplanError(f"{where}: {k} must be an integer, got {v!r}")
        elif not isinstance(v, str):
            raise TrainplanError(f"{where}: {k} must be a string, got {v!r}")
    if "precision" in data:  # an alias is read as its recipe's name: a Layout holds no alias
        data["precision"] = canonical_precision(data["precision"])
    return Layout(**data)


def check_layout(job, layout: Layout) -> None:
    """Refuse a layout that cannot run this job, with what to change. `job` is a job.Job."""
    from trainplan.precision import check_supported, registry

    m, c, w = job.model, job.cluster, job.workload
    L = layout
    for k in ("micro_batch", "grad_accum", "dp_replicate", "dp_shard", "tp", "pp", "vp", "cp", "ep"):
        if getattr(L, k) <= 0:
            raise TrainplanError(f"{k} must be a positive integer, got {getattr(L, k)}")
    if L.sharding not in SHARDING:
        raise TrainplanError(f"unknown sharding {L.sharding!r}; known: {', '.join(SHARDING)}")
    if L.ac not in AC_MODES:
        raise TrainplanError(f"unknown activation checkpointing {L.ac!r}; known: {', '.join(AC_MODES)}")
    if L.pp_schedule not in PP_SCHEDULES:
        raise TrainplanError(f"unknown pipeline schedule {L.pp_schedule!r}; known: {', '.join(PP_SCHEDULES)}")
    check_supported(L.recipe, c.gpu)
    if L.sharding == "none" and L.dp_shard > 1:
        raise TrainplanError("sharding 'none' needs dp_shard = 1 (put the data-parallel degree in dp_replicate)")
    if L.tp > c.node.nvlink_domain_gpus and c.node.nvlink_domain_gpus > 1:
        raise TrainplanError(
            f"tp={L.tp} is larger than the NVLink domain of {c.node.name} ({c.node.nvlink_domain_gpus} GPUs); "
            "keep tensor parallelism inside a node"
        )
    if L.tp > c.node.gpus_per_node and c.node.nvlink_domain_gpus <= 1:
        raise TrainplanError(f"tp={L.tp} is larger than a node of {c.node.name} ({c.node.gpus_per_node} GPUs)")
    if m.num_heads % L.tp:
        raise TrainplanError(f"tp={L.tp} does not divide the {m.num_heads} attention heads of {m.name}")
    if m.num_kv_heads % L.tp and L.tp % m.num_kv_heads:
        raise TrainplanError(
            f"tp={L.tp} and the {m.num_kv_heads} key/value heads of {m.name} do not divide one another"
        )
    if L.vp > 1 and L.pp == 1:
        # virtual stages interleave chunks of the layers over the pipeline ranks (Megatron-Core's
        # --num-layers-per-virtual-pipeline-stage needs pipeline parallelism); with one rank there is none
        raise TrainplanError(f"vp={L.vp} needs pipeline parallelism (pp > 1): virtual stages interleave layer chunks "
                             "over the pipeline ranks; use vp=1, or pp > 1")
    check_split(m.num_layers, L.pp, L.vp, L.uneven)
    if L.vp > 1 and L.pp_schedule != "interleaved":
        raise TrainplanError(f"vp={L.vp} needs pp_schedule 'interleaved'")
    per_stage = max_stage_layers(m.num_layers, L.pp, L.vp, L.uneven)
    if L.ac == "partial" and not 0 < L.ac_layers <= per_stage:
        raise TrainplanError(
            f"ac 'partial' needs 1 <= ac_layers <= layers per pipeline stage ({per_stage}), got {L.ac_layers}"
        )
    if w.seq_len % L.cp:
        raise TrainplanError(f"cp={L.cp} does not divide the sequence length {w.seq_len}")
    if L.tp > 1 and L.sequence_parallel and (w.seq_len // L.cp) % L.tp:
        raise TrainplanError(
            f"sequence parallel splits each rank's {w.seq_len // L.cp} tokens of a sequence over tp={L.tp}, which "
            "does not divide them (Megatron-Core asserts it too); choose a sequence length or tp that divides, "
            "or sequence_parallel false"
        )
    split = cp_heads_split(L.execution.cp_comm, L.cp, L.tp, c.node.gpus_per_node)
    if split > 1 and (m.num_heads // L.tp) % split:
        raise TrainplanError(
            f"cp_comm {L.execution.cp_comm!r} splits each tp rank's {m.num_heads // L.tp} attention heads {split} ways "
            f"(all-to-all over cp); choose cp dividing them, or --set cp_comm=p2p"
        )
    why = expert_refusal(m, L)
    if why:
        raise TrainplanError(why)
    check_settings(L, m.moe is not None)  # capacity factor for MoE only; the frameworks' own refusals
    if L.num_gpus != c.num_gpus:
        raise TrainplanError(
            f"layout uses dp_replicate*dp_shard*tp*pp*cp = {L.dp_replicate}*{L.dp_shard}*{L.tp}*{L.pp}*{L.cp}"
            f" = {L.num_gpus} GPUs but the cluster has {c.num_gpus}; change the degrees or --nodes"
        )
    lp = L.recipe.low_precision
    if L.fp8_allgather and lp is None:
        lowp = [r.name for r in registry().values() if r.low_precision]
        raise TrainplanError(f"fp8_allgather needs a low-precision recipe ({', '.join(lowp)}), not {L.precision!r}")
    if L.fp8_allgather and L.sharding == "fsdp" and not lp.fsdp_allgather:
        ok = [r.name for r in registry().values() if r.low_precision and r.low_precision.fsdp_allgather]
        raise TrainplanError(f"FSDP cannot all-gather {L.precision} weights in low precision; drop fp8_allgather "
                             f"or use {', '.join(ok)}")
    if w.global_batch != L.global_batch:
        raise TrainplanError(
            f"global batch {w.global_batch} != micro_batch*grad_accum*dp = "
            f"{L.micro_batch}*{L.grad_accum}*{L.dp}; change the micro-batch or gradient accumulation"
        )


def expert_refusal(m, L: Layout) -> str | None:
    """What is wrong with ep and etp against the model's experts and the expert folding (module
    doc), as a one-line message with what to do, or None. check_layout raises it; the search skips
    such candidates."""
    if L.etp is not None and L.etp <= 0:
        return f"etp must be a positive integer or null, got {L.etp}"
    if L.etp is not None and m.moe is None:
        return f"etp={L.etp} splits routed experts, but {m.name} has none (a dense model); leave etp out"
    etp = L.expert_groups.etp
    if L.tp % etp:
        return (f"etp={etp} with tp={L.tp}: etp must divide tp (the expert tensor-parallel group lies inside "
                f"the tp group); use a divisor of {L.tp}")
    if etp not in (1, L.tp) and L.conventions.torch_style:
        return (f"etp={etp} with tp={L.tp}: {L.stack} folds the experts with etp = 1 or etp = tp "
                f"(torchtitan's two foldings; Megatron-Core runs the sizes between); use etp=1 or "
                f"etp={L.tp}, or --stack megatron")
    if m.moe is not None and etp < L.tp and not L.sequence_parallel:
        return (f"etp={etp} with tp={L.tp} needs sequence_parallel (each tp rank routes its own share of the "
                f"tokens); set sequence_parallel true, or etp={L.tp}")
    if L.ep > 1:
        if m.moe is None:
            return f"ep={L.ep} but {m.name} has no experts; use ep=1"
        if m.moe.num_experts % L.ep:
            return f"ep={L.ep} does not divide the {m.moe.num_experts} experts of {m.name}"
    ranks = L.dp_shard * L.cp * L.tp // etp
    if ranks % L.ep:
        what = "dp_shard*cp" if etp == L.tp else "dp_shard*cp*tp"
        return f"ep={L.ep} must divide {what} = {ranks} (etp={etp}); change ep or dp_shard"
    return None
