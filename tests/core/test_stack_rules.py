"""The MoE capacity settings (moe_capacity_factor, moe_pad_to_capacity) and the framework refusals of
stacks.RULES: Megatron-Core's checks of overlap_moe_expert_parallel_comm (ep_comm_overlap) and of
padding to capacity, each a one-line refusal with its source when asked for, off when only a preset
would have it on."""

import math
from dataclasses import replace

import pytest

from trainplan import stacks
from trainplan.errors import TrainplanError
from trainplan.hardware import Cluster, find_node
from trainplan.job import Job, Workload
from trainplan.layout import Layout, check_layout, layout_from_dict, parse_layout
from trainplan.models import resolve
from trainplan.stacks import drop_refused, parse_assignment

QWEN = resolve("qwen3-30b-a3b")  # 128 experts, 48 layers
LLAMA = resolve("llama-3.1-8b")


def _job(model=QWEN, gb=16):
    return Job(model, Cluster(find_node("ml.p6-b200.48xlarge"), 2), Workload(4096, gb))


def _megatron(**kw):
    """ep=8 over 16 GPUs, alltoall, no recompute: every ep_comm_overlap rule holds."""
    fields = {"dp_shard": 16, "ep": 8, "micro_batch": 1} | {k: v for k, v in kw.items() if k not in stacks.SETTINGS}
    settings = {"moe_dispatcher": "alltoall"} | {k: v for k, v in kw.items() if k in stacks.SETTINGS}
    return Layout(**fields).with_stack("megatron", **settings)


# ---- the capacity factor: parsed once, at every edge ------------------------------------------

def test_capacity_factor_parses_as_a_positive_finite_number_or_null():
    assert parse_assignment("moe_capacity_factor=1.25") == ("moe_capacity_factor", 1.25)
    assert parse_assignment("moe_capacity_factor=null") == ("moe_capacity_factor", None)
    assert all(s.execution.moe_capacity_factor is None for s in stacks.stacks().values())  # dropless presets
    for bad in ("0", "-1", "inf", "nan", "lots"):
        with pytest.raises(TrainplanError, match="moe_capacity_factor must be a finite number > 0, or null") as e:
            parse_assignment(f"moe_capacity_factor={bad}")
        assert "\n" not in str(e.value)
    with pytest.raises(TrainplanError, match="moe_capacity_factor must be a finite number"):
        layout_from_dict({"execution": {"moe_capacity_factor": math.inf}})


def test_capacity_settings_round_trip_through_the_layout_line():
    L = _megatron(moe_capacity_factor=1.25, moe_pad_to_capacity=True)
    assert "moe_capacity_factor=1.25" in L.short() and "moe_pad_to_capacity=true" in L.short()
    assert parse_layout(L.short()) == L


@pytest.mark.parametrize("key,value", [("moe_capacity_factor", 1.25), ("moe_pad_to_capacity", True)])
def test_capacity_settings_are_refused_for_a_model_without_experts(key, value):
    L = Layout(dp_shard=16, micro_batch=1).with_stack("megatron", **{key: value})
    with pytest.raises(TrainplanError, match=f"{key} applies to mixture-of-experts models only") as e:
        check_layout(_job(LLAMA), L)
    assert "\n" not in str(e.value)


def test_a_capacity_factor_is_accepted_for_an_moe_model_by_every_stack():
    for name in ("trainplan", "megatron"):
        check_layout(_job(), Layout(dp_shard=16, ep=8, micro_batch=1).with_stack(name, moe_capacity_factor=1.25))


# ---- RULES: one-line refusals naming the rule and its source ----------------------------------

@pytest.mark.parametrize("changes,needs", [
    ({"ep": 1}, "expert parallelism"),
    ({"moe_dispatcher": "allgather"}, "the alltoall or deepep dispatcher"),
    ({"pp": 2, "dp_shard": 8, "grad_accum": 2}, "virtual pipeline stages"),
    ({"ac": "full"}, "no full-layer recompute"),
    ({"ac": "partial", "ac_layers": 4}, "no full-layer recompute"),
    ({"ac": "offload"}, "no full-layer recompute"),
])
def test_ep_comm_overlap_where_megatron_refuses_it_is_a_one_line_refusal(changes, needs):
    check_layout(_job(), _megatron(ep_comm_overlap=True))  # every rule holds
    L = _megatron(ep_comm_overlap=True, **changes)
    assert L.execution.ep_comm_overlap  # asked for: kept, so that check_layout can say why not
    with pytest.raises(TrainplanError) as e:
        check_layout(_job(), L)
    msg = str(e.value)
    assert msg.startswith("ep_comm_overlap=true needs " + needs) and "\n" not in msg
    assert "transformer_config.py" in msg and "@d98e8a64dd" in msg and "--set ep_comm_overlap=false" in msg


def test_ep_comm_overlap_holds_with_pp_when_the_schedule_is_interleaved_and_with_selective_recompute():
    L = _megatron(ep_comm_overlap=True, pp=2, vp=2, pp_schedule="interleaved", dp_shard=8, grad_accum=2,
                  ac="selective", moe_dispatcher="deepep")
    check_layout(_job(), L)
    assert L.execution.ep_comm_overlap


@pytest.mark.parametrize("changes,needs", [
    ({"moe_capacity_factor": None}, "a capacity factor"),
    ({"moe_dispatcher": "deepep"}, "a dispatcher other than deepep"),
])
def test_padding_to_capacity_where_megatron_refuses_it(changes, needs):
    padded = {"moe_capacity_factor": 1.0, "moe_pad_to_capacity": True}
    check_layout(_job(), _megatron(**padded))
    with pytest.raises(TrainplanError, match=f"moe_pad_to_capacity=true needs {needs} .*transformer_config.py"):
        check_layout(_job(), _megatron(**(padded | changes)))


def test_a_preset_that_overlaps_ep_keeps_it_off_where_a_rule_fails(monkeypatch):
    # A preset's own value is a default, not a request: it is turned off where Megatron would refuse
    # it (as only_if does), and stays on where every rule holds.
    presets = dict(stacks.stacks())
    mg = presets["megatron"]
    presets["megatron"] = replace(mg, execution=mg.execution.with_(ep_comm_overlap=True, moe_dispatcher="alltoall"))
    monkeypatch.setattr(stacks, "stacks", lambda: presets)
    assert Layout(dp_shard=16, ep=8, micro_batch=1, stack="megatron").execution.ep_comm_overlap
    for off in ({"ep": 1}, {"ac": "full"}, {"pp": 2, "dp_shard": 8, "grad_accum": 2}):
        L = Layout(**({"dp_shard": 16, "ep": 8, "micro_batch": 1, "stack": "megatron"} | off))
        assert not L.execution.ep_comm_overlap, off
        check_layout(_job(), L)


def test_a_search_costs_a_refused_setting_off_and_keeps_it_where_it_holds():
    asked = _megatron(ep_comm_overlap=True)
    assert drop_refused(asked) is asked
    refused = drop_refused(_megatron(ep_comm_overlap=True, ac="full"))
    assert not refused.execution.ep_comm_overlap
    check_layout(_job(), refused)
