"""SageMaker HyperPod recipes (aws/sagemaker-hyperpod-recipes v1.5.1): a costed plan as the NeMo-based
training recipe YAML, and such a YAML read back.

The HyperPod recipe of a NeMo Megatron-Core GPT (recipes_collection/recipes/training/llama/
megatron_llama3_1_8b_nemo.yaml at v1.5.1, hyperpod.toml's header) is NeMo 1's megatron_gpt config:
`trainer:` (nodes, devices, precision, steps), `exp_manager:` (checkpoints) and `model:` (dimensions,
tensor / pipeline / virtual / context / expert parallel sizes, sequence_parallel,
activations_checkpoint_*, fp8, micro / global batch, sequence length, optim). Underneath it is the
same Megatron-Core as NeMo 2, costed by the stack nemo: the values are built by the nemo exporter's
functions and written under hyperpod.toml's keys; a value with no key is refused (`refusal`).
PyYAML (the `yaml` extra) is imported only to write or read a file.
"""

from __future__ import annotations

import functools
from pathlib import Path

from trainplan.errors import TrainplanError
from trainplan.export import megatron as mg
from trainplan.export import nemo
from trainplan.parsing import read_toml


@functools.cache
def data() -> dict:
    return read_toml(Path(__file__).with_name("hyperpod.toml"))


FRAMEWORK = data()["framework"]
STACK = data()["stack"]
RELEASE = data()["release"]
_HP = f"HyperPod recipes {RELEASE}"


def _yaml():
    try:
        import yaml
    except ImportError:
        raise TrainplanError("the HyperPod recipe is YAML: pip install 'trainplan[yaml]' (PyYAML)") from None
    return yaml


def refusal(job, L) -> str | None:
    """What the HyperPod NeMo recipe cannot run as trainplan costed `L` for `job` (one line), or None."""
    return nemo.refusal(job, L, data(), _HP)


def export(plan) -> dict[str, str]:
    """{'trainplan_hyperpod.yaml': the recipe} for exactly what `plan` costed."""
    t, job, c = data(), plan.job, plan.job.cluster
    why = refusal(job, plan.layout)
    if why:
        raise TrainplanError(f"{FRAMEWORK} export: {why}")
    try:
        v = nemo._values(job, plan.layout)
        if (theta := mg.rope_base(plan)) is not None:
            v["rotary_base"] = int(theta) if float(theta).is_integer() else theta
        v["max_position_embeddings"] = max(job.model.max_position_embeddings, job.workload.seq_len)
        v |= mg.train_args(plan)
    except TrainplanError as e:
        raise TrainplanError(f"{FRAMEWORK} export: {nemo._one_line(e)}") from None
    if plan.train.data:
        raise TrainplanError(f"{FRAMEWORK} export: train.data: exported with mock data; set model.data.data_prefix yourself")
    why = nemo._unmapped(v, t, _HP)
    if why:
        raise TrainplanError(f"{FRAMEWORK} export: {why}")
    v = nemo.with_always(v, t)
    paths = {p: f["value"] for p, f in t["fixed"].items()}
    paths |= {"trainer.num_nodes": c.nodes, "trainer.devices": c.node.gpus_per_node}
    paths |= nemo.fields(v, t)
    paths["model.override_vocab_size"] = job.model.vocab_size
    paths["model.make_vocab_size_divisible_by"] = v["make_vocab_size_divisible_by"]
    paths["model.optim.betas"] = [v["adam_beta1"], v["adam_beta2"]]
    tree: dict = {}
    for path, value in paths.items():
        *parents, leaf = path.split(".")
        node = tree
        for k in parents:
            node = node.setdefault(k, {})
        node[leaf] = value
    head = (f"# SageMaker HyperPod recipe ({_HP}, NeMo Megatron-Core GPT) exported by trainplan: {job.model.name} "
            f"on {c.nodes} x {c.node.name}\n# layout: {plan.layout.short()}\n"
            f"{nemo.HEADER} instance={c.node.name} nodes={c.nodes} gpus_per_node={c.node.gpus_per_node} "
            f"hyperpod-recipes={RELEASE}\n")
    return {t["file"]: head + _yaml().safe_dump(tree, sort_keys=False)}


def _flatten(d, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        path = f"{prefix}{k}"
        if isinstance(v, dict):
            out |= _flatten(v, path + ".")
        else:
            out[path] = v
    return out


def read(text: str, where: str):
    """The model, layout, sequence and batch a HyperPod NeMo recipe YAML describes."""
    yaml, t = _yaml(), data()
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise TrainplanError(f"{where}: not YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(doc, dict):
        raise TrainplanError(f"{where}: expected a recipe mapping (trainer:, exp_manager:, model:)")
    cluster = {}
    for line in text.splitlines():
        if line.strip().startswith(nemo.HEADER):
            cluster = dict(kv.split("=", 1) for kv in line.strip()[len(nemo.HEADER):].split() if "=" in kv)
    paths = _flatten(doc)
    known = nemo._known_paths(t) | set(t["fixed"]) | {"trainer.num_nodes", "trainer.devices", "model.override_vocab_size",
                                                      "model.make_vocab_size_divisible_by", "model.optim.betas"}
    skipped = []
    for p in list(paths):
        if p in known:
            continue
        if _unpriced(p, t):
            skipped.append(p)
            del paths[p]
            continue
        raise TrainplanError(f"{where}: unknown or unsupported HyperPod recipe key {p!r} (hyperpod.toml lists the "
                             f"{len(known)} keys trainplan reads and {len(t['unpriced'])} it reads past)")
    notes = (f"{len(skipped)} recipe keys trainplan does not price were not read (hyperpod.toml [unpriced])",) \
        if skipped else ()
    for p, f in t["fixed"].items():
        if p in paths and not f.get("free") and paths[p] != f["value"]:
            raise TrainplanError(f"{where}: {p}: {paths[p]!r}; trainplan reads {f['value']!r} ({f['source']})")
    nodes, devices = paths.get("trainer.num_nodes"), paths.get("trainer.devices")
    if not nodes or not devices:
        raise TrainplanError(f"{where}: trainer.num_nodes and trainer.devices must be given")
    values = nemo.dests(paths, t, where)
    if "model.optim.betas" in paths:
        values["adam_beta1"], values["adam_beta2"] = paths["model.optim.betas"]
    override, div = paths.get("model.override_vocab_size"), paths.get("model.make_vocab_size_divisible_by", 128)
    tp = values.get("tensor_model_parallel_size", 1)
    vocab = None if override is None else mg.padded_vocab(override - 1, div, tp)
    if vocab is not None and vocab != override:
        raise TrainplanError(f"{where}: model.override_vocab_size {override} pads to {vocab} rows with "
                             f"make_vocab_size_divisible_by {div} x tp {tp}; trainplan reads an unpadded vocabulary")
    return nemo.imported_from(values, vocab, nodes * devices, {**cluster, "nodes": str(nodes)}, where, STACK, notes)


def _unpriced(path: str, t: dict) -> bool:
    return any(path == k or (k.endswith("*") and path.startswith(k[:-1])) for k in t["unpriced"])

