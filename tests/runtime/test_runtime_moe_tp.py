"""Tensor parallel with MoE models in the trainer (runtime/moe.py apply_ep, parallel.apply_tp):
attention and shared experts split as the dense model's, the routed experts with etp = tp, with
and without sequence parallel. On 4 gloo ranks tp=2 (ep=1 and ep=2; with HSDP, pp, full AC) trains
as tp=1 ep=1 to float rounding (to 1e-6 when computing in float32), every tp rank keeps the same
whole model, and a DCP resume with tp=2 ep=2 (sequence parallel, the demo's) is bit-exact."""


import pytest
from runtime_helpers import read_jsonl, run_worker, torchrun

pytestmark = [pytest.mark.torch, pytest.mark.distributed, pytest.mark.slow]

MOE = {"num_experts": 8, "experts_per_token": 2, "expert_ffn_size": 32, "num_shared_experts": 1,
       "shared_expert_ffn_size": 32}
FREE = dict(MOE, router_score="sigmoid", load_balance="aux_free", num_groups=4, topk_groups=2)
BIAS = dict(MOE, expert_bias=True)  # gpt-oss's per-expert biases: b2 must be added once, after the sum over tp
# The Switch aux loss of a rank's micro-batch (its value depends on how tokens group into micro-batches,
# so its layouts compare with tp2's micro-batch of 4); with etp = 1 each tp rank scores its own shard
AUX = dict(MOE, aux_loss_coef=0.01)
# tp=2 leaves dp=2 of the 4 ranks: a micro-batch of 4 holds the same windows as dp=4 ranks x 2.
# TP2: the norms and residual stream whole on every tp rank; SP2: sequence parallel (each tp rank
# holds 1/tp of the sequence outside the attention and MoE blocks, which gather it).
TP2 = {"tp": 2, "micro_batch": 4, "sequence_parallel": False}
SP2 = {"tp": 2, "micro_batch": 4, "sequence_parallel": True}
AS_RUN = {
    "ep1": {"moe": MOE},
    "tp2": {"moe": MOE, "layout": TP2},
    "tp2_ep2": {"moe": MOE, "layout": {**TP2, "ep": 2}},
    "hsdp_tp2": {"moe": MOE, "layout": {**TP2, "dp_replicate": 2}},
    "free_ep1": {"moe": FREE},
    "free_tp2_ep2_ac": {"moe": FREE, "layout": {**TP2, "ep": 2, "ac": "full"}},
    "bias_ep1": {"moe": BIAS},
    "bias_tp2_ep2": {"moe": BIAS, "layout": {**TP2, "ep": 2}},
    # pp=2 x tp=2 leaves dp=1: 2 micro-batches of 4 hold the 8 windows
    "untied_ep1": {"moe": MOE, "model": {"tied_embeddings": False}},
    "pp2_tp2": {"moe": MOE, "model": {"tied_embeddings": False}, "layout": {**TP2, "pp": 2, "grad_accum": 2}},
    # aux-free balancing under pp: the second step routes with the bias the first step's loads set, so
    # a stage that counted anything but its real routing (pipeline.stage_shapes) trains differently
    "free_untied_ep1": {"moe": FREE, "model": {"tied_embeddings": False}},
    "free_pp2_ep2": {"moe": FREE, "model": {"tied_embeddings": False},
                     "layout": {"pp": 2, "ep": 2, "micro_batch": 2, "grad_accum": 2}},
    "sp_tp2_ep2": {"moe": MOE, "layout": {**SP2, "ep": 2}},
    "sp_hsdp_tp2": {"moe": MOE, "layout": {**SP2, "dp_replicate": 2}},
    "free_sp_tp2_ep2_ac": {"moe": FREE, "layout": {**SP2, "ep": 2, "ac": "full"}},
    "bias_sp_tp2_ep2": {"moe": BIAS, "layout": {**SP2, "ep": 2}},
    "sp_pp2_tp2": {"moe": MOE, "model": {"tied_embeddings": False}, "layout": {**SP2, "pp": 2, "grad_accum": 2}},
    # etp = 1: whole experts, each tp rank routing its sequence shard through an ep group that
    # spans the tp ranks (ep=4 on tp=2 x dp=2; ep=1: the experts' gradients still summed over tp)
    "etp1_tp2": {"moe": MOE, "layout": {**SP2, "etp": 1}},
    "etp1_tp2_ep2": {"moe": MOE, "layout": {**SP2, "etp": 1, "ep": 2}},
    "etp1_tp2_ep4": {"moe": MOE, "layout": {**SP2, "etp": 1, "ep": 4}},
    "etp1_hsdp_tp2": {"moe": MOE, "layout": {**SP2, "etp": 1, "dp_replicate": 2}},
    "free_etp1_tp2_ep2_ac": {"moe": FREE, "layout": {**SP2, "etp": 1, "ep": 2, "ac": "full"}},
    "bias_etp1_tp2_ep4": {"moe": BIAS, "layout": {**SP2, "etp": 1, "ep": 4}},
    "aux_tp2": {"moe": AUX, "layout": TP2},
    "aux_sp_tp2_ep2": {"moe": AUX, "layout": {**SP2, "ep": 2}},
    "aux_etp1_tp2_ep4": {"moe": AUX, "layout": {**SP2, "etp": 1, "ep": 4}},
    "etp1_pp2_tp2": {"moe": MOE, "model": {"tied_embeddings": False},
                     "layout": {**SP2, "etp": 1, "pp": 2, "grad_accum": 2}},
}
# The same layouts computing in float32: tp then changes only the order of float32 sums.
CONFIGS = AS_RUN | {f"fp32_{k}": {**v, "fp32_compute": True} for k, v in AS_RUN.items()}
MATCH = [("tp2", "ep1"), ("tp2_ep2", "ep1"), ("hsdp_tp2", "ep1"), ("free_tp2_ep2_ac", "free_ep1"),
         ("bias_tp2_ep2", "bias_ep1"), ("pp2_tp2", "untied_ep1"), ("free_pp2_ep2", "free_untied_ep1"),
         ("sp_tp2_ep2", "ep1"), ("sp_hsdp_tp2", "ep1"), ("free_sp_tp2_ep2_ac", "free_ep1"),
         ("bias_sp_tp2_ep2", "bias_ep1"), ("sp_pp2_tp2", "untied_ep1"),
         ("etp1_tp2", "ep1"), ("etp1_tp2_ep2", "ep1"), ("etp1_tp2_ep4", "ep1"), ("etp1_hsdp_tp2", "ep1"),
         ("free_etp1_tp2_ep2_ac", "free_ep1"), ("bias_etp1_tp2_ep4", "bias_ep1"), ("aux_sp_tp2_ep2", "aux_tp2"),
         ("aux_etp1_tp2_ep4", "aux_tp2"), ("etp1_pp2_tp2", "untied_ep1")]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return run_worker(tmp_path_factory.mktemp("moe_tp") / "results.json", CONFIGS, nproc=4, timeout=900)


@pytest.mark.parametrize(("name", "base"), MATCH)
def test_tensor_parallel_moe_matches_tp1(results, name, base):
    # float32: the split math is exact, summation order aside (1.8e-7 and 2e-7 seen)
    f32, f32_base = results[f"fp32_{name}"], results[f"fp32_{base}"]
    assert f32["losses"] == pytest.approx(f32_base["losses"], rel=1e-6)
    assert f32["grad_norms"] == pytest.approx(f32_base["grad_norms"], rel=1e-6)
    # bf16 as run: the ffn and attention sums split over two ranks round as the dense model's tp
    # (test_runtime_layouts.py, tp2: 1e-4 and 2e-3; 4.5e-5 and 7.6e-4 seen here)
    assert results[name]["losses"] == pytest.approx(results[base]["losses"], rel=1e-4)
    assert results[name]["grad_norms"] == pytest.approx(results[base]["grad_norms"], rel=2e-3)


def test_every_tp_rank_keeps_the_same_model(results):
    # the router, norms and expert output biases are whole on each tp rank: their gradients must agree
    assert all(results[k]["tp_replicas_agree"] for k in CONFIGS if "tp2" in k)


def test_experts_are_split_over_ep_and_tp(results):
    # w1 is (8 experts, ffn 32, hidden 64). ep1: FSDP over 4 ranks on dim 0. tp2: ffn split over
    # tp, then FSDP over edp=2 on dim 1. tp2_ep2: 4 experts per ep rank, ffn split over tp, edp=1.
    assert [results[k]["expert_w1_local"] for k in ("ep1", "tp2", "tp2_ep2")] == [[2, 32, 64], [8, 8, 64],
                                                                                   [4, 16, 64]]
    # etp = 1: whole experts; ep1: FSDP over edp = dp 2 x tp 2 on dim 1; ep2: 4 experts, edp 2; ep4: 2, edp 1
    assert [results[k]["expert_w1_local"] for k in ("etp1_tp2", "etp1_tp2_ep2", "etp1_tp2_ep4")] == \
        [[8, 8, 64], [4, 16, 64], [2, 32, 64]]


def test_the_aux_loss_is_in_the_gradient(results):
    # the aux-loss configs above compare something: the aux loss adds its gradient to the router's,
    # so the first step's gradient norm is not the one without it
    assert results["fp32_aux_tp2"]["grad_norms"][0] != pytest.approx(results["fp32_tp2"]["grad_norms"][0], rel=1e-6)


def _demo(out, *extra):
    p = torchrun("-m", "trainplan.runtime", "--demo", "--model", "tiny-moe", "--no-progress", "--out", str(out),
                 "--tp", "2", "--ep", "2", *extra, nproc=4, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return [r["loss"] for r in read_jsonl(out / "measurements.jsonl")]


@pytest.mark.parametrize("etp", [(), ("--etp", "1")], ids=["etp=tp", "etp=1"])
def test_tensor_and_expert_parallel_resume_is_bit_exact(tmp_path, etp):
    # The (ep, tp)-split experts (or whole ones, ep spanning the tp ranks), FSDP-sharded over edp, the
    # sequence-parallel norms (Replicate DTensors over tp) and the aux-free bias go through DCP.
    ref = _demo(tmp_path / "ref", "--steps", "4", *etp)
    ck = tmp_path / "ck"
    first = _demo(tmp_path / "a", "--steps", "4", "--checkpoint-dir", str(ck), "--stop-at-step", "2", *etp)
    resumed = _demo(tmp_path / "a", "--steps", "4", "--checkpoint-dir", str(ck), *etp)
    assert len(first) == 2 and resumed == ref


@pytest.mark.parametrize("flag", ["--model", "--ep", "--tp", "--etp"])
def test_demo_layout_flags_reach_the_ranks_and_are_refused_with_a_plan(cli, tmp_path, flag):
    value = "tiny-moe" if flag == "--model" else "1" if flag == "--etp" else "2"
    # ep and etp split routed experts: the demo's dense model refuses them at the edge (runtime/inputs.py)
    model = ("--model", "tiny-moe") if flag in ("--ep", "--etp") else ()
    code, out, err = cli("train", "--nproc", "4", *model, flag, value, "--dry-run", "--out", str(tmp_path / "run"))
    assert code == 0, err
    assert code == 0 and f"{flag} {value}" in out  # passed through to every rank (runtime/args.py)
    plan = tmp_path / "plan.json"
    plan.write_text("{}")
    code, _, err = cli("train", "--plan", str(plan), flag, value)
    assert code == 2 and "--model, --ep, --tp and --etp choose the demo" in err


def test_the_demo_with_tp_is_a_layout_the_trainer_runs():
    from trainplan.errors import TrainplanError
    from trainplan.runtime.demo import TINY_MOE, demo_plan
    from trainplan.supports import refusal

    L = demo_plan(4, model=TINY_MOE, tp=2, ep=2).layout
    assert (L.dp_shard, L.tp, L.ep) == (2, 2, 2) and refusal(L, "cpu", TINY_MOE) is None
    # etp = 1 lets ep span the tp ranks: ep=4 on dp 2 x tp 2
    L = demo_plan(4, model=TINY_MOE, tp=2, ep=4, etp=1).layout
    assert (L.dp_shard, L.ep, L.etp, L.sequence_parallel) == (2, 4, 1, True) and refusal(L, "cpu", TINY_MOE) is None
    with pytest.raises(TrainplanError, match="does not divide the 4 processes"):
        demo_plan(4, model=TINY_MOE, tp=3)


def test_pipeline_tensor_and_expert_parallel_compose_on_eight_ranks(tmp_path):
    # pp=2 x tp=2 x ep=2 on 8 gloo ranks (dp_shard 2 = ep 2 x edp 1 per stage): the stage boundary
    # carries the tp-replicated activations, each stage's experts split over (ep, tp). It trains as
    # tp=1 ep=1 pp=1 on the same 8 ranks and the same 16 windows per step (1.5e-5 seen, bf16 as run;
    # 1e-7 in float32, where the second stage once ran torch's shape inference on an uninitialised
    # buffer, its tp ranks routed it differently and their all-reduce sizes disagreed)
    as_run = {"ep1": {"moe": MOE, "model": {"tied_embeddings": False}},
              "pp2_tp2_ep2": {"moe": MOE, "model": {"tied_embeddings": False},
                              "layout": {**TP2, "pp": 2, "ep": 2, "grad_accum": 2}}}
    configs = as_run | {f"fp32_{k}": {**v, "fp32_compute": True} for k, v in as_run.items()}
    r = run_worker(tmp_path / "results.json", configs, nproc=8, timeout=900)
    assert r["pp2_tp2_ep2"]["losses"] == pytest.approx(r["ep1"]["losses"], rel=1e-4)
    assert r["pp2_tp2_ep2"]["grad_norms"] == pytest.approx(r["ep1"]["grad_norms"], rel=2e-3)
    assert r["fp32_pp2_tp2_ep2"]["losses"] == pytest.approx(r["fp32_ep1"]["losses"], rel=1e-6)
    assert r["fp32_pp2_tp2_ep2"]["grad_norms"] == pytest.approx(r["fp32_ep1"]["grad_norms"], rel=1e-6)
    assert r["pp2_tp2_ep2"]["tp_replicas_agree"] and r["fp32_pp2_tp2_ep2"]["tp_replicas_agree"]
