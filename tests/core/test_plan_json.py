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


def test_plan_json_carries_the_stack_and_every_execution_setting(tmp_path):
    from trainplan.stacks import SETTINGS

    p = Plan(make_plan().job, make_plan().layout.with_stack("megatron", tp_comm_overlap=True))
    d = json.loads(p.to_json())
    assert d["layout"]["stack"] == "megatron"
    assert list(d["layout"]["execution"]) == list(SETTINGS) and d["layout"]["execution"]["tp_comm_overlap"] is True
    f = tmp_path / "plan.json"
    f.write_text(p.to_json())
    assert load_plan(f).layout.execution == p.layout.execution


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
