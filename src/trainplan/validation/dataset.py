"""Read `trainplan-validation/1` (published measurements of real runs) into jobs and layouts.

Each record becomes a `Case`: the job and layout trainplan would plan, the measured values, and
the list of assumptions made to represent it (documented defaults below), or a skip reason when it
cannot be represented. Nothing is dropped silently.

Mapping (the dataset `description` defines the source fields):
  * gpu id -> hardware.find_gpu; the node is built from gpus_per_node, nvlink_domain_gpus and the
    inter_node text ("8x400Gb/s IB", "400Gb/s/GPU RDMA", "1600Gb/s/node RoCE", "3.2Tb/s/node",
    "800Gb/s inter-node" = per node). Unknown or missing text: 400 Gb/s per GPU on Hopper and
    Blackwell (DGX H100/B200: 8x400 Gb/s), 200 Gb/s per GPU on Ampere (DGX A100: 8x200 Gb/s HDR),
    recorded as an assumption. A run on fewer GPUs than a node uses a node of that many GPUs.
  * sharding: dist_optimizer -> zero1 over all dp ranks; fsdp/hsdp -> fsdp with dp_shard =
    fsdp_shard_degree (or dp), dp_replicate = dp / dp_shard; zero2 -> zero2; none -> plain DP;
    missing -> zero1 (assumed; Megatron's default in these sources).
  * precision: a recipe of the registry (precision.py) or one of its aliases (fp8_unspecified ->
    fp8_tensorwise); null ('16-bit mixed') -> precision.DEFAULT (bf16: same peak as fp16).
    fp8_all_gather on a recipe FSDP cannot all-gather in low precision is dropped (an assumption).
  * activation checkpointing 'unknown' -> DEFAULT_AC ('selective': Megatron/NeMo perf recipes and
    torchtitan default to it or to none, whose step times differ by the attention-core re-run only),
    'partial' without a layer count -> half of each stage's layers; both listed as assumptions.
  * micro_batch missing -> 1 (assumed); global batch missing, a batch that does not split into
    micro-batches, or a layout trainplan refuses -> skipped with the reason.
  * memory conventions (how activations, gradients, the loss and fp8 copies are kept, which peak
    the logger reports) are the record's stack's (stacks.toml [NAME.conventions]), not set here.
    Layout fields a record leaves unstated that its stack's code or recipes set (fp8 parameters and
    sequence parallel in NeMo / Megatron-Bridge recipes, KempnerForge's pure bf16, torchtitan's
    compiled loss) are the stack's `record_defaults` (stacks.toml, each with its source and
    condition), applied by `_record_defaults` and each listed as an assumption.
  * expert tensor parallelism: the record's `train.etp`; null is its stack's default
    (stacks.toml expert_tp: Megatron-family = tp, torchtitan 1 once ep > 1; layout.expert_groups).
  * peak memory kind: the record's, else its stack's logger (`peak_mem_kind`), else the device.
  * stack and execution settings: the record's `train.framework` names a stack preset (stacks.toml;
    `fms_fsdp` -> fms); `train.execution` (the stacks.SETTINGS keys) overrides single settings and a
    key it leaves out is the preset's; `hardware.power_limit_w` is the power cap. A framework without
    a preset ('other') runs on trainplan's preset, listed as an assumption.

The packaged dev dataset (DEV_DATASET: data/published_dev.json) is the shared file with the
`train.execution` objects (and the null train fields a source states, ANNOTATED_TRAIN) of
data/annotations.json added, each with a note saying which source states it; `trainplan validate`
reads it when no --dataset is given.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from trainplan.errors import TrainplanError
from trainplan.hardware import Cluster, NodeType, find_gpu, nodes
from trainplan.job import Job, Workload
from trainplan.layout import Layout, check_layout
from trainplan.models.checks import check_spec
from trainplan.models.hybrid_adapters import hybrid_blocks
from trainplan.models.layers import MAMBA2
from trainplan.models.library import catalog
from trainplan.models.spec import Mamba2Spec, MLASpec, ModelSpec, MoESpec
from trainplan.models.stages import balanced_split, max_stage_layers
from trainplan.parsing import read_json
from trainplan.precision import DEFAULT as DEFAULT_PRECISION
from trainplan.precision import canonical, recipe
from trainplan.stacks import DEFAULT_STACK, execution_from_dict, stack, stack_for_framework
from trainplan.units import GBPS_TO_BYTES_PER_S

SCHEMA = "trainplan-validation/1"
DEV_DATASET = Path(__file__).parent / "data" / "published_dev.json"
ANNOTATIONS = Path(__file__).parent / "data" / "annotations.json"
DEFAULT_AC = "selective"
_REFERENCE_NODE = {"ampere": "dgx-a100-80gb", "hopper": "dgx-h100", "blackwell": "dgx-b200"}


@dataclass(frozen=True, slots=True)
class Case:
    id: str
    record: dict
    job: Job | None
    layout: Layout | None
    framework: str
    assumptions: tuple[str, ...]
    skipped_reason: str | None

    @property
    def source_key(self) -> str:
        return self.record.get("source_key", "")

    @property
    def quality(self) -> str:
        return self.record.get("quality", "")

    @property
    def measured(self) -> dict:
        return self.record.get("measured", {})


# Record train fields an annotation may fill where the record left them null and its source states them.
ANNOTATED_TRAIN = ("etp",)


def annotate(data: dict, annotations: dict) -> dict:
    """`data` with each annotation's settings as its record's train.execution, its `train` fields
    (ANNOTATED_TRAIN) in the record's train, and its `corrections` applied (data/annotations.json).

    A correction replaces a train field the record states with the value of the configuration the
    run was launched from, where the two disagree at the same source revision. It names the value it
    replaces (so a changed record stops matching it) and its source; the record carries the text in
    `corrected_fields` and validate lists it among the case's assumptions."""
    by_id = {a["id"]: a for a in annotations["annotations"]}
    out = {**data, "records": []}
    for r in data["records"]:
        a = by_id.get(r.get("id"))
        if a is not None:
            assert set(a.get("train", {})) <= set(ANNOTATED_TRAIN), a["id"]  # packaged data
            train = {**r["train"], **a.get("train", {}),
                     "execution": {**r["train"].get("execution", {}), **a.get("execution", {})}}
            fixed = []
            for c in a.get("corrections", ()):
                assert r["train"].get(c["field"]) == c["stated"], (a["id"], c["field"])  # packaged data
                train[c["field"]] = c["value"]
                fixed.append(f"train.{c['field']} = {c['value']}, not the stated {c['stated']}: {c['source']}")
            r = {**r, "train": train, **({"corrected_fields": fixed} if fixed else {})}
        out["records"].append(r)
    return out


def load_dataset(path) -> tuple[dict, list[Case]]:
    data = read_json(path, "validation dataset")
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("records"), list):
        raise TrainplanError(
            f"{path}: not a {SCHEMA} file (expected an object with schema {SCHEMA!r} and a records list)"
        )
    return data, [to_case(r) for r in data["records"]]


def inter_node_gbps(text: str | None, gpus_per_node: int) -> float | None:
    """Per-node network bandwidth in Gb/s from the dataset's free text, or None when not given."""
    if not text:
        return None
    t = text.replace(" ", "")
    if mm := re.search(r"(\d+)x(\d+)Gb/s", t):
        return float(mm[1]) * float(mm[2])
    if mm := re.search(r"([\d.]+)Tb/s", t):
        return float(mm[1]) * 1000
    if mm := re.search(r"(\d+)Gb/s/GPU", t):
        return float(mm[1]) * gpus_per_node
    if mm := re.search(r"(\d+)Gb/s", t):  # per node ("/node", "inter-node")
        return float(mm[1])
    return None


def _node(hw: dict, assumed: list[str]) -> NodeType:
    gpu = find_gpu(hw["gpu"])
    base = nodes()[_REFERENCE_NODE.get(gpu.arch, "dgx-h100")]
    gpn = min(hw["gpus_per_node"], hw["num_gpus"])
    gbps = inter_node_gbps(hw.get("inter_node"), hw["gpus_per_node"])
    if gbps is None:
        gbps = (200 if gpu.arch == "ampere" else 400) * hw["gpus_per_node"]
        assumed.append(f"inter-node network {gbps:.0f} Gb/s per node (not stated)")
    domain = hw.get("nvlink_domain_gpus") or hw["gpus_per_node"]
    return replace(
        base, name=f"{hw['gpu']} x{gpn}", ec2_name=None, gpu=gpu, gpus_per_node=gpn,
        nvlink_domain_gpus=min(domain, hw["num_gpus"]),
        inter_node_bandwidth=gbps * GBPS_TO_BYTES_PER_S * gpn / hw["gpus_per_node"],
        inter_node_fabric=hw.get("inter_node") or "InfiniBand (assumed)",
        intra_node="nvswitch", price_per_hour=None, price_kind="reference system", sagemaker=False,
    )


# Routing fields of MoESpec the dataset schema has no field for: a record whose architecture is a
# catalog model's routes as that model's config says (the published runs train the published
# architecture; Megatron's DeepSeek-V3 configs set moe_router_num_groups 8, group_topk 4, sigmoid).
_ROUTING = ("num_groups", "topk_groups", "router_score", "load_balance", "router_score_correction_bias")


def _catalog_routing(moe: MoESpec, num_layers: int, hidden: int, assumed: list[str]) -> MoESpec:
    """`moe` with the routing of the catalog model of the same architecture (layers, hidden size,
    experts, top-k), listed as an assumption when it changes anything; else `moe` unchanged."""
    for name, c in catalog().items():
        if (c.moe is not None and c.num_layers == num_layers and c.hidden_size == hidden
                and (c.moe.num_experts, c.moe.experts_per_token) == (moe.num_experts, moe.experts_per_token)):
            routed = replace(moe, **{k: getattr(c.moe, k) for k in _ROUTING})
            if routed != moe:
                assumed.append(f"MoE routing of the {name} config (expert groups {c.moe.num_groups}, "
                               f"top-{c.moe.topk_groups} groups, {c.moe.router_score} scores): not in the record")
            return routed
    return moe


def model_spec(md: dict, seq_len: int, assumed: list[str] | None = None) -> ModelSpec:
    ae = md.get("arch_extra") or {}
    heads = md["num_attention_heads"]
    moe = None
    if md.get("num_experts"):
        shared = md.get("num_shared_experts") or 0
        moe = MoESpec(
            num_experts=md["num_experts"], experts_per_token=md["experts_per_token"],
            expert_ffn_size=md["moe_ffn_hidden_size"], num_shared_experts=shared,
            shared_expert_ffn_size=shared * md["moe_ffn_hidden_size"],
            first_dense_layers=md.get("num_dense_layers") or 0,
        )
        moe = _catalog_routing(moe, md["num_layers"], md["hidden_size"], [] if assumed is None else assumed)
    mla = None
    if md.get("attention") == "mla":
        mla = MLASpec(ae.get("q_lora_rank"), ae["kv_lora_rank"], ae["qk_nope_head_dim"],
                      ae["qk_rope_head_dim"], ae["v_head_dim"])
    learned = ae.get("position_embedding") == "learned"
    window = ae.get("sliding_window")
    hybrid = _hybrid(md, ae, [] if assumed is None else assumed)
    return ModelSpec(
        name=md["name"], model_type=md.get("family") or "gpt", num_layers=md["num_layers"],
        hidden_size=md["hidden_size"], num_heads=heads, num_kv_heads=md.get("num_kv_heads") or heads,
        head_dim=ae.get("head_dim") or md["hidden_size"] // heads, ffn_size=md.get("ffn_hidden_size") or 0,
        vocab_size=md["vocab_size"], mlp=md.get("mlp") or "swiglu",
        norm="layernorm" if md.get("family") in ("gpt", "nemotron") else "rmsnorm",
        tied_embeddings=bool(md.get("tied_embeddings")),
        position_embedding="learned" if learned else "rope",
        max_position_embeddings=seq_len if learned else 0,
        sliding_window=window, sliding_window_layers=md["num_layers"] // 2 if window else 0,
        moe=moe, mla=mla, mtp_layers=ae.get("mtp_num_layers") or 0, source="trainplan-validation/1",
        **hybrid,
    )


# Megatron-Bridge NemotronHModelProvider defaults (src/megatron/bridge/models/nemotronh/nemotron_h_provider.py)
# for the Mamba-2 sizes a record with a layer_pattern leaves out; Mamba2Spec field -> (arch_extra key, default)
_MAMBA_KEYS = {"num_heads": ("mamba_num_heads", None), "head_dim": ("mamba_head_dim", 64),
               "state_size": ("mamba_state_dim", 128), "n_groups": ("mamba_num_groups", 8),
               "conv_kernel": ("mamba_conv_kernel", 4), "chunk_size": ("mamba_chunk_size", 128)}


def _hybrid(md: dict, ae: dict, assumed: list[str]) -> dict:
    """The per-block fields of a record's layer_pattern (module docstring), or none."""
    pattern = md.get("layer_pattern")
    if pattern is None:
        return {}
    if not isinstance(pattern, str) or len(pattern) != md["num_layers"]:
        raise TrainplanError(f"model.layer_pattern must be a string of one letter per layer ({md['num_layers']}), "
                             f"got {pattern!r}")
    kinds = hybrid_blocks(list(pattern), "model.layer_pattern")
    attention = tuple(k[0] for k in kinds)
    mamba = None
    if MAMBA2 in attention:
        sizes = {}
        for field, (key, default) in _MAMBA_KEYS.items():
            if ae.get(key) is None:
                if default is None:
                    raise TrainplanError(f"model.arch_extra.{key} is needed with Mamba-2 (M) blocks in layer_pattern")
                assumed.append(f"{key} {default} (Megatron-Bridge NemotronHModelProvider default): not in the record")
            sizes[field] = ae.get(key) or default
        mamba = Mamba2Spec(**sizes)
    return {"attention_layers": attention, "mlp_layers": tuple(k[1] for k in kinds), "mamba": mamba,
            "norms_per_layer": 1}


def _layout(t: dict, m: ModelSpec, assumed: list[str]) -> Layout:
    dp = t["dp"]
    sharding = t.get("sharding")
    if sharding is None:
        sharding = "dist_optimizer"
        assumed.append("sharding: Megatron distributed optimizer (not stated)")
    if sharding == "dist_optimizer":
        kw = {"sharding": "zero1", "dp_shard": dp, "dp_replicate": 1}
    elif sharding in ("fsdp", "hsdp", "zero2"):
        shard = min(t.get("fsdp_shard_degree") or dp, dp)
        if dp % shard:
            raise TrainplanError(f"fsdp_shard_degree {shard} does not divide dp {dp}")
        kw = {"sharding": "zero2" if sharding == "zero2" else "fsdp", "dp_shard": shard, "dp_replicate": dp // shard}
    elif sharding == "none":
        kw = {"sharding": "none", "dp_shard": 1, "dp_replicate": dp}
    else:
        raise TrainplanError(f"unknown sharding {sharding!r}")
    ac = t["activation_checkpointing"]
    mode, ac_layers = ac.get("mode"), 0
    pp = t["pp"]
    if mode == "unknown" or mode is None:
        mode = DEFAULT_AC
        assumed.append(f"activation checkpointing: {DEFAULT_AC} (not stated)")
    if mode == "partial":
        per_stage = max_stage_layers(m.num_layers, pp)
        ac_layers = ac.get("num_layers") or 0
        if not ac_layers:
            ac_layers = max(1, per_stage // 2)
            assumed.append(f"partial checkpointing of {ac_layers} layers per stage (count not stated)")
        ac_layers = min(ac_layers, per_stage)
    mb = t.get("micro_batch")
    if mb is None:
        mb = 1
        assumed.append("micro_batch 1 (not stated)")
    gb = t.get("global_batch")
    if gb is None:
        raise TrainplanError("global batch not published")
    if gb % (mb * dp):
        raise TrainplanError(f"global batch {gb} is not a multiple of micro_batch*dp = {mb}*{dp}")
    vp = t.get("vp") or 1
    split = balanced_split(m.num_layers, pp, vp)
    if split.counts_ends:
        assumed.append(f"pipeline split: {m.num_layers} layers + embedding + loss over pp*vp = {pp * vp} chunks "
                       "(Megatron account_for_embedding/loss_in_pipeline_split; the layers alone do not divide)")
    named = t.get("precision")
    r = recipe(canonical(named or DEFAULT_PRECISION))
    if named != r.name:
        assumed.append(f"precision {named} -> {r.name}")
    lowp_gather = bool(t.get("fp8_all_gather")) and r.low_precision is not None
    if lowp_gather and kw["sharding"] == "fsdp" and not r.low_precision.fsdp_allgather:
        lowp_gather = False
        assumed.append(f"fp8_all_gather dropped: FSDP all-gathers {r.name} weights in bf16")
    return Layout(
        precision=r.name, ac=mode, ac_layers=ac_layers, micro_batch=mb, grad_accum=gb // (mb * dp),
        tp=t["tp"], pp=pp, cp=t["cp"], ep=t.get("ep") or 1, etp=t.get("etp"), vp=vp,
        pp_schedule="interleaved" if vp > 1 else "1f1b",
        pp_embedding_in_split=split.embedding, pp_loss_in_split=split.loss,
        sequence_parallel=bool(t.get("sequence_parallel")) and t["tp"] > 1,
        fp8_allgather=lowp_gather,
        torch_compile=bool(t.get("torch_compile")), optimizer_offload=bool(t.get("cpu_offload")),
        **kw,
    )


# The record field that states each layout field a stack may default (stacks.toml record_defaults);
# a field absent here (compiled_loss, precision) has no record field saying it, so the stack's applies.
_RECORD_FIELD = {"sequence_parallel": "sequence_parallel", "fp8_allgather": "fp8_all_gather"}
# A date in the record's source or notes ("2024-06", "2024_06", "_202406", "202406"): the year a
# record default's `since` is compared with.
_DATED = re.compile(r"(?<!\d)(20\d\d)[-_]?\d\d|_(20\d\d)\d\d|(20\d\d)\d\d(?!\d)")


def _year(r: dict) -> int | None:
    """The earliest year a record's source or notes are dated with, or None."""
    years = [int(next(g for g in m.groups() if g))
             for m in _DATED.finditer(f"{r.get('source', '')} {r.get('notes', '')}")]
    return min(years) if years else None


def _record_defaults(r: dict, layout: Layout, assumed: list[str]) -> Layout:
    """The record's stack's defaults for layout fields the record does not state (stacks.toml
    [NAME.record_defaults], the module doc), each listed as an assumption."""
    t = r["train"]
    preset = stack_for_framework(t.get("framework"))
    if preset is None:
        return layout
    facts = {"tied_embeddings": bool(r["model"].get("tied_embeddings")),
             "low_precision": layout.recipe.low_precision is not None}
    year = _year(r)
    changes = {}
    for d in preset.record_defaults:
        if d.field in _RECORD_FIELD and t.get(_RECORD_FIELD[d.field]) is not None:
            continue
        if not d.holds(layout, facts):
            continue
        if d.predates(year):
            assumed.append(f"{preset.name} {year}: {d.field} not {d.value} (before {d.since}: {d.source})")
        else:
            changes[d.field] = d.value
            assumed.append(f"{preset.name}: {d.field} = {d.value} ({d.source})")
    return layout.with_(**changes) if changes else layout


def peak_mem_kind(case: Case) -> str:
    """'reserved', 'allocated' or the device total ('device') that a record's peak memory measures:
    the record's own kind, else what its stack's logger reports (the `peak_memory` convention,
    stacks.toml; e.g. KempnerForge's "Mem/GPU" is torch.cuda.max_memory_allocated), else the device."""
    kind = case.measured.get("peak_mem_kind")
    if kind in ("reserved", "allocated"):
        return kind
    preset = stack_for_framework(case.framework)
    return preset.conventions.peak_memory if preset is not None else "device"


def _with_stack(r: dict, layout: Layout, assumed: list[str]) -> Layout:
    """The record's stack preset with its own train.execution and power limit (module doc)."""
    t, fw = r["train"], r["train"].get("framework")
    preset = stack_for_framework(fw)
    if preset is None:
        preset = stack(DEFAULT_STACK)
        assumed.append(f"framework {fw!r} has no stack preset: {DEFAULT_STACK}'s execution settings")
    given = dict(t.get("execution") or {})
    if r["hardware"].get("power_limit_w") is not None:
        given.setdefault("power_limit_w", r["hardware"]["power_limit_w"])
    execution = execution_from_dict(given, f"{r.get('id', '?')}: train.execution", preset.execution)
    return layout.with_(stack=preset.name, execution=execution)


_SECTIONS = ("hardware", "train", "model", "measured")
_TEXT = ("source_key", "quality", "source", "notes")
_MEASURED_NUMBERS = ("tokens_per_s_per_gpu", "step_time_s", "peak_mem_gib", "mfu", "hfu", "tflops_per_gpu",
                     "mfu_peak_tflops")


def _numbers(d: dict, keys: tuple[str, ...], where: str) -> None:
    """Measured values are compared with predictions: positive finite numbers, or null."""
    import math

    for k in keys:
        v = d.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                              or v <= 0):
            raise TrainplanError(f"{where}.{k} must be a positive number or null, got {v!r}")


def _positive_ints(d: dict, keys: tuple[str, ...], where: str) -> None:
    """The record's counts that the layout multiplies: positive integers when present."""
    for k in keys:
        v = d.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
            raise TrainplanError(f"{where}.{k} must be a positive integer, got {v!r}")


def to_case(r: dict) -> Case:
    if not isinstance(r, dict):
        return Case("?", {}, None, None, "unknown", (), f"a record must be an object, got {type(r).__name__}")
    rid = str(r.get("id", "?"))
    t = r.get("train")
    fw = str((t if isinstance(t, dict) else {}).get("framework") or "unknown")
    # A section of the wrong shape is dropped from the record kept with the skip, so that every
    # reader of case.record (the report's columns, the flags) sees objects where it expects them.
    bad = [k for k in _SECTIONS if k in r and not isinstance(r[k], dict)]
    bad += [k for k in _TEXT if k in r and r[k] is not None and not isinstance(r[k], str)]
    if bad:
        return Case(rid, {k: v for k, v in r.items() if k not in bad}, None, None, fw, (),
                    f"{bad[0]} must be {'an object' if bad[0] in _SECTIONS else 'text'}, got {type(r[bad[0]]).__name__}")
    assumed: list[str] = list(r.get("corrected_fields", ()))
    try:
        hw, t = r["hardware"], r["train"]
        _positive_ints(hw, ("num_gpus", "gpus_per_node"), "hardware")
        _positive_ints(t, ("seq_len", "global_batch", "dp", "tp", "pp", "cp", "ep", "etp"), "train")
        _numbers(r.get("measured") or {}, _MEASURED_NUMBERS, "measured")
        for k in ("gpu", "detail", "inter_node"):
            if hw.get(k) is not None and not isinstance(hw[k], str):
                raise TrainplanError(f"hardware.{k} must be text, got {hw[k]!r}")
        if not hw.get("gpu"):
            raise TrainplanError("GPU not identified")
        if hw["num_gpus"] % min(hw["gpus_per_node"], hw["num_gpus"]):
            raise TrainplanError(f"{hw['num_gpus']} GPUs do not fill nodes of {hw['gpus_per_node']}")
        node = _node(hw, assumed)
        m = check_spec(model_spec(r["model"], t["seq_len"], assumed), "model")
        layout = _with_stack(r, _record_defaults(r, _layout(t, m, assumed), assumed), assumed)
        job = Job(m, Cluster(node, hw["num_gpus"] // node.gpus_per_node),
                  Workload(seq_len=t["seq_len"], global_batch=t["global_batch"]))
        check_layout(job, layout)
    except TrainplanError as e:
        return Case(rid, r, None, None, fw, tuple(assumed), str(e))
    except (KeyError, TypeError, AttributeError, ValueError, ArithmeticError) as e:
        # A field of the wrong shape (a number where an object belongs, text where a number does):
        # the record is skipped with what was found, like every record trainplan cannot represent.
        return Case(rid, r, None, None, fw, tuple(assumed), f"missing or malformed field ({type(e).__name__}: {e})")
    return Case(rid, r, job, layout, fw, tuple(assumed), None)
