"""The nemo and hyperpod exporters: a plan costed for the stack nemo becomes a NeMo 2.7.3 recipe script
or a HyperPod v1.5.1 recipe YAML that reads back to the same job and layout, whose estimate is the
plan's; what they cannot run as costed is refused in one line naming the setting; the readers name an
unknown field; every name written is in nemo.toml / hyperpod.toml with its source (NeMo is not
installed here: TransformerEngine / Apex, so the names are checked against the data read from the
release)."""

import ast
import re

import pytest
from megatron_plans import every_plan
from nemo_plans import make_plans

from trainplan.errors import TrainplanError
from trainplan.estimate import estimate
from trainplan.export import exporter, exporters, hyperpod, nemo, reader_for
from trainplan.hardware import cluster
from trainplan.job import Job, Workload
from trainplan.models import resolve
from trainplan.plan import Plan
from trainplan.search.evaluator import ModelEvaluator

TARGETS = (nemo, hyperpod)


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    return make_plans(tmp_path_factory.mktemp("plans"))


def _resolved(L):
    return L.with_(etp=L.expert_groups.etp)  # etp None and the etp it resolves to are one run


def test_registry_names_both_targets_and_a_stack_name_still_gives_its_first():
    for name, module in exporters().items():
        assert module.rsplit(".", 1)[1] == name and exporter(name).FRAMEWORK == name
    assert exporter("nemo") is nemo and exporter("hyperpod") is hyperpod
    assert nemo.STACK == hyperpod.STACK and exporter(nemo.STACK) is nemo
    assert (nemo.RELEASE, hyperpod.RELEASE) == ("2.7.3", "v1.5.1")


@pytest.mark.parametrize("mod", TARGETS, ids=lambda m: m.FRAMEWORK)
def test_every_known_answer_plan_round_trips_or_is_refused_in_one_line(plans, mod):
    checked, refused = 0, []
    for name, plan in plans.items():
        for p in every_plan(plan):
            why = mod.refusal(p.job, p.layout)
            try:
                files = mod.export(p)
            except TrainplanError as e:
                assert "\n" not in str(e) and str(e).startswith(f"{mod.FRAMEWORK} export: ")
                assert why is None or str(e).endswith(why)
                refused.append(str(e))
                continue
            assert why is None
            (text,) = files.values()
            imp = mod.read(text, name)
            assert (imp.model, imp.instance, imp.nodes) == (p.job.model.name, p.job.cluster.node.name,
                                                            p.job.cluster.nodes)
            assert (imp.seq_len, imp.global_batch) == (p.job.workload.seq_len, p.job.workload.global_batch)
            assert _resolved(imp.layout) == _resolved(p.layout), name
            job = Job(resolve(imp.model), cluster(imp.instance, imp.nodes),
                      Workload(imp.seq_len, imp.global_batch, p.job.workload.tokens))
            e = estimate(job, imp.layout, ModelEvaluator().profile)
            assert e.tokens_per_s == p.estimate.tokens_per_s and e.memory.total == p.estimate.memory.total
            checked += 1
    if mod is nemo:
        # the search proposes only what NeMo runs (search/capability.py reads nemo.refusal, the stack's
        # first target): every plan of a nemo search exports
        assert checked >= 25 and refused == [], refused
    else:
        # NeMo 1's recipe runs delayed fp8 only, counts no embedding / loss in the split, has no
        # Megatron-FSDP, MLA or MTP; the bf16 layouts without those export
        assert checked >= 1


def _assigned(text: str) -> set[str]:
    fn = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef))
    out = set()
    for node in fn.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Attribute):
            out.add(ast.unparse(node.targets[0]).removeprefix("recipe."))
        elif isinstance(node, ast.Expr):
            out |= {f"callbacks.{k.arg}" for k in node.value.args[0].keywords}
    return out


def test_every_name_written_is_in_the_data_with_its_source(plans):
    p = plans["llama-405b-p6"]
    written = _assigned(nemo.export(p)[nemo.data()["file"]])
    assert written <= nemo._known_paths(nemo.data()) | set(nemo.data()["fixed"])
    assert {"trainer.strategy.tensor_model_parallel_size", "callbacks.tp_comm_overlap",
            "optim.config.use_distributed_optimizer", "model.config.vocab_size"} <= written
    for t in (nemo.data(), hyperpod.data()):
        for dest, f in t["fields"].items():
            assert re.search(r"(\.py:\d+|mcore|MLR:\d+|not line-cited)", f["source"]), dest
    import trainplan.export.megatron as mg
    assert set(nemo.data()["fields"]) <= set(mg.names()["args"])  # every dest is Megatron-Core's


def _variant(plan, **changes):
    return Plan(plan.job, plan.layout.with_(**changes), plan.train, None)


@pytest.mark.parametrize(("changes", "setting"), [
    ({"ac": "offload"}, "ac: offload"), ({"torch_compile": True}, "torch_compile"),
    ({"precision": "nvfp4", "fp8_allgather": False}, "precision nvfp4"),
    ({"execution": None}, "cuda_graphs true"),
])
def test_what_nemo_cannot_run_as_costed_is_refused_naming_it(plans, changes, setting):
    base = plans["llama-405b-p6"]
    if changes.get("execution", 0) is None:
        changes = {"execution": base.layout.execution.with_(cuda_graphs=True)}
    p = _variant(base, **changes)
    assert nemo.refusal(p.job, p.layout).startswith(setting)
    with pytest.raises(TrainplanError, match=f"^nemo export: {setting}") as e:
        nemo.export(p)
    assert "\n" not in str(e.value)


def test_hyperpod_refuses_what_nemo_1_has_no_key_for(plans):
    p = plans["llama-405b-p6"]
    assert hyperpod.refusal(p.job, p.layout.with_(precision="fp8_tensorwise")).startswith("precision: ")
    assert hyperpod.refusal(p.job, p.layout.with_(precision="bf16", sharding="fsdp")).startswith("sharding fsdp: ")
    ds = plans["deepseek-v3-p6"]
    assert hyperpod.refusal(ds.job, ds.layout).startswith("model deepseek-v3: ")


def test_a_plan_costed_for_another_stack_is_refused(plans):
    p = plans["llama-405b-p6"]
    other = Plan(p.job, p.layout.with_stack("torchtitan"), p.train, None)
    with pytest.raises(TrainplanError, match=r"^nemo export: stack: .*--stack nemo"):
        nemo.export(other)


def _exported(plans, mod):
    for p in every_plan(plans["llama-405b-p6"]):
        if mod.refusal(p.job, p.layout) is None:
            return p, next(iter(mod.export(p).values()))
    raise AssertionError("nothing exports")


@pytest.mark.parametrize(("edit", "message"), [
    (lambda t: t.replace("    return recipe", "    recipe.model.config.frobnicate = 3\n    return recipe"),
     "unknown or unsupported NeMo recipe field 'recipe.model.config.frobnicate'"),
    (lambda t: t.replace("overlap_grad_reduce=", "bucket_size=1, overlap_grad_reduce="),
     "unknown or unsupported MegatronCommOverlapCallback argument 'bucket_size'"),
    (lambda t: t.replace("llm.llama31_405b", "llm.llama4_e16"), "llm.llama4_e16.pretrain_recipe is not a recipe"),
    (lambda t: t.replace("recipe.model.config.num_layers = 126", "recipe.model.config.num_layers = 127"),
     "no catalog model has these dimensions"),
    (lambda t: t.replace("    return recipe", "    print(recipe)\n    return recipe"), "cannot read this statement"),
])
def test_the_nemo_reader_names_what_it_cannot_map(plans, edit, message):
    _, text = _exported(plans, nemo)
    with pytest.raises(TrainplanError, match=re.escape(message)) as e:
        nemo.read(edit(text), "recipe.py")
    assert "\n" not in str(e.value) and str(e.value).startswith("recipe.py")


def test_the_hyperpod_reader_names_an_unknown_key(plans):
    _, text = _exported(plans, hyperpod)
    with pytest.raises(TrainplanError, match="unknown or unsupported HyperPod recipe key 'model.frobnicate'"):
        hyperpod.read(text.replace("model:\n", "model:\n  frobnicate: 3\n"), "r.yaml")


def test_from_tells_a_nemo_script_from_a_torchtitan_config_and_yaml_is_hyperpod(plans):
    from trainplan.export import torchtitan

    _, text = _exported(plans, nemo)
    assert reader_for(".py", text) is nemo
    assert reader_for(".py", "from torchtitan.trainer import Trainer\n\ndef f():\n    return Trainer.Config()\n") is torchtitan
    assert reader_for(".yaml", "trainer: {}\n") is hyperpod and reader_for(".yml", "") is hyperpod


def test_estimate_from_a_nemo_script_gives_the_plans_numbers(plans, tmp_path, capsys):
    from trainplan.cli import main

    p, text = _exported(plans, nemo)
    path = tmp_path / "trainplan_recipe.py"
    path.write_text(text)
    assert main(["estimate", "--from", str(path), "--json"]) == 0
    out = capsys.readouterr().out
    assert p.layout.short().split()[0] in out


# A HyperPod recipe written here in the shape of the v1.5.1 NeMo recipe (recipes_collection/recipes/
# training/llama/megatron_llama3_1_8b_nemo.yaml: its sections and key names, values of our own), with
# the vocabulary stated (model.override_vocab_size) and keys trainplan reads past.
HAND_WRITTEN = """\
run:
  name: llama-8b-team
  time_limit: "0-02:00:00"
trainer:
  num_nodes: 4
  devices: 8
  accelerator: gpu
  precision: bf16
  max_steps: 500
  log_every_n_steps: 10
  gradient_clip_val: 1.0
exp_manager:
  name: team_llama
  checkpoint_callback_params:
    save_top_k: 2
    every_n_train_steps: 100
model:
  mcore_gpt: true
  micro_batch_size: 2
  global_batch_size: 256
  tensor_model_parallel_size: 2
  pipeline_model_parallel_size: 2
  virtual_pipeline_model_parallel_size: null
  context_parallel_size: 1
  encoder_seq_length: 8192
  max_position_embeddings: 8192
  num_layers: 32
  hidden_size: 4096
  ffn_hidden_size: 14336
  num_attention_heads: 32
  num_query_groups: 8
  kv_channels: null
  normalization: rmsnorm
  bias: false
  activation: fast-swiglu
  position_embedding_type: rope
  rotary_base: 500000
  share_embeddings_and_output_weights: false
  override_vocab_size: 128256
  make_vocab_size_divisible_by: 128
  hidden_dropout: 0.0
  tokenizer:
    library: sentencepiece
  activations_checkpoint_granularity: selective
  sequence_parallel: true
  transformer_engine: true
  fp8: false
  fp8_hybrid: false
  ub_tp_comm_overlap: true
  optim:
    name: distributed_fused_adam
    lr: 3.0e-4
    overlap_grad_sync: true
    overlap_param_sync: true
    sched:
      name: CosineAnnealing
      warmup_steps: 50
  data:
    data_impl: mock
    seq_length: ${training.model.encoder_seq_length}
"""


def test_a_hand_written_hyperpod_recipe_reads_as_its_layout():
    imp = hyperpod.read(HAND_WRITTEN, "team.yaml")
    L = imp.layout
    assert (imp.model, imp.nodes, imp.seq_len, imp.global_batch) == ("llama-3.1-8b", 4, 8192, 256)
    assert (L.tp, L.pp, L.vp, L.cp, L.sharding, L.precision, L.ac) == (2, 2, 1, 1, "zero1", "bf16", "selective")
    # 32 GPUs / (tp 2 x pp 2) = dp 8; 256 = 2 x 8 x 16 micro-batches
    assert (L.dp_shard, L.micro_batch, L.grad_accum, L.sequence_parallel) == (8, 2, 16, True)
    assert L.execution.tp_comm_overlap and L.execution.param_gather_overlap
    assert any("not read" in n for n in imp.notes)
    with pytest.raises(TrainplanError, match="model.fp8_e4m3: True"):
        hyperpod.read(HAND_WRITTEN.replace("  fp8: false\n", "  fp8: true\n  fp8_e4m3: true\n"), "team.yaml")
    # NeMo 1 pads to a multiple of make_vocab_size_divisible_by x tp: 128256 over 512 is 250.5, so 251 x 512
    with pytest.raises(TrainplanError, match=r"pads to 128512 rows .* trainplan reads an unpadded vocabulary"):
        hyperpod.read(HAND_WRITTEN.replace("make_vocab_size_divisible_by: 128", "make_vocab_size_divisible_by: 256"),
                      "team.yaml")


def test_without_pyyaml_the_hyperpod_target_says_what_to_install(plans, monkeypatch):
    import sys

    p, text = _exported(plans, hyperpod)
    monkeypatch.setitem(sys.modules, "yaml", None)  # import yaml raises ImportError
    for call in (lambda: hyperpod.export(p), lambda: hyperpod.read(text, "r.yaml")):
        with pytest.raises(TrainplanError, match=r"^the HyperPod recipe is YAML: pip install 'trainplan\[yaml\]'"):
            call()
