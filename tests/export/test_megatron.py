"""The megatron exporter: a plan costed for --stack megatron becomes Megatron-LM 0.16.1 arguments
that read back to the same job and layout, whose estimate is the plan's (export -> read -> estimate);
what Megatron cannot run as costed is refused in one line naming the setting; read refuses what it
cannot map, naming the argument."""

import pytest
from megatron_plans import every_plan, make_plans

from trainplan.errors import TrainplanError
from trainplan.estimate import estimate
from trainplan.export import exporter
from trainplan.export import megatron as mg
from trainplan.hardware import cluster
from trainplan.job import Job, Workload
from trainplan.models import resolve
from trainplan.plan import Plan
from trainplan.search.evaluator import ModelEvaluator


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    return make_plans(tmp_path_factory.mktemp("plans"))


def _resolved(L):
    """A layout with its expert tp stated (the exporter writes the resolved etp; etp None is the same run)."""
    return L.with_(etp=L.expert_groups.etp)  # etp None and the etp it resolves to are one run


def _imported_estimate(imp, tokens):
    job = Job(resolve(imp.model), cluster(imp.instance, imp.nodes), Workload(imp.seq_len, imp.global_batch, tokens))
    return job, estimate(job, imp.layout, ModelEvaluator().profile)


def test_registry_names_this_module():
    assert exporter("megatron") is mg and mg.FRAMEWORK == "megatron" and mg.STACK == "megatron"
    assert mg.RELEASE == "0.16.1"


def test_every_known_answer_plan_round_trips_to_its_estimate(plans):
    # the search proposes only what Megatron-LM runs as costed (search/capability.py reads
    # mg.refusal), so every chosen, runner-up and Pareto plan of a megatron search exports
    checked = 0
    for name, plan in plans.items():
        for p in every_plan(plan):
            files = mg.export(p)
            assert set(files) == {mg.ARGS_FILE, mg.SCRIPT_FILE}
            imp = mg.read(files[mg.ARGS_FILE], name)
            assert (imp.model, imp.instance, imp.nodes) == (p.job.model.name, p.job.cluster.node.name,
                                                            p.job.cluster.nodes)
            assert (imp.seq_len, imp.global_batch) == (p.job.workload.seq_len, p.job.workload.global_batch)
            assert _resolved(imp.layout) == _resolved(p.layout), name
            _, e = _imported_estimate(imp, p.job.workload.tokens)
            assert e.tokens_per_s == p.estimate.tokens_per_s and e.memory.total == p.estimate.memory.total
            checked += 1
    assert checked >= 25


def _first_exported(plan):
    for p in every_plan(plan):
        try:
            return p, mg.export(p)
        except TrainplanError:
            pass
    raise AssertionError("no plan exports")


def test_the_args_file_states_what_was_costed(plans):
    p, files = _first_exported(plans["deepseek-v3-p6"])
    text = files[mg.ARGS_FILE]
    L, m = p.layout, p.job.model
    lines = text.splitlines()
    assert lines[0].startswith(f"# trainplan: instance={p.job.cluster.node.name} nodes={p.job.cluster.nodes}")
    for want in (f"--tensor-model-parallel-size {L.tp}", f"--pipeline-model-parallel-size {L.pp}",
                 f"--expert-model-parallel-size {L.ep}", f"--num-experts {m.moe.num_experts}",
                 "--multi-latent-attention", f"--kv-lora-rank {m.mla.kv_lora_rank}", f"--mtp-num-layers {m.mtp_layers}",
                 "--moe-router-enable-expert-bias", "--moe-layer-freq ([0]*3+[1]*58)",
                 f"--save-interval {p.train.checkpoint_every}", f"--seq-length {p.job.workload.seq_len}"):
        assert want in lines, want
    assert ("--sequence-parallel" in lines) == (L.tp > 1 and L.sequence_parallel)


def test_the_vocabulary_is_built_unpadded():
    # NullTokenizer adds one id, then Megatron pads to make_vocab_size_divisible_by x tp
    for vocab, tp in ((128256, 8), (129280, 2), (32000, 4), (151936, 1)):
        a = mg.vocab_args(vocab, tp)
        assert mg.padded_vocab(a["vocab_size"], a["make_vocab_size_divisible_by"], tp) == vocab
    with pytest.raises(TrainplanError, match="^megatron export: vocab_size: tp=3"):
        mg.vocab_args(32000, 3)


def test_the_script_runs_torchrun_over_the_plans_nodes(plans):
    p = plans["llama-405b-p6"]
    script = mg.export(p)[mg.SCRIPT_FILE]
    assert f"torchrun --nnodes {p.job.cluster.nodes} --nproc-per-node 8" in script
    assert '"$MEGATRON_LM/pretrain_gpt.py" "${args[@]}"' in script and "read -ra values" in script


def _variant(plan, **changes):
    return Plan(plan.job, plan.layout.with_(**changes), plan.train, None)


@pytest.mark.parametrize(("changes", "setting"), [
    ({"ac": "offload"}, "ac"),
    ({"precision": "fp8_rowwise", "fp8_allgather": False}, "precision"),
    ({"precision": "bf16_pure"}, "precision"),
    ({"sharding": "zero2"}, "sharding"),
    ({"chunked_loss": True}, "chunked_loss"),
    ({"torch_compile": True}, "torch_compile"),
])
def test_what_megatron_cannot_run_as_costed_is_refused_naming_it(plans, changes, setting):
    with pytest.raises(TrainplanError, match=f"^megatron export: {setting}: ") as e:
        mg.export(_variant(plans["llama-405b-p6"], **changes))
    assert "\n" not in str(e.value)


def test_a_plan_costed_for_another_stack_is_refused(plans):
    p = plans["mixtral-p5"]
    other = Plan(p.job, p.layout.with_stack("torchtitan").with_(etp=None), p.train, None)
    with pytest.raises(TrainplanError, match=r"^megatron export: stack: .*torchtitan.*--stack megatron"):
        mg.export(other)


def test_a_power_cap_is_refused(plans):
    p = plans["llama-405b-p6"]
    capped = p.layout.with_(execution=p.layout.execution.with_(power_limit_w=700.0))
    with pytest.raises(TrainplanError, match="^megatron export: power_limit_w: "):
        mg.export(Plan(p.job, capped, p.train, None))


def test_a_launch_script_reads_back_with_torchruns_world(plans):
    p = plans["mixtral-p5"]
    body = [ln for ln in mg.export(p)[mg.ARGS_FILE].splitlines() if not ln.startswith("#")]
    script = "torchrun --nnodes 6 --nproc_per_node 8 pretrain_gpt.py \\\n  " + " \\\n  ".join(body) + "\n"
    imp = mg.read(script, "launch.sh")
    assert imp.layout == mg.read(mg.export(p)[mg.ARGS_FILE], "x").layout
    assert imp.nodes == 6 and imp.instance is None


@pytest.mark.parametrize(("edit", "message"), [
    (lambda t: t + "--use-torch-fsdp2\n", "unknown or unsupported Megatron-LM argument '--use-torch-fsdp2'"),
    (lambda t: t + "--frobnicate 3\n", "unknown or unsupported Megatron-LM argument '--frobnicate'"),
    (lambda t: t.replace("--seq-length 8192", "--seq-length $SEQ"), "'\\$SEQ' is a shell variable"),
    (lambda t: "\n".join(ln for ln in t.splitlines() if not ln.startswith("# trainplan:")), "the world size is not stated"),
    (lambda t: t.replace("--num-layers 56", "--num-layers 57"), "no catalog model has these dimensions"),
    (lambda t: t.replace("--fp8-recipe tensorwise", "--fp8-recipe blockwise"), "no trainplan recipe runs"),
    (lambda t: t.replace("--recompute-method block", "--recompute-method uniform"), "--recompute-method uniform"),
])
def test_read_refuses_what_it_cannot_map_in_one_line(plans, edit, message):
    text = mg.export(plans["mixtral-p5"])[mg.ARGS_FILE]
    with pytest.raises(TrainplanError, match=message) as e:
        mg.read(edit(text), "args.txt")
    assert "\n" not in str(e.value) and str(e.value).startswith("args.txt: ")


def test_every_argument_in_the_data_file_has_a_flag_kind_and_cited_source():
    import re

    for dest, a in mg.names()["args"].items():
        assert a["flag"].startswith("--") and a["kind"] in ("value", "list", "true", "false"), dest
        assert re.search(r"(arguments|_config)\.py:\d+", a["source"]), dest


def _printed_block(values: dict, world: int) -> str:
    """The block Megatron prints at start-up (megatron/training/arguments.py _print_args at
    core_v0.16.1: 'arguments' between dashed rules, `  dest ..... value` sorted by dest), written
    here for the given values."""
    rows = sorted({**values, "world_size": world, "rank": 0, "some_unpriced_argument": "x"}.items())
    body = "".join(f"  {k} {'.' * (48 - len(k))} {v}\n" for k, v in rows)
    return ("------------------------ arguments ------------------------\n" + body +
            "-------------------- end of arguments ---------------------\n")


def test_a_printed_arguments_block_reads_back_to_the_same_layout(plans):
    from trainplan.export.megatron_read import _parse_flags

    p = plans["mixtral-p5"]
    text = mg.export(p)[mg.ARGS_FILE]
    values = _parse_flags([t for ln in text.splitlines() if not ln.startswith("#") for t in ln.split()], "x")
    imp = mg.read("[rank0] startup\n" + _printed_block(values, p.job.cluster.num_gpus), "run.log")
    assert imp.layout == mg.read(text, "x").layout and imp.model == p.job.model.name
    assert imp.nodes is None and any("not read" in n for n in imp.notes)


@pytest.mark.parametrize("model,kinds", [("llama-4-maverick", "chunked, nope"), ("qwen3-next-80b-a3b", "linear")])
def test_layers_megatron_is_not_given_are_refused_not_exported_as_full_attention(model, kinds):
    # the exporter writes full attention on every layer: a model with other attention layers would run
    # as another model, so the export (and a search on this stack) refuses it, naming the kinds
    from trainplan.hardware import Cluster, find_node
    from trainplan.job import Job, Workload
    from trainplan.layout import Layout

    job = Job(resolve(model), Cluster(find_node("ml.p6-b200.48xlarge"), 16), Workload(8192, 128))
    why = mg.refusal(job, Layout(dp_shard=128, micro_batch=1, stack="megatron"))
    assert why.startswith(f"megatron export: attention: {model} has {kinds} attention layers")
