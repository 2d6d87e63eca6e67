"""Read a Megatron-LM configuration back as trainplan's job, layout and settings (export.Imported).

Two forms:
  - an argument list: `--flag value` tokens, one per line or a launch script (backslash
    continuations, comments; the tokens after `pretrain_*.py` are Megatron's, torchrun's
    --nnodes / --nproc-per-node before it give the world); megatron_args.txt's `# trainplan:`
    header gives the cluster it was exported for;
  - the block a Megatron run prints between `---- arguments ----` and `---- end of arguments ----`
    (`  dest ........ value`, every argument Megatron has, world_size among them).

Flags and dests are megatron.toml's; in an argument list an unknown flag is a one-line error naming it.
A printed block lists all of Megatron's ~700 arguments: those megatron.toml does not name are not read
(Imported.notes says how many). The model is the catalog model whose exported arguments
(megatron.model_args) equal the ones read; none matching is an error.
"""

from __future__ import annotations

import ast
import re
import shlex

from trainplan.errors import TrainplanError
from trainplan.export import Imported
from trainplan.export.megatron import HEADER, STACK, default, model_args, names, padded_vocab

_BLOCK_START = re.compile(r"^-+ arguments -+\s*$", re.MULTILINE)
_BLOCK_LINE = re.compile(r"^\s*(\w+) \.* (.*)$")  # _print_args: 48 - len(dest) dots, none past 48
_MODEL_DESTS_EXTRA = ("rotary_base", "max_position_embeddings", "tokenizer_type", "vocab_size",
                      "make_vocab_size_divisible_by")


def read(text: str, where: str) -> Imported:
    if _BLOCK_START.search(text):
        values, world, notes = _printed_block(text, where)
        cluster = {}
    else:
        values, world, cluster = _argument_list(text, where)
        notes = ()
    return _imported(values, world, cluster, notes, where)


# ---- the two forms -----------------------------------------------------------------------------

def _printed_block(text: str, where: str) -> tuple[dict, int | None, tuple[str, ...]]:
    body = text[_BLOCK_START.search(text).end():]
    end = re.search(r"^-+ end of arguments -+\s*$", body, re.MULTILINE)
    if end is None:
        raise TrainplanError(f"{where}: the printed arguments block has no '---- end of arguments ----' line")
    known, values, world, skipped = names()["args"], {}, None, 0
    for n, line in enumerate(body[:end.start()].splitlines(), 1):
        if not line.strip():
            continue
        m = _BLOCK_LINE.match(line)
        if not m:
            raise TrainplanError(f"{where}: cannot read line {n} of the arguments block: {line.strip()!r}")
        dest, raw = m.group(1), m.group(2).strip()
        if dest == "world_size":
            world = _int(raw, dest, where)
        elif dest in known:
            values[dest] = _literal(raw)
        else:
            skipped += 1
    return values, world, (f"{skipped} printed arguments trainplan does not price were not read",)


def _argument_list(text: str, where: str) -> tuple[dict, int | None, dict]:
    cluster = {}
    kept = []
    for line in text.splitlines():
        s = line.strip()
        if s.startswith(HEADER):
            cluster = dict(kv.split("=", 1) for kv in s[len(HEADER):].split() if "=" in kv)
        elif s and not s.startswith("#"):
            kept.append(line)
    try:
        tokens = shlex.split("\n".join(kept).replace("\\\n", " "), comments=True)
    except ValueError as e:
        raise TrainplanError(f"{where}: cannot split the arguments ({e})") from None
    script = next((i for i, t in enumerate(tokens) if re.search(r"pretrain_\w+\.py$", t)), None)
    world = None
    if script is not None:
        launcher = _flags(tokens[:script], {"--nnodes", "--nproc-per-node", "--nproc_per_node"})
        nodes, per_node = launcher.get("--nnodes"), launcher.get("--nproc-per-node", launcher.get("--nproc_per_node"))
        if nodes and per_node:
            world = _int(nodes, "--nnodes", where) * _int(per_node, "--nproc-per-node", where)
            cluster.setdefault("nodes", nodes)
            cluster.setdefault("gpus_per_node", per_node)
        tokens = tokens[script + 1:]
    if world is None and {"nodes", "gpus_per_node"} <= cluster.keys():
        world = _int(cluster["nodes"], "nodes", where) * _int(cluster["gpus_per_node"], "gpus_per_node", where)
    return _parse_flags(tokens, where), world, cluster


def _flags(tokens: list[str], wanted: set[str]) -> dict:
    """torchrun's own flags among `tokens` (`--flag value` or `--flag=value`)."""
    out = {}
    for i, t in enumerate(tokens):
        key, eq, val = t.partition("=")
        if key in wanted:
            out[key] = val if eq else (tokens[i + 1] if i + 1 < len(tokens) else "")
    return out


def _parse_flags(tokens: list[str], where: str) -> dict:
    by_flag = {a["flag"]: (dest, a) for dest, a in names()["args"].items()}
    for tok in tokens:
        if "$" in tok:
            raise TrainplanError(f"{where}: {tok!r} is a shell variable; expand it (write the value) before reading")
    values, i = {}, 0
    while i < len(tokens):
        tok = tokens[i]
        if tok not in by_flag:
            what = "value without a flag" if not tok.startswith("--") else "unknown or unsupported Megatron-LM argument"
            raise TrainplanError(f"{where}: {what} {tok!r} (megatron.toml lists the {len(by_flag)} arguments "
                                 "trainplan reads)")
        dest, a = by_flag[tok]
        j = i + 1
        while j < len(tokens) and not tokens[j].startswith("--"):
            j += 1
        given = tokens[i + 1:j]
        if a["kind"] in ("true", "false"):
            if given:
                raise TrainplanError(f"{where}: {tok} takes no value, got {given[0]!r}")
            values[dest] = a["kind"] == "true"
        elif a["kind"] == "list":
            values[dest] = [_literal(v) for v in given]
        elif len(given) != 1:
            raise TrainplanError(f"{where}: {tok} takes one value, got {len(given)}")
        else:
            values[dest] = _literal(given[0])
        i = j
    return values


def _literal(raw: str):
    """A value as Megatron prints or parses it: numbers, True / False / None, lists; else the text."""
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return raw


def _int(raw, name: str, where: str) -> int:
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise TrainplanError(f"{where}: {name} must be an integer, got {raw!r}") from None


# ---- values -> trainplan -----------------------------------------------------------------------

def _imported(values: dict, world: int | None, cluster: dict, notes: tuple, where: str,
              stack_name: str = STACK) -> Imported:
    """`values` by dest (megatron.toml) as an Imported for the stacks.toml entry `stack_name` (the nemo
    reader maps NeMo 2's fields to these dests, export/nemo.py)."""
    from trainplan.layout import Layout
    from trainplan.stacks import stack

    def get(dest):
        return values.get(dest, default(dest))

    for need in ("num_layers", "hidden_size", "num_attention_heads", "seq_length", "micro_batch_size",
                 "global_batch_size"):
        if get(need) is None:
            raise TrainplanError(f"{where}: {names()['args'][need]['flag']} is not given")
    if world is None:
        raise TrainplanError(f"{where}: the world size is not stated; give the launch script (torchrun --nnodes / "
                             f"--nproc-per-node), the printed arguments block, or the exported file's {HEADER!r} line")
    tp, pp, cp = get("tensor_model_parallel_size"), get("pipeline_model_parallel_size"), get("context_parallel_size")
    if world % (tp * pp * cp):
        raise TrainplanError(f"{where}: world size {world} is not a multiple of tp*pp*cp = {tp * pp * cp}")
    dp = world // (tp * pp * cp)
    model = _model(values, get, tp, where)
    precision = _precision(get, where)
    sharding, replicate = _sharding(get, dp, where)
    mb, gb = get("micro_batch_size"), get("global_batch_size")
    if gb % (mb * dp):
        raise TrainplanError(f"{where}: --global-batch-size {gb} is not a multiple of micro-batch x dp = {mb * dp}")
    vp = get("num_virtual_stages_per_pipeline_rank") or 1
    ac, ac_layers = _recompute(get, vp, where)
    spec = names()["precision"][precision]
    fields = {
        "precision": precision, "ac": ac, "ac_layers": ac_layers, "micro_batch": mb, "grad_accum": gb // (mb * dp),
        "dp_replicate": replicate, "dp_shard": dp // replicate, "sharding": sharding, "tp": tp,
        "sequence_parallel": tp == 1 or get("sequence_parallel"), "pp": pp, "vp": vp,
        "pp_schedule": "interleaved" if vp > 1 else "1f1b",
        "pp_first_stage_layers": get("decoder_first_pipeline_num_layers") or 0,
        "pp_last_stage_layers": get("decoder_last_pipeline_num_layers") or 0,
        "pp_embedding_in_split": get("account_for_embedding_in_pipeline_split"),
        "pp_loss_in_split": get("account_for_loss_in_pipeline_split"), "cp": cp,
        "ep": get("expert_model_parallel_size"), "fp8_allgather": bool(get(spec.get("param_gather", "fp8_param_gather"))),
        "optimizer_offload": get("optimizer_cpu_offload"),
        # stated only where it differs from the stack's convention (None: the stack's)
        "grad_reduce_fp32": None if (not get("grad_reduce_in_bf16")) == stack(stack_name).conventions.grad_reduce_fp32
        else not get("grad_reduce_in_bf16"),
        "stack": stack_name, "execution": _execution(get, stack(stack_name).execution, cp, where)}
    # etp as stated (Megatron's default when absent is tp: stacks.toml megatron.conventions expert_tp)
    layout = Layout(**fields, etp=get("expert_tensor_parallel_size"))
    return Imported(model=model, layout=layout, seq_len=get("seq_length"), global_batch=gb,
                    nodes=int(cluster["nodes"]) if "nodes" in cluster else None, instance=cluster.get("instance"),
                    notes=notes)


def _model(values: dict, get, tp: int, where: str) -> str:
    """The catalog model whose exported architecture arguments are the ones read."""
    from trainplan.models import catalog

    if get("tokenizer_type") != "NullTokenizer" or get("vocab_size") is None:
        raise TrainplanError(f"{where}: trainplan reads the vocabulary from --tokenizer-type NullTokenizer --vocab-size N "
                             f"(got tokenizer {get('tokenizer_type')!r})")
    vocab = padded_vocab(get("vocab_size"), get("make_vocab_size_divisible_by"), tp)
    for name, m in catalog().items():
        try:
            want = model_args(m)
        except TrainplanError:
            continue  # a model Megatron cannot express is no answer
        shown = set(want) | {d for d in values if d in _model_dests()}
        if m.vocab_size == vocab and all(_one(get(d)) == _one(want.get(d, default(d))) for d in shown):
            return name
    raise TrainplanError(f"{where}: no catalog model has these dimensions (--num-layers {get('num_layers')}, --hidden-size "
                         f"{get('hidden_size')}, {vocab} vocabulary rows); see `trainplan models`")


def _one(v):
    """A one-element list as its element: validate_args prints --moe-aux-loss-coeff 0.001 as 0.001."""
    return v[0] if isinstance(v, list) and len(v) == 1 else v


def _model_dests() -> set[str]:
    """Every dest model_args can write (the union over the catalog), without the vocabulary."""
    from trainplan.models import catalog

    out = set()
    for m in catalog().values():
        try:
            out |= set(model_args(m))
        except TrainplanError:
            pass
    return out


def _precision(get, where: str) -> str:
    for name, spec in names()["precision"].items():
        if all(get(d) == v for d, v in spec["args"].items()) and all(
                get(d) in (None, default(d)) for d in ("fp8", "fp4") if d not in spec["args"]):
            if "amax_history" in spec:
                from trainplan.precision import recipe

                want = recipe(name).low_precision.amax_history
                if get(spec["amax_history"]) != want:
                    raise TrainplanError(f"{where}: --fp8-amax-history-len {get(spec['amax_history'])}: trainplan's "
                                         f"{name} keeps {want} amax values per tensor")
            return name
    raise TrainplanError(f"{where}: no trainplan recipe runs --bf16 {get('bf16')} --fp16 {get('fp16')} --fp8-format "
                         f"{get('fp8')} --fp8-recipe {get('fp8_recipe')} --fp4-format {get('fp4')}")


def _sharding(get, dp: int, where: str) -> tuple[str, int]:
    if get("use_megatron_fsdp"):
        if get("data_parallel_sharding_strategy") != "optim_grads_params":
            raise TrainplanError(f"{where}: --data-parallel-sharding-strategy {get('data_parallel_sharding_strategy')}: "
                                 "trainplan reads Megatron-FSDP's optim_grads_params only")
        return "fsdp", 1
    if get("use_distributed_optimizer"):
        inst = get("num_distributed_optimizer_instances")
        if dp % inst:
            raise TrainplanError(f"{where}: --num-distributed-optimizer-instances {inst} does not divide dp = {dp}")
        return "zero1", inst
    return "none", dp


def _recompute(get, vp: int, where: str) -> tuple[str, int]:
    gran, method, n = get("recompute_granularity"), get("recompute_method"), get("recompute_num_layers")
    if gran is None:
        return "none", 0
    if gran == "selective":
        return "selective", 0
    if method == "uniform" and n == 1:
        return "full", 0
    if method == "block" and n:
        return "partial", n * vp
    raise TrainplanError(f"{where}: --recompute-granularity full --recompute-method {method} --recompute-num-layers {n}: "
                         "trainplan reads uniform with 1 layer (full) or block with N layers (partial)")


def _execution(get, preset, cp: int, where: str):
    from trainplan.stacks import SETTINGS

    t = names()
    dispatch = {tuple(v.items()): k for k, v in t["moe_dispatcher"].items()}
    key = [("moe_token_dispatcher_type", get("moe_token_dispatcher_type"))]
    if get("moe_token_dispatcher_type") == "flex":
        key.append(("moe_flex_dispatcher_backend", get("moe_flex_dispatcher_backend")))
    if tuple(key) not in dispatch:
        raise TrainplanError(f"{where}: MoE dispatcher {dict(key)} has no trainplan setting")
    graphs = {v["cuda_graph_impl"]: k == "true" for k, v in t["cuda_graphs"].items()}
    if get("cuda_graph_impl") not in graphs:
        raise TrainplanError(f"{where}: --cuda-graph-impl {get('cuda_graph_impl')}: trainplan prices "
                             f"{', '.join(graphs)}")
    cp_comm = get("cp_comm_type")
    cp_comm = [cp_comm] if isinstance(cp_comm, str) else cp_comm  # validate_args unwraps one kind
    if len(cp_comm) != 1:
        raise TrainplanError(f"{where}: --cp-comm-type {' '.join(cp_comm)}: trainplan reads one kind for every layer")
    changes = {
        "tp_comm_overlap": get("tp_comm_overlap"), "grad_reduce_overlap": get("overlap_grad_reduce"),
        "param_gather_overlap": get("overlap_param_gather"), "pp_p2p_overlap": get("overlap_p2p_comm"),
        "moe_dispatcher": dispatch[tuple(key)], "ep_comm_overlap": get("overlap_moe_expert_parallel_comm"),
        "moe_capacity_factor": get("moe_expert_capacity_factor"), "moe_pad_to_capacity": get("moe_pad_expert_input_to_capacity"),
        "cross_entropy": "fused" if get("cross_entropy_loss_fusion") else "plain",
        "cuda_graphs": graphs[get("cuda_graph_impl")]}
    if cp > 1:
        changes["cp_comm"] = cp_comm[0]
    if get("moe_expert_capacity_factor") is not None:
        changes["moe_capacity_factor"] = float(changes["moe_capacity_factor"])
    assert set(changes) <= set(SETTINGS)
    return preset.with_(**changes)
