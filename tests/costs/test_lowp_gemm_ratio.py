"""Low-precision GEMMs on one footing with bf16 (costs/measured.py): a machine profile with bf16 rows
and a cited fp8:bf16 ratio prices fp8 as bf16 rows x ratio, capped at the fp8 ceiling; fp8 rows of its
own win; the estimate says so and widens its band by the ratio table's leave-one-out error."""

from dataclasses import replace

import pytest
from machine_tables import GPU, flat_gemm, machine

from trainplan.costs.compute import microbatch_compute
from trainplan.costs.flops import model_flops
from trainplan.estimate import estimate
from trainplan.hardware import Cluster, find_gpu, find_node
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.machine.profile import packaged
from trainplan.models import resolve
from trainplan.models.layers import model_features
from trainplan.precision import recipe, registry
from trainplan.profile import Profile, default_profile

PRIOR = Profile()


def ratio(points, dtype="fp8", axes=()):
    return {"kind": "gemm_ratio", "dtype": dtype, "over": "bf16", "axes": list(axes), "points": points,
            "source": "a test ratio"}


def mb(prof, precision="fp8_tensorwise"):
    m = resolve("llama-3.1-8b")
    return microbatch_compute(m, model_flops(m), find_gpu(GPU), prof, recipe=recipe(precision), tokens=8192,
                              seq_len=8192, tp=1, ep=1, layers_on_stage=m.num_layers, head_on_stage=True,
                              recompute_frac=0.0, selective=False)


def _flops():
    """(linear layers', LM head's) forward FLOPs of the micro-batch."""
    mf = model_flops(resolve("llama-3.1-8b"))
    linears = sum(2 * c * k * n * kind.count for kind in mf.layers for k, n, c, _ in kind.gemms)
    return 8192 * linears, 8192 * mf.head_per_token


def test_fp8_without_rows_of_its_own_runs_at_the_bf16_rows_times_the_ratio():
    got = mb(PRIOR.with_machine(machine(flat_gemm(500.0), ratio([[1.5]]))))
    linears, head = _flops()
    # every pass of every linear at 500 x 1.5; the LM head stays bf16 at 500
    assert got.gemm == pytest.approx(3 * linears / 750e12 + 3 * head / 500e12)
    assert len(got.derived) == 1 and got.derived[0].startswith("fp8 GEMMs priced as bf16 measured x cited fp8:bf16 ratio")
    assert mb(PRIOR.with_machine(machine(flat_gemm(500.0), ratio([[1.5]]))), "bf16").derived == ()


def test_fp8_rows_of_its_own_win_over_the_ratio():
    got = mb(PRIOR.with_machine(machine(flat_gemm(500.0), flat_gemm(900.0, "fp8"), ratio([[1.5]]))))
    linears, head = _flops()
    assert got.gemm == pytest.approx(3 * linears / 900e12 + 3 * head / 500e12)
    assert got.derived == () and got.derived_error == 0.0


def test_the_ratio_never_lifts_a_gemm_past_the_dtypes_ceiling():
    gpu = find_gpu(GPU)
    ceiling = recipe("fp8_tensorwise").matmul_ceiling(gpu)
    got = mb(replace(PRIOR, machine_compute=1.2).with_machine(machine(flat_gemm(500.0), ratio([[100.0]]))))
    linears, head = _flops()
    assert got.gemm == pytest.approx(3 * linears / ceiling + 3 * head / (500e12 * 1.2))


def test_the_band_widens_by_the_ratio_tables_leave_one_out_error():
    job = Job(resolve("llama-3.1-8b"), Cluster(find_node("ml.p5.48xlarge"), 1), Workload(8192, 8))
    lay = Layout(dp_shard=8, precision="fp8_tensorwise")
    table = ratio([[1024, 1.2], [4096, 1.9], [16384, 1.6]], axes=["m"])
    base = default_profile().with_machine(machine(flat_gemm(600.0)))
    with_ratio = default_profile().with_machine(machine(flat_gemm(600.0), table))
    loo = with_ratio.machine_for(GPU).find("gemm_ratio", dtype="fp8", over="bf16").grid.loo_error
    assert loo > 0
    e0, e1 = estimate(job, lay, base), estimate(job, lay, with_ratio)
    err = e0.band[1] / e0.tokens_per_s_per_gpu - 1  # the out-of-sample band of runs like it (band.py) ...
    assert err == pytest.approx(base.throughput_band("hopper", False, 8, lay.stack, model_features(job.model)).error)
    assert e1.band[1] / e1.tokens_per_s_per_gpu - 1 == pytest.approx(err + loo)  # ... plus the ratio's error
    assert e1.derived and not e0.derived
    assert e1.to_dict()["machine"]["derived"] == list(e1.derived)


def test_routed_experts_without_fp8_grouped_rows_run_at_the_bf16_grouped_rows_times_the_ratio():
    grouped = [{"kind": "grouped_gemm", "dtype": "bf16", "pass": p, "axes": [], "points": [[400.0]],
                "source": "a flat test table"} for p in ("fwd", "dgrad", "wgrad")]
    m = resolve("mixtral-8x7b")
    def run(*tables):
        return microbatch_compute(m, model_flops(m), find_gpu(GPU), PRIOR.with_machine(machine(*tables)),
                                  recipe=recipe("fp8_tensorwise"), tokens=4096, seq_len=4096, tp=1, ep=1,
                                  layers_on_stage=m.num_layers, head_on_stage=False, recompute_frac=0.0,
                                  selective=False)
    plain, doubled = run(flat_gemm(500.0), *grouped, ratio([[1.0]])), run(flat_gemm(500.0), *grouped, ratio([[2.0]]))
    assert doubled.gemm == pytest.approx(plain.gemm / 2)  # every linear, the experts' grouped GEMMs too


def test_every_low_precision_recipe_on_b200_is_priced_on_the_bf16_rows_footing():
    """The packaged B200 profile has bf16 GEMM rows; each low-precision dtype a B200 runs has rows of
    its own or a cited ratio over its compute dtype, so no bf16-vs-fp8 choice is made table against formula."""
    b200 = next(p for p in packaged() if p.gpu == "b200-180gb")
    gpu = find_gpu("b200-180gb")
    for r in registry().values():
        if r.low_precision is None or not r.runs_on(gpu):
            continue
        assert b200.find("gemm", dtype=r.gemm_dtype) or b200.find("gemm_ratio", dtype=r.gemm_dtype,
                                                                  over=r.compute_dtype), r.name


def test_fp8_over_bf16_on_b200_lies_between_no_gain_and_the_peak_ratio():
    b200 = next(p for p in packaged() if p.gpu == "b200-180gb")
    t = b200.find("gemm_ratio", dtype="fp8", over="bf16")
    gpu = find_gpu("b200-180gb")
    peak_ratio = gpu.peak("fp8") / gpu.peak("bf16")
    assert all(0.9 < v < peak_ratio for v in t.grid.values)
