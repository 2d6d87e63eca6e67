"""The cost model reads a machine profile where it has a table (costs/measured.py) and keeps its
formulas elsewhere; residuals scale the tables; lookups beyond a table are reported."""

from dataclasses import replace

import pytest
from machine_tables import GPU, flat_gemm, machine

from trainplan.costs.comm import FACTORS, span
from trainplan.costs.compute import microbatch_compute
from trainplan.costs.flops import model_flops
from trainplan.costs.steptime import step_time
from trainplan.estimate import estimate
from trainplan.hardware import Cluster, find_gpu, find_node
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.models import resolve
from trainplan.precision import recipe
from trainplan.profile import Profile, default_profile

PRIOR = Profile()


def mb(prof, model="llama-3.1-8b", precision="bf16", **kw):
    m = resolve(model)
    args = {"recipe": recipe(precision), "tokens": 8192, "seq_len": 8192, "tp": 1, "ep": 1,
            "layers_on_stage": m.num_layers, "head_on_stage": True, "recompute_frac": 0.0, "selective": False}
    return microbatch_compute(m, model_flops(m), find_gpu(GPU), prof, **(args | kw))


def _gemm_flops_fwd(model="llama-3.1-8b", tokens=8192):
    mf = model_flops(resolve(model))
    per_token = sum(2 * c * k * n * kind.count for kind in mf.layers for k, n, c, _ in kind.gemms)
    return tokens * (per_token + mf.head_per_token)


def test_a_gemm_table_sets_every_gemm_pass_and_the_residual_scales_it():
    prof = PRIOR.with_machine(machine(flat_gemm(500.0)))
    got = mb(prof)
    # forward + dgrad + wgrad of every linear and the LM head, each 2mnk FLOPs, all at 500 TFLOP/s
    assert got.gemm == pytest.approx(3 * _gemm_flops_fwd() / 500e12)
    half = mb(replace(prof, machine_compute=0.5))
    assert half.gemm == pytest.approx(2 * got.gemm)
    assert half.attention == got.attention == mb(PRIOR).attention  # no attention table: the formula


def test_a_dtype_without_a_table_keeps_the_formula():
    # fp8 linears have no table here: their formula time is the same whatever the bf16 table says;
    # only the LM head (bf16, the compute dtype) reads the table
    slow = mb(PRIOR.with_machine(machine(flat_gemm(100.0))), precision="fp8_tensorwise")
    fast = mb(PRIOR.with_machine(machine(flat_gemm(1000.0))), precision="fp8_tensorwise")
    head = 3 * 8192 * model_flops(resolve("llama-3.1-8b")).head_per_token
    assert slow.gemm - fast.gemm == pytest.approx(head / 100e12 - head / 1000e12)


def test_a_profile_for_another_gpu_changes_nothing():
    other = PRIOR.with_machine(machine(flat_gemm(1.0), gpu="b200-180gb"))
    assert mb(other) == mb(PRIOR)


def test_attention_tables_price_fwd_and_bwd_and_sdpa_on_hopper_pays_the_fa2_factor():
    from trainplan.costs.compute import FA2_ON_NEWER, FA_BWD_FLOP_RATIO

    att = [{"kind": "attention", "pass": p, "causal": True, "kernel": "te", "axes": [], "points": [[v]],
            "source": "a flat test table"} for p, v in (("fwd", 600.0), ("bwd", 400.0))]
    prof = PRIOR.with_machine(machine(*att))
    te, sdpa = mb(prof, te_attention=True), mb(prof, te_attention=False)
    af = te.attention / (1 / 600e12 + FA_BWD_FLOP_RATIO / 400e12)  # forward attention FLOPs
    assert af > 0
    assert sdpa.attention == pytest.approx(te.attention / FA2_ON_NEWER)


def test_outside_grid_lookups_reach_the_estimate():
    tab = {"kind": "gemm", "dtype": "bf16", "axes": ["m", "n", "k"], "source": "a small test grid",
           "points": [[256, 256, 256, 100.0], [1024, 1024, 1024, 400.0]]}
    prof = default_profile().with_machine(machine(tab))
    job = Job(resolve("llama-3.1-8b"), Cluster(find_node("ml.p5.48xlarge"), 1), Workload(8192, 8))
    e = estimate(job, Layout(dp_shard=8, precision="bf16"), prof)
    assert e.machine == "test"
    assert any(o.startswith("gemm dtype=bf16: m=8192 > 1024") for o in e.outside)
    assert e.to_dict()["machine"]["outside_grid"] == list(e.outside)


def test_a_collective_table_sets_the_ledger_time():
    node = find_node("ml.p5.48xlarge")
    tab = {"kind": "collective", "op": "all_gather", "tier": "nvlink", "axes": [], "points": [[100.0]],
           "source": "a flat test table", "latency_us": 5.0}
    prof = default_profile().with_machine(machine(tab))
    job = Job(resolve("llama-3.1-8b"), Cluster(node, 1), Workload(8192, 8))
    lay = Layout(dp_shard=8, precision="bf16")
    r = step_time(job, lay, prof)
    ag = [c for c in r.comm if c.collective == "all_gather"]
    assert ag
    for c in ag:
        per_call = c.bytes / c.count  # S x factor per call
        assert c.seconds / c.count == pytest.approx(max(5e-6, per_call / 100e9))
    # reduce-scatter has no table: NCCL's formula as before
    base = step_time(job, lay, replace(prof, machines=()))
    rs = lambda res: [c.seconds for c in res.comm if c.collective == "reduce_scatter"]
    assert rs(r) == rs(base)
    assert FACTORS["all_gather"](8) == pytest.approx(7 / 8) and span(8, 1, node).tier == "nvlink"


def test_b200_uses_its_packaged_profile_by_default():
    job = Job(resolve("llama-3.1-70b"), Cluster(find_node("ml.p6-b200.48xlarge"), 1), Workload(8192, 8))
    lay = Layout(dp_shard=8, precision="bf16", ac="full")
    e = estimate(job, lay)
    assert e.machine == "b200-published"
    bare = estimate(job, lay, replace(default_profile(), machines=()))
    assert bare.machine is None and bare.step_time_s != e.step_time_s
