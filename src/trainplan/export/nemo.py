"""NeMo 2 (nemo_toolkit 2.7.3): a costed plan as a nemo_run recipe script, and such a script read back.

NeMo 2 configures a pre-training run in Python: `llm.<model>.pretrain_recipe(...)` returns a nemo_run
Partial whose fields a script then sets (`recipe.trainer.strategy.tensor_model_parallel_size = 8`,
`recipe.model.config.recompute_granularity = "full"`, callbacks such as MegatronCommOverlapCallback)
before `run.run(recipe, executor=...)` (NeMo's docs: "NeMo 2.0 recipes"; the recipes' own
performance_optimizations set their fields the same way, nemo/collections/llm/recipes/llama31_405b.py:
222-256). `export` writes `trainplan_recipe.py`: the recipe of the plan's model, then every priced
setting assigned explicitly, so nothing is left to the recipe's defaults. `read` parses a script of
that shape with `ast`, never running it; an unknown field is a one-line error naming it.

NeMo 2 runs Megatron-Core: its model config is Megatron-Core's TransformerConfig, its strategy and
plugins take Megatron-Core's parallel and precision settings. So the values are built once, by the
megatron exporter's functions (export/megatron.py, for the stack `nemo`'s costs), and nemo.toml gives
each Megatron-Core value its NeMo field; a value with no NeMo field is refused (`refusal`, the one
home of what NeMo cannot run as costed). The reader maps the fields back to the same values and reads
them as export/megatron_read.py does, for the stack `nemo`.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from trainplan.errors import TrainplanError
from trainplan.export import megatron as mg
from trainplan.parsing import read_toml

HEADER = "# trainplan:"  # the script's cluster line (instance, nodes, GPUs per node)


@functools.cache
def data() -> dict:
    return read_toml(Path(__file__).with_name("nemo.toml"))


FRAMEWORK = data()["framework"]  # as --to spells it
STACK = data()["stack"]  # the stacks.toml entry whose costs it exports
RELEASE = data()["release"]
_NEMO = f"NeMo {RELEASE}"


def _one_line(e: TrainplanError) -> str:
    """A megatron exporter refusal, without its `megatron export: ` prefix (the setting comes first)."""
    return str(e).removeprefix("megatron export: ")


# ---- what NeMo cannot run as costed -----------------------------------------------------------

def _values(job, L) -> dict:
    """Megatron-Core's values (by megatron.toml dest) for `job` run as `L` on the stack nemo, before the
    training schedule; raises the megatron exporter's one-line refusals."""
    m = job.model
    return mg.model_args(m) | mg.vocab_args(m.vocab_size, L.tp) | mg.layout_args(job, L, STACK)


def refusal(job, L, table: dict | None = None, name: str | None = None) -> str | None:
    """What NeMo 2.7.3 cannot run as trainplan costed `L` for `job` (one line naming the setting and
    what to change), or None. `table`/`name`: another NeMo-based format's fields (export/hyperpod.py)."""
    t, who = table or data(), name or _NEMO
    if job.model.name not in t["models"]:
        return (f"model {job.model.name}: {who} has no recipe building it; known: {', '.join(t['models'])}")
    try:
        values = _values(job, L)
    except TrainplanError as e:
        return _one_line(e)
    return _unmapped(values, t, who)


def _unmapped(values: dict, t: dict, who: str) -> str | None:
    for dest, v in values.items():
        if dest not in t["fields"] and dest not in t["implied"] and v != mg.default(dest):
            if dest in t.get("refused", {}):
                return t["refused"][dest]
            flag = mg.names()["args"][dest]["flag"]
            return f"{dest}: Megatron-Core's {flag} {v} has no {who} field trainplan writes"
    return None


# ---- export --------------------------------------------------------------------------------------

def launch_values(plan) -> dict:
    """Every Megatron-Core value of the launch, by dest (refusal checked first)."""
    why = refusal(plan.job, plan.layout)
    if why:
        raise TrainplanError(f"{FRAMEWORK} export: {why}")
    try:
        v = _values(plan.job, plan.layout)
        if (theta := mg.rope_base(plan)) is not None:
            v["rotary_base"] = int(theta) if float(theta).is_integer() else theta
        v |= mg.train_args(plan)
    except TrainplanError as e:
        raise TrainplanError(f"{FRAMEWORK} export: {_one_line(e)}") from None
    if plan.train.data:
        raise TrainplanError(f"{FRAMEWORK} export: train.data: the recipe's data is MockDataModule; export "
                             "without --data and set recipe.data to your data module")
    why = _unmapped(v, data(), _NEMO)
    if why:
        raise TrainplanError(f"{FRAMEWORK} export: {why}")
    return with_always(v, data())


def with_always(v: dict, t: dict) -> dict:
    """`v` with every `always` dest of table `t` stated (Megatron-Core's value when absent), so the
    recipe's own setting of it (the distributed optimizer, a recompute) never stands in for the plan's."""
    return v | {d: mg.default(d) for d in t["always"] if d not in v}


def fields(values: dict, t: dict) -> dict:
    """NeMo path -> value for Megatron-Core `values` (dest -> value) through field table `t`."""
    out = {}
    for dest, v in values.items():
        f = t["fields"].get(dest)
        if f is None:
            continue
        if "values" in f:
            key = str(v).lower() if isinstance(v, bool) else str(v)
            if key not in f["values"]:
                if v in (False, None):
                    continue  # bf16 false: the precision is another dest's
                flag = mg.names()["args"][dest]["flag"]
                raise TrainplanError(f"{t['framework']} export: {dest}: Megatron-Core's {flag} {v} has no "
                                     f"value of {f['path']} (known: {', '.join(f['values'])})")
            v = f["values"][key]
        elif f.get("negate"):
            v = not v
        elif f.get("scalar"):
            v = v[0]
        elif f.get("pattern"):
            v = _pattern(v, values["num_layers"])
        for path in [f["path"]] if isinstance(f["path"], str) else f["path"]:
            out[path] = v
    return out


def _pattern(freq, layers: int) -> list[int] | int:
    """Megatron's --moe-layer-freq ('([0]*3+[1]*58)' or 1) as TransformerConfig's 0/1 list (or the int)."""
    if isinstance(freq, int):
        return freq
    out = []
    for run in freq.strip("()").split("+"):
        bit, n = run.split("*")
        out += [int(bit.strip("[]"))] * int(n)
    assert len(out) == layers, (freq, layers)
    return out


def _literal(v) -> str:
    if isinstance(v, float):
        s = f"{v:.10g}"
        return s if any(c in s for c in ".e") else s + ".0"
    return repr(v)


def export(plan) -> dict[str, str]:
    """{'trainplan_recipe.py': the nemo_run script} for exactly what `plan` costed."""
    t = data()
    values = launch_values(plan)
    paths = fields(values, t)
    paths["model.config.vocab_size"] = plan.job.model.vocab_size  # preset rows (nemo.toml [implied])
    c, L, job = plan.job.cluster, plan.layout, plan.job
    module = t["models"][job.model.name]["module"]
    fn = t["function"]
    head = f"    recipe = llm.{module}.pretrain_recipe(name={fn!r}, num_nodes={c.nodes}, num_gpus_per_node={c.node.gpus_per_node})"
    lines = [
        f'"""NeMo {RELEASE} pre-training recipe exported by trainplan: {job.model.name} on {c.nodes} x {c.node.name},',
        f"seq {job.workload.seq_len}, global batch {job.workload.global_batch}.",
        f"Layout costed: {L.short()}",
        "",
        f"Run (pip install {t['package']}; a NeMo {RELEASE} container has both): python {t['file']}",
        '"""',
        f"{HEADER} instance={c.node.name} nodes={c.nodes} gpus_per_node={c.node.gpus_per_node} nemo={RELEASE}",
        *[(f"import {v['module']}" + ("" if n == v["module"] else f" as {n}")) if v.get("plain")
          else f"from {v['module']} import {n}" for n, v in t["imports"].items()],
        "", "",
        f"def {fn}():",
        head,
    ]
    for path, f in t["fixed"].items():
        lines.append(f"    recipe.{path} = {f['value'] if f.get('call') else repr(f['value'])}")
    callback = {}
    for path, v in paths.items():
        if path.startswith("callbacks."):
            callback[path.removeprefix("callbacks.")] = v
        else:
            lines.append(f"    recipe.{path} = {_literal(v)}")
    kw = ", ".join(f"{k}={_literal(v)}" for k, v in callback.items())
    executor = f'run.LocalExecutor(ntasks_per_node={c.node.gpus_per_node}, launcher="torchrun")'
    lines += [f"    recipe.trainer.callbacks.append(run.Config(MegatronCommOverlapCallback, {kw}))",
              "    return recipe", "", "",
              'if __name__ == "__main__":',
              f"    run.run({fn}(), executor={executor})", ""]
    return {t["file"]: "\n".join(lines)}


# ---- read ---------------------------------------------------------------------------------------

def is_recipe(text: str) -> bool:
    """Whether `text` is a NeMo 2 recipe script: Python that imports nemo (export.read_file's sniffing)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return False
    roots = {v["module"].split(".")[0] for v in data()["imports"].values()}  # the packages the script imports
    for node in tree.body:
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] in roots for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in roots:
            return True
    return False


def _path(n: ast.AST, where: str) -> str:
    if isinstance(n, ast.Name):
        return n.id
    if isinstance(n, ast.Attribute):
        return f"{_path(n.value, where)}.{n.attr}"
    raise TrainplanError(f"{where}:{n.lineno}: cannot read {ast.unparse(n)!r}; expected recipe.<field>")


def _value(n: ast.AST, where: str):
    try:
        return ast.literal_eval(n)
    except ValueError:
        raise TrainplanError(f"{where}:{n.lineno}: cannot read {ast.unparse(n)!r}; expected a literal") from None


def parse(text: str, where: str) -> tuple[dict, dict, dict]:
    """(pretrain_recipe's call: module and keywords, path -> value assigned, cluster header) of a script
    as `export` writes it; any other statement is a one-line error with its line."""
    t = data()
    try:
        tree = ast.parse(text, filename=where)
    except SyntaxError as e:
        raise TrainplanError(f"{where}:{e.lineno}: not Python ({e.msg})") from None
    cluster = {}
    for line in text.splitlines():
        if line.strip().startswith(HEADER):
            cluster = dict(kv.split("=", 1) for kv in line.strip()[len(HEADER):].split() if "=" in kv)
    fns = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    if len(fns) != 1:
        raise TrainplanError(f"{where}: expected one recipe function, found {len(fns)}")
    call, paths, fixed = None, {}, set(t["fixed"])
    for node in fns[0].body:
        line = f"{where}:{node.lineno}"
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name) and isinstance(node.value, ast.Call):
                func = _path(node.value.func, where)
                parts = func.split(".")
                if len(parts) != 3 or parts[0] != "llm" or parts[2] != "pretrain_recipe":
                    raise TrainplanError(f"{line}: expected recipe = llm.<model>.pretrain_recipe(...), got {func}")
                call = {"module": parts[1], **{k.arg: _value(k.value, where) for k in node.value.keywords}}
                continue
            path = _path(target, where).removeprefix("recipe.")
            if path in fixed:
                continue
            if path not in _known_paths(t):
                raise TrainplanError(f"{line}: unknown or unsupported NeMo recipe field 'recipe.{path}' "
                                     f"(nemo.toml lists the {len(_known_paths(t))} fields trainplan reads)")
            paths[path] = _value(node.value, where)
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and \
                _path(node.value.func, where) == "recipe.trainer.callbacks.append":
            cb = node.value.args[0] if node.value.args else None
            if not (isinstance(cb, ast.Call) and cb.args and _path(cb.args[0], where) == "MegatronCommOverlapCallback"):
                raise TrainplanError(f"{line}: trainplan reads a MegatronCommOverlapCallback callback only, "
                                     f"got {ast.unparse(cb) if cb else 'nothing'}")
            for k in cb.keywords:
                if f"callbacks.{k.arg}" not in _known_paths(t):
                    raise TrainplanError(f"{line}: unknown or unsupported MegatronCommOverlapCallback argument {k.arg!r}")
                paths[f"callbacks.{k.arg}"] = _value(k.value, where)
        elif isinstance(node, ast.Return) or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            continue
        else:
            raise TrainplanError(f"{line}: cannot read this statement; trainplan reads recipe = "
                                 "llm.<model>.pretrain_recipe(...), recipe.<field> = <literal> and the callback")
    if call is None:
        raise TrainplanError(f"{where}: no recipe = llm.<model>.pretrain_recipe(...) line")
    return call, paths, cluster


def _known_paths(t: dict) -> set:
    out = {"model.config.vocab_size"}
    for f in t["fields"].values():
        out |= {f["path"]} if isinstance(f["path"], str) else set(f["path"])
    return out


def dests(paths: dict, t: dict, where: str) -> dict:
    """Megatron-Core values by dest of NeMo `paths` (the inverse of `fields`)."""
    prefix = t.get("path_prefix", "")
    out = {}
    for dest, f in t["fields"].items():
        for path in [f["path"]] if isinstance(f["path"], str) else f["path"]:
            if path not in paths:
                continue
            v = paths[path]
            if "values" in f:
                back = {nv: dv for dv, nv in f["values"].items()}
                if v not in back:
                    known = [x for g in t["fields"].values() if g["path"] == f["path"] for x in g["values"].values()]
                    if v not in known and v not in (False, None):
                        raise TrainplanError(f"{where}: {prefix}{path} = {v!r}: trainplan reads "
                                             f"{', '.join(repr(x) for x in known)}")
                    continue  # another dest's value (bf16 / fp16 share the precision), or off
                v = {"true": True, "false": False}.get(back[v], back[v])
            elif f.get("negate"):
                v = not v
            elif f.get("scalar"):
                v = [v]
            elif f.get("pattern") and isinstance(v, list):
                v = mg._freq_expression("".join(str(b) for b in v))
            if dest in out and out[dest] != v:
                raise TrainplanError(f"{where}: {prefix}{path} = {paths[path]!r} disagrees with another field "
                                     f"of the same setting ({dest})")
            out[dest] = v
    return out


def imported_from(values: dict, vocab: int | None, world: int | None, cluster: dict, where: str, stack: str,
                  notes: tuple = ()):
    """An Imported of Megatron-Core `values` with `vocab` rows preset (export/megatron_read.py's rules)."""
    from trainplan.export.megatron_read import _imported

    if vocab is None:
        raise TrainplanError(f"{where}: the vocabulary is not stated (recipe.model.config.vocab_size)")
    tp = values.get("tensor_model_parallel_size", 1)
    if vocab % tp:
        raise TrainplanError(f"{where}: vocab_size {vocab} does not divide over tensor_model_parallel_size {tp}")
    values = {**values, **mg.vocab_args(vocab, tp)}
    if values.get("kv_channels") is None and values.get("num_attention_heads") and "multi_latent_attention" not in values:
        # null: Megatron-Core's hidden_size / num_attention_heads (TransformerConfig.__post_init__)
        values["kv_channels"] = values["hidden_size"] // values["num_attention_heads"]
    if "num_experts" not in values:  # no MoE layer: the dispatcher is the stack's preset, never run
        from trainplan.stacks import stack as stack_named

        values |= mg.names()["moe_dispatcher"][stack_named(stack).execution.moe_dispatcher]
    if "num_query_groups" in values and "multi_latent_attention" not in values:  # nemo.toml [implied]
        values["group_query_attention"] = values["num_query_groups"] != values.get("num_attention_heads")
    return _imported(values, world, cluster, notes, where, stack)


def read(text: str, where: str):
    """The model, layout, sequence and batch a NeMo 2 recipe script describes (module doc)."""
    t = data()
    call, paths, cluster = parse(text, where)
    if call["module"] not in {m["module"] for m in t["models"].values()}:
        raise TrainplanError(f"{where}: llm.{call['module']}.pretrain_recipe is not a recipe trainplan reads; known: "
                             f"{', '.join(m['module'] for m in t['models'].values())}")
    nodes, per_node = call.get("num_nodes"), call.get("num_gpus_per_node", 8)
    if nodes is None:
        raise TrainplanError(f"{where}: pretrain_recipe(num_nodes=...) is not given")
    cluster = {**cluster, "nodes": str(nodes)}
    values = dests(paths, t, where)
    imp = imported_from(values, paths.get("model.config.vocab_size"), nodes * per_node, cluster, where, STACK)
    from trainplan.models import catalog

    want = next(n for n, m in t["models"].items() if m["module"] == call["module"])
    if imp.model != want and catalog().get(want) is not None:
        raise TrainplanError(f"{where}: the fields describe {imp.model}, but the recipe is llm.{call['module']} ({want})")
    return imp
