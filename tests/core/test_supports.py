"""trainplan/supports.py: what the reference trainer runs as costed, and the one-line refusals.

The done-when of issue 11 part 4, per stack preset: a layout run by the trainer with that preset's
settings passes exactly when every setting is one the trainer implements (its own preset's value,
which the cost model prices for stack trainplan), and is refused naming the first other one.
"""

import subprocess
import sys
from dataclasses import replace

import pytest

from trainplan.errors import TrainplanError
from trainplan.hardware import Cluster, find_node
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.models import resolve
from trainplan.plan import Plan
from trainplan.stacks import SETTINGS, stack, stacks
from trainplan.supports import TRAINER_STACK, check_runnable, implemented, refusal


def test_supports_imports_without_torch():
    code = ("import sys; sys.modules['torch'] = None; import trainplan.supports, trainplan.search.capability; "
            "assert 'torch' not in [m for m in sys.modules if sys.modules[m] is not None]")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 0, p.stderr


def test_the_trainers_own_preset_is_what_it_implements():
    # The cost model prices stack trainplan with this preset; the trainer runs each of its values.
    preset = stack(TRAINER_STACK).execution
    runs = implemented()
    assert all(getattr(preset, k) == runs[k][0] for k in SETTINGS)
    assert refusal(Layout(), "cuda") is None and refusal(Layout(), "cpu") is None


@pytest.mark.parametrize("name", sorted(stacks()))
def test_per_preset_the_trainer_runs_what_it_implements_and_refuses_the_rest(name):
    settings = stack(name).execution.to_dict()
    runs = implemented()
    foreign = [k for k in SETTINGS if settings[k] not in runs[k]]
    layout = Layout().with_stack(TRAINER_STACK, **settings)  # the trainer, asked for these settings
    r = refusal(layout, "cuda")
    if foreign:
        k = foreign[0]
        assert r is not None and f"does not implement {k}=" in r.reason and r.stack == "megatron", r
    else:
        assert r is None
    # a plan costed for the stack itself is not the trainer's to run
    theirs = refusal(Layout().with_stack(name), "cuda")
    assert (theirs is None) == (name == TRAINER_STACK)
    if theirs is not None:
        assert f"costed for stack {name!r}" in theirs.reason


def test_megatron_and_nemo_ask_for_settings_the_trainer_does_not_run():
    # pins that the loop above exercises refusals, not only passes
    assert refusal(Layout().with_stack(TRAINER_STACK, **stack("nemo").execution.to_dict()), "cuda") is not None
    assert refusal(Layout().with_stack(TRAINER_STACK, **stack("megatron").execution.to_dict()), "cuda") is not None


@pytest.mark.parametrize("settings, key", [
    ({"tp_comm_overlap": True}, "tp_comm_overlap"), ({"cuda_graphs": True}, "cuda_graphs"),
    ({"moe_dispatcher": "deepep"}, "moe_dispatcher"), ({"cp_comm": "p2p"}, "cp_comm"),
    ({"cp_comm": "a2a"}, "cp_comm"), ({"power_limit_w": 700.0}, "power_limit_w"),
    ({"cross_entropy": "fused"}, "cross_entropy"), ({"grad_reduce_overlap": False}, "grad_reduce_overlap"),
    ({"ep_comm_overlap": True}, "ep_comm_overlap"),  # Megatron-Core batch-level EP overlap: not in runtime/moe.py
    ({"moe_capacity_factor": 1.0, "moe_pad_to_capacity": True}, "moe_pad_to_capacity"),  # runtime/moe.py drops only
])
def test_settings_the_trainer_does_not_implement_are_refused(settings, key):
    with pytest.raises(TrainplanError, match=f"does not implement {key}="):
        check_runnable(Layout().with_stack(TRAINER_STACK, **settings), "cuda")


@pytest.mark.parametrize("layout, device, words", [
    (Layout(cp=2), "cpu", "cp needs CUDA"),
    (Layout(precision="mxfp8"), "cuda", "no converter"),
    (Layout(precision="nvfp4"), "cuda", "no converter"),
    (Layout(tp=2, precision="fp8_tensorwise"), "cpu", "set sequence_parallel false"),  # gloo: no float8
    (Layout(tp=2, sequence_parallel=False, vocab_parallel_loss=True), "cuda", "vocab_parallel_loss false"),
    (Layout(tp=2, sequence_parallel=False, vocab_parallel_loss=False, precision="fp8_rowwise"), "cuda",
     "fp8_tensorwise"),
    (Layout(pp=2, chunked_loss=True), "cuda", "chunked loss"),
    (Layout(pp=2, cp=2), "cuda", "pp > 1 together with cp > 1"),
    (Layout(sharding="zero1", dp_shard=2, tp=2, sequence_parallel=False, vocab_parallel_loss=False), "cuda",
     "tp = pp = cp = ep = 1"),
    (Layout(sharding="zero1", dp_shard=2, ep=2), "cuda", "tp = pp = cp = ep = 1"),
    (Layout(sharding="zero1", dp_shard=2), "cuda", "param_gather_overlap=false"),
    (Layout(compiled_loss=True), "cuda", "fused cross-entropy"),
    (Layout().with_stack(TRAINER_STACK, cross_entropy="chunked"), "cuda", "chunked_loss true"),
])
def test_what_the_trainer_cannot_honour_is_one_line(layout, device, words):
    r = refusal(layout, device)
    assert r is not None and words in r.reason and "\n" not in r.reason


def test_what_the_trainer_runs_passes():
    for L in (Layout(cp=2), Layout(chunked_loss=True), Layout(pp=2), Layout(sharding="zero2", dp_shard=2),
              Layout(sharding="zero1", dp_shard=2).with_stack(TRAINER_STACK, param_gather_overlap=False),
              Layout(tp=2, sequence_parallel=False, vocab_parallel_loss=False, precision="fp8_tensorwise"),
              Layout(tp=2), Layout(tp=2, precision="fp8_tensorwise"),  # sequence parallel (parallel.apply_tp)
              Layout(precision="fp16"), Layout(precision="bf16_pure")):
        assert refusal(L, "cuda") is None, L.short()


def test_the_trainer_runs_any_capacity_factor():
    # runtime/build.py gives the plan's factor to every MoE layer (tests/runtime/test_runtime_moe.py)
    for c in (None, 0.5, 1.25, 4.0):
        assert refusal(Layout(ep=8, dp_shard=8).with_stack(TRAINER_STACK, moe_capacity_factor=c), "cpu",
                       resolve("qwen3-30b-a3b")) is None


def test_expert_parallel_runs_on_the_trainers_own_model_only():
    L = Layout(ep=8, dp_shard=8)
    assert refusal(L, "cuda") is None and refusal(L, "cpu", resolve("qwen3-30b-a3b")) is None
    r = refusal(L, "cuda", resolve("deepseek-v3"))  # MLA: only the HF model, which has no ep
    assert "multi-head latent attention" in r.reason and r.stack == "megatron"
    assert refusal(Layout(), "cuda", resolve("deepseek-v3")) is None
    for other in (Layout(cp=2), Layout(pp=2), Layout(tp=2, sequence_parallel=False, vocab_parallel_loss=False)):
        assert "--hf" in refusal(other, "cuda", resolve("deepseek-v3")).reason  # the HF model has none


def test_tensor_parallel_runs_moe_models_with_the_experts_split_over_tp():
    # runtime/moe.apply_ep: the routed experts split over tp too (etp = tp), with or without ep
    moe = resolve("qwen3-30b-a3b")
    for L in (Layout(tp=2, sequence_parallel=False, vocab_parallel_loss=False),
              Layout(tp=2, ep=2, dp_shard=2, sequence_parallel=False, vocab_parallel_loss=False),
              Layout(tp=2), Layout(tp=2, ep=2, dp_shard=2)):  # with sequence parallel too
        assert refusal(L, "cuda", moe) is None and refusal(L, "cpu", moe) is None
    # what the trainer's tp does not do is still refused for MoE models as for dense ones
    assert "vocab_parallel_loss false" in refusal(Layout(tp=2, ep=2, dp_shard=2, vocab_parallel_loss=True),
                                                  "cuda", moe).reason


def test_fp16_loss_scaling_with_an_moe_aux_loss_is_refused():
    # runtime/moe.py injects the aux loss's gradient at a fixed scale, which dynamic loss scaling would shrink
    moe = resolve("qwen3-30b-a3b")
    aux = replace(moe, moe=replace(moe.moe, load_balance="aux_loss", aux_loss_coef=0.001))
    r = refusal(Layout(precision="fp16"), "cuda", aux)
    assert r is not None and "auxiliary loss" in r.reason and "\n" not in r.reason
    assert refusal(Layout(precision="bf16"), "cuda", aux) is None
    assert refusal(Layout(precision="fp16"), "cuda", replace(aux, moe=replace(aux.moe, aux_loss_coef=0.0))) is None
    assert refusal(Layout(precision="fp16"), "cuda", resolve("llama-3.1-8b")) is None


def test_launch_refuses_a_plan_the_trainer_cannot_run():
    from trainplan.launch import render
    from trainplan.launch.base import LaunchOptions
    from trainplan.launch.local import LocalOptions

    node = find_node("ml.p5.48xlarge")
    L = Layout(ep=8, dp_shard=8, micro_batch=1)
    mla = Plan(Job(resolve("deepseek-v3"), Cluster(node, 1), Workload(seq_len=4096, global_batch=8)), L)
    with pytest.raises(TrainplanError, match="no expert, context, tensor or pipeline parallelism"):
        render("local", mla, LaunchOptions(plan_path="plan.json"))
    plan = Plan(Job(resolve("qwen3-30b-a3b"), Cluster(node, 1), Workload(seq_len=4096, global_batch=8)), L)
    assert render("local", plan, LaunchOptions(plan_path="plan.json")).text  # the trainer's own ep
    # a plan for another stack is that stack's framework's to run: the remote targets render its job
    # (tests/launch/test_framework_launch.py); the local target, trainplan's trainer, refuses it
    other = replace(mla, layout=L.with_stack("megatron"))
    with pytest.raises(TrainplanError, match="launch local runs trainplan's own trainer.*stack 'megatron'"):
        render("local", other, LaunchOptions(plan_path="plan.json"))
    # the device decides for cp: refused on CPU, rendered for GPUs
    cp = replace(plan, layout=Layout(cp=2, dp_shard=4, micro_batch=2))
    with pytest.raises(TrainplanError, match="cp needs CUDA"):
        render("local", cp, LocalOptions(plan_path="plan.json", device="cpu"))
    assert render("local", cp, LocalOptions(plan_path="plan.json", device="cuda")).text


def test_estimate_costs_tensor_parallel_as_the_trainer_runs_it(cli):
    import json

    from trainplan.layout import layout_from_dict

    args = ("estimate", "--model", "llama-3.1-70b", "--instance", "ml.p6-b200.48xlarge", "--tp", "8", "--json")
    code, text, err = cli(*args)
    assert code == 0, err
    L = json.loads(text)["layout"]
    assert (L["sequence_parallel"], L["vocab_parallel_loss"]) == (True, False)  # the LM head whole on each tp rank
    assert refusal(layout_from_dict(L), "cuda") is None  # the trainer runs what estimate costed
    code, text, err = cli(*args, "--stack", "megatron")
    assert code == 0 and json.loads(text)["layout"]["sequence_parallel"] is True


def test_the_trainer_runs_experts_split_over_tp_or_whole():
    # etp = tp (each expert split over the tp ranks) or etp = 1 with sequence parallel (whole experts,
    # each tp rank routing its shard); Megatron-Core's etp between the two is refused before anything starts
    moe = resolve("qwen3-30b-a3b")
    whole = Layout(tp=2, dp_shard=4, ep=2, etp=1, vocab_parallel_loss=False)
    for ok in (whole, whole.with_(etp=None), whole.with_(etp=2), whole.with_(etp=2, sequence_parallel=False)):
        assert refusal(ok, "cuda", moe) is None and refusal(ok, "cpu", moe) is None, ok.short()
    r = refusal(whole.with_(sequence_parallel=False), "cuda", moe)
    assert "etp=1 with tp=2 routes each tp rank's own sequence shard: set sequence_parallel true" in r.reason
    between = Layout(tp=4, dp_shard=2, ep=2, etp=2, vocab_parallel_loss=False)
    r = refusal(between, "cuda", moe)
    assert r is not None and "not etp=2" in r.reason and r.stack == "megatron"
    assert "not etp=2" in refusal(between, "cuda").reason  # an etp the plan states, without the model
    assert refusal(between, "cuda", resolve("llama-3.1-8b")) is None  # no experts: etp means nothing


def test_a_model_the_trainers_own_decoder_does_not_build_runs_only_through_its_hf_code():
    # the planner costs gpt-oss's sinks and 128-token windows and Gemma 2's four norms per layer;
    # runtime/model.py builds none of them, so a plan for them runs only through --hf (data parallel)
    from trainplan.supports import check_own_model, own_model_gaps

    assert own_model_gaps(resolve("gpt-oss-120b")) == ("attention sinks", "sliding-window attention")
    assert own_model_gaps(resolve("gemma-2-9b")) == ("sliding-window attention", "4 norms per layer")
    assert own_model_gaps(resolve("deepseek-v3")) == ("multi-head latent attention",)
    assert own_model_gaps(resolve("llama-3.1-8b")) == () == own_model_gaps(resolve("qwen3-30b-a3b"))
    r = refusal(Layout(ep=8, dp_shard=8), "cuda", resolve("gpt-oss-120b"))
    assert r.stack == "megatron" and r.reason.startswith(
        "gpt-oss-120b's attention sinks, sliding-window attention run in the trainer only through its Hugging Face")
    r = refusal(Layout(tp=2, sequence_parallel=False, vocab_parallel_loss=False), "cuda", resolve("gemma-2-9b"))
    assert "sliding-window attention, 4 norms per layer run" in r.reason and "(plan has tp=2)" in r.reason
    assert refusal(Layout(dp_shard=8), "cuda", resolve("gpt-oss-120b")) is None  # --hf runs it
    with pytest.raises(TrainplanError, match="gpt-oss-120b uses attention sinks, sliding-window attention, which "
                                             "trainplan's own model does not build; run it through its Hugging"):
        check_own_model(resolve("gpt-oss-120b"))
    check_own_model(resolve("llama-3.1-8b"))
