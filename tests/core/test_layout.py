"""Layout checks: impossible layouts are refused with a one-line message that says what to change."""

import pytest

from trainplan.errors import TrainplanError
from trainplan.hardware import cluster
from trainplan.job import Job, Workload
from trainplan.layout import Layout, check_layout, expert_groups, layout_from_dict
from trainplan.models.spec import ModelSpec, MoESpec

LLAMA8B = ModelSpec(name="llama-3.1-8b", model_type="llama", num_layers=32, hidden_size=4096,
                    num_heads=32, num_kv_heads=8, head_dim=128, ffn_size=14336, vocab_size=128256)
MOE = ModelSpec(name="moe", model_type="mixtral", num_layers=32, hidden_size=4096, num_heads=32,
                num_kv_heads=8, head_dim=128, ffn_size=0, vocab_size=32000,
                moe=MoESpec(num_experts=8, experts_per_token=2, expert_ffn_size=14336))


def job(model=LLAMA8B, instance="ml.p5.48xlarge", nodes=1, seq=4096, gb=8):
    return Job(model, cluster(instance, nodes), Workload(seq, gb))


def test_a_sensible_layout_passes():
    check_layout(job(), Layout(dp_shard=8, micro_batch=1, grad_accum=1))
    check_layout(job(nodes=2, gb=16), Layout(dp_replicate=2, dp_shard=4, tp=2, micro_batch=1, grad_accum=2))


@pytest.mark.parametrize("layout, message", [
    (Layout(dp_shard=4), "= 4 GPUs but the cluster has 8"),
    (Layout(tp=16, dp_shard=1), "larger than the NVLink domain"),
    (Layout(tp=3, dp_shard=1), "does not divide the 32 attention heads"),
    (Layout(dp_shard=8, precision="mxfp8"), "needs mxfp8 tensor cores"),
    (Layout(dp_replicate=8, dp_shard=1, sharding="none", micro_batch=2), "global batch 8 != micro_batch*grad_accum*dp"),
    (Layout(dp_shard=8, sharding="none"), "sharding 'none' needs dp_shard = 1"),
    (Layout(dp_shard=8, ac="partial", ac_layers=0), "ac 'partial' needs 1 <= ac_layers"),
    (Layout(dp_shard=8, ep=2), "has no experts"),
    (Layout(dp_shard=8, fp8_allgather=True), "fp8_allgather needs a low-precision recipe"),
    (Layout(dp_shard=1, pp=8, vp=2), "vp=2 needs pp_schedule 'interleaved'"),
])
def test_impossible_layouts_are_refused(layout, message):
    with pytest.raises(TrainplanError) as e:
        check_layout(job(), layout)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_fp8_refused_on_a100_with_the_recipes_it_can_run():
    with pytest.raises(TrainplanError, match=r"'fp8_tensorwise' needs fp8 tensor cores.*use one of: bf16, bf16_pure, fp16"):
        check_layout(job(instance="ml.p4de.24xlarge"), Layout(dp_shard=8, precision="fp8_tensorwise"))


def test_expert_parallel_must_divide_experts_and_dp():
    check_layout(job(MOE), Layout(dp_shard=8, ep=8))
    with pytest.raises(TrainplanError, match="ep=16 does not divide the 8 experts"):
        check_layout(job(MOE, nodes=2, gb=16), Layout(dp_shard=16, ep=16))


def test_cp_must_divide_sequence():
    check_layout(job(seq=4096, gb=1), Layout(cp=8))
    with pytest.raises(TrainplanError, match="cp=8 does not divide the sequence length 4100"):
        check_layout(job(seq=4100, gb=1), Layout(cp=8))


def test_layout_from_dict_rejects_unknown_keys_and_bad_types():
    assert layout_from_dict({"tp": 2, "ac": "full"}) == Layout(tp=2, ac="full")
    with pytest.raises(TrainplanError, match="unknown key 'tensor_parallel'; allowed keys: ac, ac_layers"):
        layout_from_dict({"tensor_parallel": 2})
    with pytest.raises(TrainplanError, match="tp must be an integer, got '2'"):
        layout_from_dict({"tp": "2"})
    with pytest.raises(TrainplanError, match="chunked_loss must be true or false"):
        layout_from_dict({"chunked_loss": 1})


# ---- the layout string (Layout.short / parse_layout) -------------------------------------------
_OTHER_STR = {"precision": "fp8_rowwise", "ac": "selective", "sharding": "zero1", "pp_schedule": "gpipe",
              "stack": "torchtitan"}


def _changed(name, default):
    if name == "etp":  # an integer whose None is the stack's default
        return 2
    if default is None:  # a convention knob (None: the stack's), set explicitly
        return False
    if isinstance(default, bool):
        return not default
    if isinstance(default, int):
        return default + 2
    return _OTHER_STR[name]


@pytest.mark.parametrize("name", [f.name for f in __import__("dataclasses").fields(Layout)
                                  if f.name != "execution"])
def test_every_field_that_differs_from_its_default_round_trips(name):
    from trainplan.layout import parse_layout

    L = Layout(**{name: _changed(name, getattr(Layout(), name))})
    assert parse_layout(L.short()) == L, L.short()


def test_every_execution_setting_that_differs_from_the_preset_round_trips():
    from trainplan.layout import parse_layout
    from trainplan.stacks import CHOICES, SETTINGS

    base = Layout(pp=2, vp=2, pp_schedule="interleaved").with_stack("megatron")  # pp_p2p_overlap applies
    for key in SETTINGS:
        v = getattr(base.execution, key)
        new = (not v if isinstance(v, bool) else 650.0 if key == "power_limit_w"
               else 1.25 if key in ("moe_imbalance", "moe_capacity_factor") else next(c for c in CHOICES[key] if c != v))
        L = base.with_stack("megatron", **{key: new})
        assert parse_layout(L.short()) == L, L.short()
        assert f"{key}=" in L.short() and "stack=megatron" in L.short()


@pytest.mark.parametrize("text,message", [
    ("", "empty layout"),
    ("bf16 mb=two", "'mb=two' must be an integer"),
    ("bf16 dp=8(fsdp)", "expected dp=REPLICATExSHARD(SHARDING)"),
    ("bf16 fp8_allgather=yes", "'fp8_allgather=yes' must be true or false"),
    ("bf16 colour=blue", "unknown key 'colour'"),
    ("bf16 zigzag", "cannot read 'zigzag'"),
])
def test_a_malformed_layout_string_is_a_one_line_error(text, message):
    from trainplan.layout import parse_layout

    with pytest.raises(TrainplanError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_layout(text)


# ---- expert tensor parallelism (etp) ------------------------------------------------------------
def test_etp_round_trips_through_the_layout_string_and_a_dict():
    from trainplan.layout import parse_layout

    for etp in (1, 4, None):
        L = Layout(tp=4, dp_shard=2, ep=2, etp=etp)
        assert parse_layout(L.short()) == L and layout_from_dict(L.to_dict()) == L
        assert ("etp=" in L.short()) == (etp is not None) and ("etp" in L.to_dict()) == (etp is not None)
    assert parse_layout("bf16 ac=none mb=1 ga=1 dp=1x2(fsdp) tp=4 etp=null").etp is None
    with pytest.raises(TrainplanError, match="etp must be an integer or null, got '2'"):
        layout_from_dict({"etp": "2"})
    with pytest.raises(TrainplanError, match="etp must be an integer or null, got True"):
        layout_from_dict({"etp": True})


@pytest.mark.parametrize("layout, message", [
    (Layout(tp=4, dp_shard=2, etp=2), "etp=2 with tp=4: trainplan folds the experts with etp = 1 or etp = tp"),
    (Layout(tp=4, dp_shard=2, etp=3, stack="megatron"), "etp=3 with tp=4: etp must divide tp"),
    (Layout(tp=4, dp_shard=2, etp=2, stack="megatron", sequence_parallel=False), "etp=2 with tp=4 needs sequence_parallel"),
    (Layout(tp=4, dp_shard=2, etp=0), "etp must be a positive integer or null, got 0"),
    (Layout(tp=2, dp_shard=4, etp=1, sequence_parallel=False), "etp=1 with tp=2 needs sequence_parallel"),
    (Layout(tp=2, dp_shard=4, ep=8, etp=2), "ep=8 must divide dp_shard*cp = 4 (etp=2)"),
])
def test_an_expert_folding_trainplan_does_not_model_is_refused(layout, message):
    with pytest.raises(TrainplanError) as e:
        check_layout(job(MOE), layout)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_megatron_runs_an_expert_tensor_parallel_size_between_one_and_tp():
    # Megatron-Core folds the experts with any etp inside the tp group: tp=4 etp=2 ep=4 on 8 ranks
    # leaves edp 1; each rank holds half of each of its quarter of the experts
    L = Layout(tp=4, dp_shard=2, ep=4, etp=2, sequence_parallel=True, stack="megatron", micro_batch=4)
    check_layout(job(MOE), L)
    g = expert_groups(L)
    assert (g.weight_split, g.edp_shard, g.ep_stride, g.routed_share) == (8, 1, 2, 0.5)


def test_etp_one_lets_ep_take_the_tp_ranks():
    check_layout(job(MOE), Layout(tp=2, dp_shard=4, ep=8, etp=1, micro_batch=2))  # 4 x 2 ranks, 8 experts


def test_sequence_parallel_needs_tp_to_divide_each_ranks_sequence():
    # each tp rank holds an equal 1/tp of the (cp-local) sequence between the tp regions
    with pytest.raises(TrainplanError) as e:
        check_layout(job(seq=4098), Layout(tp=4, dp_shard=2, micro_batch=4))
    assert "tp=4, which does not divide them" in str(e.value) and "\n" not in str(e.value)
    check_layout(job(seq=4098), Layout(tp=4, dp_shard=2, micro_batch=4, sequence_parallel=False))
    check_layout(job(seq=4096), Layout(tp=4, dp_shard=2, micro_batch=4))
