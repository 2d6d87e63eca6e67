"""plan.json round-trips and refuses what a launcher or the runtime could not run."""

import json

import pytest

from trainplan.errors import TrainplanError
from trainplan.hardware import cluster
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.models.spec import MLASpec, ModelSpec, MoESpec
from trainplan.plan import SCHEMA, Plan, load_plan, plan_from_dict

DSV3_LIKE = ModelSpec(
    name="tiny-mla-moe", model_type="deepseek_v3", num_layers=4, hidden_size=256, num_heads=4,
    num_kv_heads=4, head_dim=64, ffn_size=512, vocab_size=1000,
    moe=MoESpec(num_experts=8, experts_per_token=2, expert_ffn_size=128, num_shared_experts=1,
                shared_expert_ffn_size=128, first_dense_layers=1),
    mla=MLASpec(q_lora_rank=64, kv_lora_rank=32, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32),
)


def make_plan(**layout):
    job = Job(DSV3_LIKE, cluster("ml.p6-b200.48xlarge", 4), Workload(seq_len=4096, global_batch=64))
    return Plan(job, Layout(dp_shard=32, micro_batch=2, grad_accum=1, **layout), reasons=("because",))


def test_round_trip_keeps_every_field(tmp_path):
    p = make_plan(ep=8, ac="full")
    f = tmp_path / "plan.json"
    f.write_text(p.to_json())
    q = load_plan(f)
    assert q.job == p.job and q.layout == p.layout and q.train == p.train and q.reasons == p.reasons
    assert json.loads(f.read_text())["schema"] == SCHEMA


def test_plan_json_carries_etp_when_the_plan_states_it(tmp_path):
    job = Job(DSV3_LIKE, cluster("ml.p6-b200.48xlarge", 4), Workload(seq_len=4096, global_batch=64))
    for etp in (1, 2, None):
        p = Plan(job, Layout(dp_shard=16, tp=2, ep=8, etp=etp, micro_batch=4, grad_accum=1))
        f = tmp_path / "plan.json"
        f.write_text(p.to_json())
        assert json.loads(f.read_text())["layout"].get("etp") == etp and load_plan(f).layout == p.layout


def test_plan_json_carries_the_stack_and_every_execution_setting(tmp_path):
    from trainplan.stacks import SETTINGS

    p = Plan(make_plan().job, make_plan().layout.with_stack("megatron", tp_comm_overlap=True))
    d = json.loads(p.to_json())
    assert d["layout"]["stack"] == "megatron"
    assert list(d["layout"]["execution"]) == list(SETTINGS) and d["layout"]["execution"]["tp_comm_overlap"] is True
    f = tmp_path / "plan.json"
    f.write_text(p.to_json())
    assert load_plan(f).layout.execution == p.layout.execution


def test_a_capacity_factor_round_trips_and_a_dense_model_refuses_it(tmp_path):
    p = Plan(make_plan().job, make_plan(ep=8).layout.with_stack("trainplan", moe_capacity_factor=1.25))
    d = json.loads(p.to_json())
    assert d["layout"]["execution"]["moe_capacity_factor"] == 1.25
    assert d["layout"]["execution"]["moe_pad_to_capacity"] is False
    f = tmp_path / "plan.json"
    f.write_text(p.to_json())
    assert load_plan(f).layout.execution.moe_capacity_factor == 1.25 and load_plan(f).layout == p.layout
    # the same setting in a dense model's plan: refused at load, one line
    from dataclasses import replace

    dense = replace(DSV3_LIKE, moe=None, mla=None, name="tiny-dense")
    d["model"] = json.loads(Plan(Job(dense, p.job.cluster, p.job.workload), Layout(dp_shard=32, micro_batch=2))
                            .to_json())["model"]
    d["layout"]["ep"] = 1
    with pytest.raises(TrainplanError, match="moe_capacity_factor applies to mixture-of-experts models only") as e:
        plan_from_dict(d)
    assert "\n" not in str(e.value)


def test_unknown_schema_is_refused_with_what_to_do():
    d = make_plan().to_dict() | {"schema": "trainplan-plan/99"}
    with pytest.raises(TrainplanError, match=r"unknown schema 'trainplan-plan/99'.*re-create the plan"):
        plan_from_dict(d)


def test_a_plan_edited_into_an_impossible_layout_is_refused(tmp_path):
    d = make_plan().to_dict()
    d["layout"]["tp"] = 3
    f = tmp_path / "edited.json"
    f.write_text(json.dumps(d))
    with pytest.raises(TrainplanError) as e:
        load_plan(f)
    assert str(e.value).startswith(str(f)) and "tp=3 does not divide the 4 attention heads" in str(e.value)


def test_unknown_keys_name_the_key_and_the_section():
    d = make_plan().to_dict()
    d["train"]["learning_rate"] = 1e-3
    with pytest.raises(TrainplanError, match=r"train: unknown key 'learning_rate'"):
        plan_from_dict(d)
    d = make_plan().to_dict()
    d["model"]["moe"]["experts"] = 3
    with pytest.raises(TrainplanError, match=r"model.moe: unknown key 'experts'"):
        plan_from_dict(d)


def test_malformed_file_is_one_line(tmp_path):
    f = tmp_path / "bad.json"
    f.write_text("{not json")
    with pytest.raises(TrainplanError, match=r"is not valid JSON \(line 1, column 2"):
        load_plan(f)
    with pytest.raises(TrainplanError, match="does not exist"):
        load_plan(tmp_path / "missing.json")


def _set(path: str, value):
    def edit(d):
        *keys, last = path.split(".")
        for k in keys:
            d = d[k]
        d[last] = value
    return edit


@pytest.mark.parametrize("edit, message", [
    (_set("model.hidden_size", -1), "model: hidden_size must be positive, got -1"),
    (_set("train.steps", -10), "train: steps must be >= 0 and <= 1e+09, got -10"),
    (_set("train.lr", "fast"), "train: lr must be a finite number, got 'fast'"),
    (_set("train.lr", 0), "train: lr must be > 0"),
    (_set("train.betas", [0.9, 1.5]), "train: betas must be two numbers in [0, 1)"),
    (_set("train.betas", [0.9]), "train: betas must be a list of 2"),
    (_set("train.log_every", 0), "train: log_every must be >= 1"),
    (_set("train.seed", True), "train: seed must be an integer, got True"),
    (_set("train.data", None), "train: data must be a string, got None"),
    (_set("model.num_kv_heads", 3), "model: 4 attention heads do not split into 3 key/value head groups"),
    (_set("model.moe.experts_per_token", 9), "model: top-9 routing needs 1 <= experts per token <= the 8 experts"),
    (_set("model.moe", [1]), "model: moe must be an object or null, got [1]"),
    (_set("model.tied_embeddings", "no"), "model: tied_embeddings must be true or false, got 'no'"),
    (_set("workload.seq_len", 4096.0), "workload: seq_len must be an integer, got 4096.0"),
    (_set("workload.tokens", -1), "workload: tokens must be between 0 and 1e+18, got -1"),
    (_set("workload.optimizer", "sgd"), "workload: unknown optimizer 'sgd'; known: adamw"),
    (_set("cluster.instance", 5), "cluster.instance must be a string, got 5"),
    (_set("layout", "fsdp"), "layout must be an object, got str"),
    (_set("layout.etp", "one"), "layout: etp must be an integer or null, got 'one'"),
    (_set("layout.etp", 2), "etp=2 with tp=1: etp must divide tp"),
    (_set("estimate", 3), "estimate must be an object, got int"),
    (_set("reasons", "because"), "reasons must be a list of strings"),
])
def test_a_tampered_plan_is_refused_in_one_line(tmp_path, edit, message):
    d = make_plan().to_dict()
    edit(d)
    f = tmp_path / "tampered.json"
    f.write_text(json.dumps(d))
    with pytest.raises(TrainplanError) as e:
        load_plan(f)
    assert str(e.value) == f"{f}: {message}" or str(e.value).startswith(f"{f}: {message}")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("command", [("launch", "local", "--dry-run"), ("train", "--dry-run")])
def test_launch_and_train_refuse_a_tampered_plan(cli, tmp_path, command):
    d = make_plan().to_dict()
    d["model"]["hidden_size"] = -1
    f = tmp_path / "tampered.json"
    f.write_text(json.dumps(d))
    code, out, err = cli(*command, "--plan", str(f))
    assert code == 2 and out == ""
    assert err == f"trainplan {command[0]}: error: {f}: model: hidden_size must be positive, got -1\n"


def test_nan_in_a_plan_file_is_refused(tmp_path):
    f = tmp_path / "nan.json"
    f.write_text(make_plan().to_json().replace('"lr": 0.0003', '"lr": NaN'))
    with pytest.raises(TrainplanError, match="NaN is not a JSON number"):
        load_plan(f)


def test_hf_config_must_describe_the_model(tmp_path):
    from trainplan.models import hf_config, resolve

    p = Plan(Job(resolve("llama-3.2-1b"), cluster("ml.p5.48xlarge", 1), Workload(seq_len=4096, global_batch=8)),
             Layout(dp_shard=8), hf_config=hf_config("llama-3.2-1b"))
    d = p.to_dict()
    assert plan_from_dict(d).hf_config == d["hf_config"]
    d["hf_config"] = dict(d["hf_config"], num_hidden_layers=3)
    with pytest.raises(TrainplanError, match=r"hf_config and model disagree on num_layers \(3 vs 16\)"):
        plan_from_dict(d)


def test_every_train_setting_has_a_range():
    from dataclasses import fields

    from trainplan.plan import TRAIN_RANGES, TrainSettings

    numbers = {f.name for f in fields(TrainSettings) if f.type in ("int", "float")}
    assert numbers == set(TRAIN_RANGES)


def test_estimates_runners_up_and_pareto_read_back_exactly(tmp_path):
    """plan.json keeps every estimate the planner made, as typed objects: a field added to the
    Estimate (or its breakdowns) must be written and read back, or this fails."""
    from dataclasses import replace

    from trainplan.estimate import estimate
    from trainplan.plan import Alternative

    p = make_plan(ep=8, ac="full")
    other = p.layout.with_(ac="selective")
    p = replace(p, estimate=estimate(p.job, p.layout),
                runners_up=(Alternative(p.job, other, estimate(p.job, other)),),
                pareto=(Alternative(p.job, p.layout, estimate(p.job, p.layout)),))
    assert any(e.network_bytes > 0 for e in p.estimate.comm)  # 4 nodes: something crosses EFA
    f = tmp_path / "plan.json"
    f.write_text(p.to_json())
    q = load_plan(f)
    assert q.estimate == p.estimate
    assert q.runners_up == p.runners_up and q.pareto == p.pareto
