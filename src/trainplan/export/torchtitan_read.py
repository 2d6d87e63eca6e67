"""A torchtitan 0.3.0 config function, as pyconfig.read parsed it, in trainplan's terms.

Every keyword is either one trainplan costs ([fields] of torchtitan.toml) or one it declares
uncosted ([not_costed]); any other is a one-line error naming it. A costed key the file leaves out
takes torchtitan's own default ([defaults]), and the Imported notes say so.
"""

from __future__ import annotations

from trainplan.errors import TrainplanError
from trainplan.export import Imported
from trainplan.export.pyconfig import Call
from trainplan.export.torchtitan import STACK, _tt_stage_sizes, data
from trainplan.layout import Layout
from trainplan.models.stages import Uneven, check_split, pipeline_chunks
from trainplan.stacks import stack

# Trainer.Config key -> the config calls it may hold (None: the key may be None).
_SECTIONS = {
    "model_spec": ("model_registry",), "training": ("TrainingConfig",), "parallelism": ("ParallelismConfig",),
    "compile": ("CompileConfig",), "debug": ("DebugConfig",), "checkpoint": ("CheckpointManager.Config",),
    "dataloader": ("HuggingFaceTextDataLoader.Config",), "optimizer": ("default_adamw",),
    "lr_scheduler": ("LRSchedulersContainer.Config",),
    "loss": ("CrossEntropyLoss.Config", "ChunkedLossWrapper.Config"),
    "activation_checkpoint": ("SelectiveAC.Config", "FullAC.Config", None),
}
_AC = {None: "none", "SelectiveAC.Config": "selective", "FullAC.Config": "full"}


def _keys(c: Call, where: str) -> dict:
    """c's keywords, each one torchtitan.toml names for c's class."""
    known = set(data()["fields"].get(c.func, {})) | set(data()["not_costed"].get(c.func, ()))
    for k in c.kwargs:
        if k not in known:
            raise TrainplanError(f"{where}:{c.line}: {c.func} key {k!r} is not one trainplan reads; known: "
                                 f"{', '.join(sorted(known)) or 'none'}")
    return c.kwargs


def _section(config: dict, key: str, where: str, line: int):
    v = config.get(key, "absent")
    allowed = _SECTIONS[key]
    if v == "absent" or (v is None and None in allowed) or (isinstance(v, Call) and v.func in allowed):
        return v
    got = v.func if isinstance(v, Call) else repr(v)
    raise TrainplanError(f"{where}:{getattr(v, 'line', line)}: {key} is {got}; trainplan reads "
                         f"{', '.join(str(a) for a in allowed)}")


def _with_defaults(c, cls: str, where: str) -> tuple[dict, list[str]]:
    """The keys of section call `c` (or its absence) over torchtitan's defaults, and the costed
    ones left to those defaults."""
    given = _keys(c, where) if isinstance(c, Call) else {}
    defaults = data()["defaults"].get(cls, {})
    return {**defaults, **given}, [f"{cls}.{k}" for k in defaults if k not in given]


def imported(imports: dict, body: Call, where: str) -> Imported:
    if body.func != "Trainer.Config":
        raise TrainplanError(f"{where}:{body.line}: the config function returns {body.func}; expected Trainer.Config")
    config = {k: v for k, v in _keys(body, where).items() if k in _SECTIONS}
    sec = {k: _section(config, k, where, body.line) for k in _SECTIONS}
    notes: list[str] = []
    model, precision = _model(imports, sec["model_spec"], where)
    tr, unstated = _with_defaults(sec["training"], "TrainingConfig", where)
    par, more = _with_defaults(sec["parallelism"], "ParallelismConfig", where)
    comp, _ = _with_defaults(sec["compile"], "CompileConfig", where)
    if precision is None:
        precision = next(n for n, r in data()["precision"].items()
                         if r.get("dtype") == tr["dtype"] and "converter" not in r)
        if tr["mixed_precision_param"] != "bfloat16" and tr["dtype"] == "float32":
            raise TrainplanError(f"{where}: training.mixed_precision_param {tr['mixed_precision_param']!r} trains "
                                 "in fp32, which trainplan does not cost; use bfloat16")
    for key, bad, what in (("enable_cpu_offload", True, "FSDP CPU offload"),):
        if tr[key] == bad:
            raise TrainplanError(f"{where}: training.{key} = {bad}: trainplan does not cost {what}")
    if par["fsdp_reshard_after_forward"] != "default":
        raise TrainplanError(f"{where}: parallelism.fsdp_reshard_after_forward "
                             f"{par['fsdp_reshard_after_forward']!r}: trainplan costs torchtitan's 'default'")
    degrees = {k: par[f"{k}"] for k in ("data_parallel_replicate_degree", "data_parallel_shard_degree",
                                        "tensor_parallel_degree", "pipeline_parallel_degree",
                                        "context_parallel_degree", "expert_parallel_degree")}
    for k, v in degrees.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise TrainplanError(f"{where}: parallelism.{k} = {v!r}; trainplan needs a positive integer "
                                 "(-1, the GPUs left over, depends on the world size the file does not state)")
    rep, shard = degrees["data_parallel_replicate_degree"], degrees["data_parallel_shard_degree"]
    tp, pp = degrees["tensor_parallel_degree"], degrees["pipeline_parallel_degree"]
    cp, ep = degrees["context_parallel_degree"], degrees["expert_parallel_degree"]
    schedule, vp, uneven = _pipeline(par, model, pp, where)
    unstated += [k for k in more if pp > 1 or not k.startswith("ParallelismConfig.pipeline_parallel_")
                 or k.endswith("_degree")]
    if unstated:  # what the file leaves to torchtitan's defaults, among the keys that matter here
        notes.append(f"torchtitan {data()['release']['version']} defaults for {', '.join(unstated)}")
    local, dp = tr["local_batch_size"], rep * shard
    mb = par["pipeline_parallel_microbatch_size"] if pp > 1 else local
    gb = tr["global_batch_size"] if tr["global_batch_size"] != -1 else local * dp
    if local % mb or gb % (local * dp):
        raise TrainplanError(f"{where}: global_batch_size {gb} is not a multiple of local_batch_size {local} x dp "
                             f"{dp} (with pipeline micro-batches of {mb})")
    if pp > 1 and gb > local * dp:
        notes.append(f"pp with {gb // (local * dp)} pipeline steps per optimizer step: costed as one schedule of "
                     f"{gb // (mb * dp)} micro-batches")
    ac = sec["activation_checkpoint"]
    if ac == "absent":
        notes.append("activation_checkpoint not stated: torchtitan's default SelectiveAC")
        ac = Call("SelectiveAC.Config")
    if isinstance(ac, Call):
        _keys(ac, where)
    loss = sec["loss"]
    chunked = isinstance(loss, Call) and loss.func == "ChunkedLossWrapper.Config"
    if isinstance(loss, Call):
        _keys(loss, where)
    for k in ("debug", "checkpoint", "dataloader", "optimizer", "lr_scheduler"):
        if isinstance(sec[k], Call):
            _keys(sec[k], where)
    compiled = set(comp["components"]) if comp["enable"] else set()
    execution = stack(STACK).execution.with_(cuda_graphs=not tr["disable_cuda_graphs"],
                                             tp_comm_overlap=comp["enable_async_tensor_parallel"])
    layout = Layout(precision=precision, ac=_AC[ac.func if isinstance(ac, Call) else None], micro_batch=mb,
                    grad_accum=gb // (mb * dp), dp_replicate=rep, dp_shard=shard,
                    sharding="fsdp", tp=tp,  # 0.3.0 always applies FSDP2 (refusal's sharding rule)
                    sequence_parallel=par["enable_sequence_parallel"], pp=pp, pp_schedule=schedule, vp=vp,
                    pp_embedding_in_split=uneven.embedding, pp_loss_in_split=uneven.loss, cp=cp, ep=ep,
                    chunked_loss=chunked, torch_compile="model" in compiled, compiled_loss="loss" in compiled,
                    stack=STACK, execution=execution)
    return Imported(model=model.name, layout=layout, seq_len=tr["seq_len"], global_batch=gb, notes=tuple(notes))


def _model(imports: dict, spec, where: str):
    """(catalog ModelSpec, precision or None) of the model_registry call."""
    from trainplan.models import resolve

    if not isinstance(spec, Call) or not spec.args or not isinstance(spec.args[0], str):
        raise TrainplanError(f"{where}: Trainer.Config needs model_spec=model_registry(FLAVOR) to name the model")
    module, flavor = imports.get("model_registry"), spec.args[0]
    _keys(spec, where)
    names = [n for n, m in data()["models"].items() if m["module"] == module and m["flavor"] == flavor]
    if not names:
        known = ", ".join(f"{m['module'].rsplit('.', 1)[1]} {m['flavor']}" for m in data()["models"].values())
        raise TrainplanError(f"{where}:{spec.line}: model_registry({flavor!r}) of {module} is no catalog model "
                             f"trainplan knows; known: {known}")
    converters = spec.kwargs.get("converters") or []
    if len(converters) > 1 or any(not isinstance(c, Call) for c in converters):
        raise TrainplanError(f"{where}:{spec.line}: trainplan costs one precision converter, got {len(converters)}")
    precision = None
    for c in converters:
        _keys(c, where)
        found = [n for n, r in data()["precision"].items() if r.get("converter") == c.func
                 and r.get("recipe_name") == c.kwargs.get("recipe_name", r.get("recipe_name"))]
        if not found:
            raise TrainplanError(f"{where}:{c.line}: converter {c.func} {c.kwargs.get('recipe_name', '')} is not a "
                                 f"recipe trainplan costs")
        precision = found[0]
    return resolve(names[0]), precision


def _pipeline(par: dict, model, pp: int, where: str) -> tuple[str, int, Uneven]:
    """(trainplan schedule, vp, split rule) of the pipeline keys."""
    if pp == 1:
        return "1f1b", 1, Uneven()
    name = str(par["pipeline_parallel_schedule"]).lower()
    found = [k for k, s in data()["schedules"].items() if s["name"].lower() == name]
    if not found:
        known = ", ".join(s["name"] for s in data()["schedules"].values())
        raise TrainplanError(f"{where}: pipeline_parallel_schedule {par['pipeline_parallel_schedule']!r} is not one "
                             f"trainplan costs; known: {known}")
    first, last = par["pipeline_parallel_first_stage_less_layers"], par["pipeline_parallel_last_stage_less_layers"]
    lps = par.get("pipeline_parallel_layers_per_stage")
    single = data()["schedules"][found[0]]["single"]
    stages = -(-(model.num_layers + first + last) // lps) if lps else pp * (1 if single else 2)
    vp = stages // pp
    sizes = _tt_stage_sizes(stages, model.num_layers, first, last)
    for uneven in (Uneven(), Uneven(embedding=True, loss=True)):
        try:
            check_split(model.num_layers, pp, max(vp, 1), uneven)
        except TrainplanError:
            continue
        want = [len(c) for c in pipeline_chunks(model.num_layers, pp, vp, uneven)]
        if stages % pp == 0 and sizes == want:
            return found[0], vp, uneven
    raise TrainplanError(f"{where}: torchtitan splits the {model.num_layers} layers into {sizes or 'no valid'} "
                         f"stages (first/last_stage_less_layers {first}/{last}), which is not a split trainplan "
                         "costs; use 0/0 (even) or 1/1 where they divide")
