"""Stack presets and execution settings: data with a source per value, one parse for flags and files."""

from pathlib import Path

import pytest

from trainplan import stacks as stacks_module
from trainplan.errors import TrainplanError
from trainplan.layout import Layout, layout_from_dict
from trainplan.parsing import read_toml
from trainplan.stacks import (
    CHOICES,
    CONVENTION_CHOICES,
    SETTINGS,
    Execution,
    conventions,
    execution_from_dict,
    parse_assignment,
    stack,
    stack_for_framework,
    stacks,
)

TOML = read_toml(Path(stacks_module.__file__).with_name("stacks.toml"))  # the registry's own source


def test_moe_imbalance_is_a_ratio_of_at_least_one():
    assert parse_assignment("moe_imbalance=1.3") == ("moe_imbalance", 1.3)
    assert all(s.execution.moe_imbalance == 1.0 for s in stacks().values())  # balanced unless told
    for bad in ("0.8", "null", "lots"):
        with pytest.raises(TrainplanError, match="moe_imbalance must be a number >= 1"):
            parse_assignment(f"moe_imbalance={bad}")


def test_settings_are_exactly_the_keys_every_preset_gives():
    # stacks.toml [NAME.settings]: one value and source per setting, the same keys in every preset
    for name, d in TOML.items():
        assert set(d["settings"]) == set(SETTINGS), name
    assert set(CHOICES) <= set(SETTINGS)
    assert CHOICES["cp_comm"] == ("p2p", "a2a", "allgather", "a2a+p2p")


@pytest.mark.parametrize("name", sorted(TOML))
def test_every_preset_has_every_setting_with_a_source(name):
    s = stack(name)
    assert set(s.sources) == set(SETTINGS)
    assert all(len(src) > 10 for src in s.sources.values())
    assert isinstance(s.execution, Execution) and s.recompute_family in ("pytorch", "megatron")


def test_presets_differ_where_the_frameworks_do():
    # Megatron-LM's argparse defaults leave every DP/TP overlap off; NeMo's perf recipes turn them on;
    # FSDP2 stacks overlap DP by construction; torch's CP rotates KV with an all-gather.
    mg, nemo, tt = stack("megatron").execution, stack("nemo").execution, stack("torchtitan").execution
    assert not mg.tp_comm_overlap and not mg.grad_reduce_overlap and mg.moe_dispatcher == "allgather"
    assert nemo.tp_comm_overlap and nemo.grad_reduce_overlap and nemo.cross_entropy == "fused"
    assert tt.grad_reduce_overlap and not tt.tp_comm_overlap and tt.cp_comm == "allgather"
    assert mg.cp_comm == "p2p"


def test_dataset_framework_names_map_to_presets():
    # a validation record's train.framework is a stack's name or one of its `frameworks`
    for name, d in TOML.items():
        for fw in (name, *d["frameworks"]):
            assert stack_for_framework(fw).name == name, fw
    assert any(d["frameworks"] for d in TOML.values())  # an other-name is checked (fms_fsdp: fms)
    assert stack_for_framework("other") is None


def test_layout_takes_its_stacks_preset_unless_given():
    assert Layout().stack == "trainplan" and Layout().execution == stack("trainplan").execution
    # pp = 1: Megatron has no pipeline P2P to overlap (the preset's only_if, stacks.applicable)
    assert Layout(stack="megatron").execution == stack("megatron").execution.with_(pp_p2p_overlap=False)
    L = Layout().with_stack("megatron", tp_comm_overlap=True)
    assert L.stack == "megatron" and L.execution.tp_comm_overlap and not L.execution.grad_reduce_overlap


def test_loss_kind_is_the_setting_unless_the_layout_asks_for_more():
    assert Layout().loss_kind == "plain"
    assert Layout(stack="nemo").loss_kind == "fused"
    assert Layout(chunked_loss=True, stack="nemo").loss_kind == "chunked"
    assert Layout(compiled_loss=True).loss_kind == "fused"
    assert Layout().with_stack("trainplan", cross_entropy="chunked").loss_kind == "chunked"


def test_layout_dict_round_trips_stack_and_settings():
    L = Layout(tp=8).with_stack("megatron", tp_comm_overlap=True, power_limit_w=700.0)
    d = L.to_dict()
    assert d["stack"] == "megatron" and d["execution"]["tp_comm_overlap"] is True
    assert d["execution"]["power_limit_w"] == 700.0
    assert layout_from_dict(d) == L
    # keys left out of execution come from the named stack's preset
    partial = layout_from_dict({"stack": "nemo", "execution": {"tp_comm_overlap": False}})
    assert partial.execution == stack("nemo").execution.with_(tp_comm_overlap=False, pp_p2p_overlap=False)


@pytest.mark.parametrize("name", ["megatron", "nemo", "megatron_bridge"])
def test_pipeline_p2p_overlap_needs_the_interleaved_schedule(name):
    # Megatron-LM validate_args turns overlap_p2p_comm off without the interleaved schedule; NeMo's
    # comm-overlap callback (and Megatron-Bridge's) sets it only with vp > 1
    plain = Layout(pp=4, stack=name)
    inter = Layout(pp=4, vp=2, pp_schedule="interleaved", stack=name)
    assert stack(name).execution.pp_p2p_overlap
    assert not plain.execution.pp_p2p_overlap and inter.execution.pp_p2p_overlap
    # asked for explicitly, it is still off where the framework cannot run it
    assert not Layout(pp=4).with_stack(name, pp_p2p_overlap=True).execution.pp_p2p_overlap
    assert layout_from_dict({"stack": name, "pp": 4, "vp": 2, "pp_schedule": "interleaved"}).execution == \
        inter.execution


def test_nemo_tp_overlap_needs_sequence_parallel():
    # NeMo's callback disables tp_comm_overlap for tp < 2 or sequence_parallel=False, after the user's values
    assert Layout(tp=4, stack="nemo").execution.tp_comm_overlap
    assert not Layout(tp=4, sequence_parallel=False, stack="nemo").execution.tp_comm_overlap
    assert not Layout(tp=1, stack="nemo").execution.tp_comm_overlap
    assert Layout(tp=4, sequence_parallel=False, stack="megatron").with_stack(
        "megatron", tp_comm_overlap=True).execution.tp_comm_overlap  # Megatron-LM has no such rule


@pytest.mark.parametrize("data, message", [
    ({"stack": "nope"}, "unknown stack 'nope'; known: trainplan"),
    ({"execution": {"tp_overlap": True}}, "unknown key 'tp_overlap'; allowed keys: cp_comm"),
    ({"execution": {"cp_comm": "ring"}}, "cp_comm must be p2p | a2a | allgather | a2a+p2p, got 'ring'"),
    ({"execution": {"cuda_graphs": "yes"}}, "cuda_graphs must be true or false"),
    ({"execution": {"power_limit_w": -5}}, "power_limit_w must be a finite number > 0, or null"),
])
def test_bad_settings_in_a_file_are_one_line_errors(data, message):
    with pytest.raises(TrainplanError) as e:
        layout_from_dict(data)
    assert message in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("text, expected", [
    ("tp_comm_overlap=false", ("tp_comm_overlap", False)),
    ("tp_comm_overlap=True", ("tp_comm_overlap", True)),
    ("cp_comm=a2a+p2p", ("cp_comm", "a2a+p2p")),
    ("power_limit_w=700", ("power_limit_w", 700.0)),
    ("power_limit_w=null", ("power_limit_w", None)),
])
def test_set_flag_parses_typed_values(text, expected):
    assert parse_assignment(text) == expected


@pytest.mark.parametrize("text, message", [
    ("colour=red", "unknown execution setting 'colour'; allowed: tp_comm_overlap, grad_reduce_overlap"),
    ("moe_dispatcher=nccl", "moe_dispatcher must be alltoall | allgather | deepep"),
    ("tp_comm_overlap", "--set expects KEY=VALUE"),
    ("cuda_graphs=maybe", "cuda_graphs must be true or false"),
])
def test_set_flag_errors_name_the_allowed_values(text, message):
    with pytest.raises(TrainplanError, match=message.replace("|", r"\|").replace("+", r"\+")):
        parse_assignment(text)


def test_execution_from_dict_refuses_non_objects():
    with pytest.raises(TrainplanError, match="expected an object"):
        execution_from_dict(["p2p"], "x", stack("trainplan").execution)


def test_every_stack_is_listed():
    assert list(stacks()) == list(TOML)  # every preset of stacks.toml, none dropped, in file order


# Which memory convention each stack runs with (stacks.toml [NAME.conventions], each from the
# framework's code): activations, low-precision weight copies, ZeRO-1 and ZeRO-2 flavours, fp32 gradients,
# vocabulary-parallel loss, bf16 loss, FSDP gradient sync, the peak its logger reports, the default etp,
# whether an fp8 recipe casts the routed experts too.
CONVENTIONS = {
    "trainplan": ("pytorch", "per_use", "zero_redundancy", "fsdp2_no_reshard", True, False, False, "every_microbatch", "reserved", "tp", False),
    "torchtitan": ("pytorch", "per_use", "distributed_optimizer", "deepspeed", True, True, False, "every_microbatch", "reserved", "one_under_ep", False),
    "megatron": ("megatron", "cached", "distributed_optimizer", "deepspeed", True, True, False, "every_microbatch", "device", "tp", True),
    "nemo": ("megatron", "cached", "distributed_optimizer", "deepspeed", False, True, False, "every_microbatch", "device", "tp", True),
    "megatron_bridge": ("megatron", "cached", "distributed_optimizer", "deepspeed", False, True, False, "every_microbatch",
                        "device", "tp", True),
    "composer": ("pytorch", "per_use", "distributed_optimizer", "deepspeed", True, True, False, "every_microbatch", "device", "tp", False),
    "fms": ("pytorch", "per_use", "distributed_optimizer", "deepspeed", True, True, False, "every_microbatch", "device", "tp", False),
    "kempnerforge": ("pytorch", "per_use", "distributed_optimizer", "deepspeed", True, False, True, "last_microbatch", "allocated", "tp", False),
}


@pytest.mark.parametrize("name", sorted(CONVENTIONS))
def test_each_stack_pins_its_memory_conventions_with_a_source(name):
    from dataclasses import astuple

    s = stack(name)
    assert astuple(s.conventions) == CONVENTIONS[name]
    assert set(s.convention_sources) == set(CONVENTION_CHOICES)
    assert all(len(src) > 10 for src in s.convention_sources.values())


def test_every_stack_has_a_pinned_convention():
    assert set(stacks()) == set(CONVENTIONS)


@pytest.mark.parametrize("sharding", ["none", "zero1", "fsdp"])
def test_conventions_come_from_the_stack_not_the_sharding(sharding):
    # KempnerForge without sharding still runs DTensor TP and torch checkpointing (the case the
    # old sharding-based inference priced as Megatron's)
    L = Layout(stack="kempnerforge", sharding=sharding, dp_shard=2 if sharding != "none" else 1, tp=2)
    assert conventions(L) == stack("kempnerforge").conventions
    assert conventions(L.with_stack("megatron")).activations == "megatron"


def test_a_layout_knob_overrides_its_convention():
    L = Layout(stack="nemo")
    assert not conventions(L).grad_reduce_fp32
    assert conventions(L.with_(grad_reduce_fp32=True)).grad_reduce_fp32
    assert conventions(Layout(stack="kempnerforge", fsdp_sync_last_microbatch=False)).grad_sync == "every_microbatch"
    assert conventions(Layout(stack="torchtitan", vocab_parallel_loss=False)).vocab_parallel_loss is False


def test_record_defaults_name_layout_fields_and_registry_recipes():
    # stacks.toml [NAME.record_defaults]: each a Layout field with a source; a precision default is a
    # recipe of the registry (precision.py sits above stacks.py, so the loader cannot check it)
    from dataclasses import fields as dc_fields

    from trainplan.precision import recipe

    names = {f.name for f in dc_fields(Layout)}
    found = [d for s in stacks().values() for d in s.record_defaults]
    assert found
    for d in found:
        assert d.field in names and d.source
        if d.field == "precision":
            assert recipe(d.value).name == d.value
