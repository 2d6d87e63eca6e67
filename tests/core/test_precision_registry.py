"""The precision recipe registry (precision.py + recipes.toml): loaded once, sourced, refuses what a
GPU cannot run, and a new recipe is one data row that memory, step time, the search and the support
checks pick up without code changes."""

from __future__ import annotations

import dataclasses
import re

import pytest

from trainplan import precision
from trainplan.converter_names import CONVERTERS
from trainplan.costs.states import stage_params, state_bytes
from trainplan.errors import TrainplanError
from trainplan.hardware import Cluster, find_gpu, find_node, gpus
from trainplan.hardware.types import ARCH_DTYPES
from trainplan.job import Job, Workload
from trainplan.layout import Layout, check_layout
from trainplan.models import resolve
from trainplan.parsing import read_toml
from trainplan.precision import check_runnable, check_supported, recipe, registry

ROWS = read_toml(precision._FILE)  # the registry's own source: one table per recipe, in file order
KNOWN = tuple(ROWS)


def test_every_recipe_is_loaded_with_a_source_for_its_numbers():
    table = registry()
    assert list(table) == list(KNOWN)  # every row, in file order (the search tries them so)
    for r in table.values():
        src = dict(r.sources)
        assert src.get("bytes") and src.get("archs"), r.name
        if r.low_precision is not None:
            assert src.get("low_precision"), r.name
        if r.low_precision is not None and r.low_precision.converter is None:
            assert "none" in src.get("converter", ""), r.name  # why the trainer refuses it


def test_aliases_of_published_runs_read_as_their_recipe_and_unknown_names_list_the_known_ones():
    aliases = {a: name for name, row in ROWS.items() for a in row.get("aliases", ())}
    assert aliases  # the file has some (fp8, bf16-mixed ...): otherwise this test checks nothing
    for alias, name in aliases.items():
        assert precision.canonical(alias) == name
    assert all(precision.canonical(n) == n for n in KNOWN)
    for read in (precision.canonical, recipe):
        with pytest.raises(TrainplanError) as e:
            read("fp7")
        msg = str(e.value)
        assert "\n" not in msg and all(n in msg for n in KNOWN)


def test_an_alias_past_the_edge_fails_loudly():
    # inside, a recipe is looked up by the name a Layout holds; an alias there skipped canonical
    # somewhere and would leak into the output ("precision": "fp8")
    alias, name = next((a, n) for n, row in ROWS.items() for a in row.get("aliases", ()))
    with pytest.raises(AssertionError, match=f"precision alias {alias!r} reached the planner.*{name}"):
        recipe(alias)


def test_each_recipe_peak_and_ceiling_exist_on_every_catalog_gpu_that_runs_it():
    # a recipe's archs must be ones whose tensor cores multiply its peak dtype, and every catalog GPU
    # of those archs must publish the peak and the measured ceiling the recipe reads
    for r in registry().values():
        for arch in r.archs:
            assert r.peak_key in ARCH_DTYPES[arch] and r.compute_dtype in ARCH_DTYPES[arch], (r.name, arch)
        for g in gpus().values():
            if r.runs_on(g):
                assert r.matmul_ceiling(g) > 0 and r.compute_matmul_ceiling(g) > 0, (r.name, g.name)


@pytest.mark.parametrize("name, gpu, why", [
    ("fp8_tensorwise", "a100", "needs fp8 tensor cores, which a100-sxm-80gb (ampere)"),
    ("fp8_delayed", "a100", "needs fp8 tensor cores"),
    ("mxfp8", "h100", "needs mxfp8 tensor cores, which h100-sxm-80gb (hopper)"),
    ("nvfp4", "h200", "needs nvfp4 tensor cores, which h200-sxm-141gb (hopper)"),
])
def test_a_recipe_the_gpu_cannot_run_is_refused_with_the_reason(name, gpu, why):
    # Transformer Engine support matrix: fp8 per tensor needs cc >= 8.9, MXFP8 / NVFP4 Blackwell
    with pytest.raises(TrainplanError, match=re.escape(why)) as e:
        check_supported(recipe(name), find_gpu(gpu))
    assert "use one of: bf16" in str(e.value)
    check_supported(recipe(name), find_gpu("b200"))  # Blackwell runs them all


# Bytes per parameter of the model states, one replica (no data-parallel sharding):
# * Megatron convention: Megatron-LM docs/source/api-guide/dist_optimizer.md, row "bf16 param, fp32
#   grads": 18 (2 param + 4 grad + 4 main param + 8 Adam); fp8 recipes keep bf16 parameters and fp32
#   main gradients (Megatron Core low-precision guide), so 18 too; pure bf16: 2 + 2 + 2 x 2 = 8.
# * FSDP2 convention (torchtitan MixedPrecisionPolicy(bf16, reduce fp32)): fp32 sharded parameters
#   are the master copy: 4 + 4 + 8 = 16; pure bf16: 8.
BYTES_PER_PARAM = {  # recipe: (megatron, fsdp2)
    "bf16": (18, 16), "fp16": (18, 16), "bf16_pure": (8, 8), "fp8_tensorwise": (18, 16),
    "fp8_rowwise": (18, 16), "fp8_delayed": (18, 16), "mxfp8": (18, 16), "nvfp4": (18, 16),
}
# Bytes per element of the low-precision weight copy (cuDNN block scaling: MXFP8 = 32 e4m3 + one
# e8m0 scale; NVFP4 = 16 e2m1 + one e4m3 scale; per-tensor fp8 = 1).
WEIGHT_BYTES = {"fp8_tensorwise": 1, "fp8_rowwise": 1, "fp8_delayed": 1, "mxfp8": 1 + 1 / 32, "nvfp4": 0.5 + 1 / 16}

KW = {"dp_shard": 1, "cp": 1, "edp_shard": 1, "pp": 1, "optimizer_offload": False}


@pytest.mark.parametrize("name", KNOWN)
def test_bytes_per_parameter_match_the_published_tables(name):
    sp = stage_params(resolve("llama-3.1-8b"), 1, 1, 1)[0]
    r = recipe(name)
    meg = state_bytes(sp, sharding="none", recipe=r, fp8_allgather=False, **KW)
    fsdp = state_bytes(sp, sharding="fsdp", recipe=r, fp8_allgather=False, **KW)
    assert (meg.bytes_per_param, fsdp.bytes_per_param) == BYTES_PER_PARAM[name]
    assert (r.low_precision.weight_bytes if r.low_precision else None) == WEIGHT_BYTES.get(name)
    if r.low_precision:  # --fp8-param-gather: block matmul weights stored in the low-precision format
        gathered = state_bytes(sp, sharding="none", recipe=r, fp8_allgather=True, **KW)
        assert meg.params - gathered.params == pytest.approx((2 - WEIGHT_BYTES[name]) * sp.fp8_linear)


def _row_runs(row: dict) -> bool:
    """What recipes.toml says: no low-precision linears, or a converter that implements them."""
    return "low_precision" not in row or "converter" in row["low_precision"]


def test_only_recipes_with_a_converter_run_in_the_trainer():
    runs = [name for name, row in ROWS.items() if _row_runs(row)]
    refused = [name for name, row in ROWS.items() if not _row_runs(row)]
    assert runs and refused  # both kinds are in the file, so both branches are checked
    for name in runs:
        check_runnable(recipe(name))
    for name in refused:
        with pytest.raises(TrainplanError, match=f"precision '{name}' has no converter in the trainer"):
            check_runnable(recipe(name))


def test_a_row_naming_a_converter_the_runtime_lacks_is_refused_when_the_recipes_load():
    # the runtime's converters are declared torch-free (converter_names.py); recipes.toml names one
    lowp = _fake_row()["low_precision"]
    with pytest.raises(TrainplanError) as e:
        precision.parse({"x": _fake_row(low_precision={**lowp, "converter": "torchao_nvfp4"})})
    assert str(e.value) == (f"recipes.toml [x.low_precision]: unknown converter 'torchao_nvfp4'; the runtime has: "
                            f"{', '.join(CONVERTERS)} (trainplan/converter_names.py)")
    with pytest.raises(TrainplanError, match=r"recipes.toml \[x.low_precision\]: converter '.+' builds converter_recipe "
                                             r".*, not 'blockwise'"):
        precision.parse({"x": _fake_row(low_precision={**lowp, "converter_recipe": "blockwise"})})
    without = {k: v for k, v in lowp.items() if k != "converter_recipe"}
    with pytest.raises(TrainplanError, match="not None"):
        precision.parse({"x": _fake_row(low_precision=without)})


def test_nvfp4_gemms_use_the_fp4_peak_at_the_fp8_measured_fraction():
    # The step-time model, the search's reasons and the validation flags disagreed: compute.py and
    # validation bounded nvfp4 by the fp8 fraction of the fp4 peak, reasons.py looked up an 'fp4'
    # ceiling no GPU publishes and fell back to the bf16 fraction. No FP4 MAMF is published, so
    # the recipe says: the fp4 peak at the fp8 fraction; every consumer reads Recipe.matmul_ceiling.
    b200 = find_gpu("b200")
    nv, f8 = recipe("nvfp4"), recipe("fp8_tensorwise")
    assert nv.peak(b200) == b200.peak_flops["fp4"] == 9000e12
    assert nv.matmul_ceiling(b200) == pytest.approx(9000e12 * b200.matmul_ceiling["fp8"])
    assert nv.matmul_ceiling(b200) / f8.matmul_ceiling(b200) == pytest.approx(2.0)
    assert nv.matmul_ceiling(b200) != pytest.approx(9000e12 * b200.matmul_ceiling["bf16"])


# ---- a new recipe is one data row -------------------------------------------------------------

def _fake_row(**changes) -> dict:
    """recipes.toml's fp8_tensorwise record, renamed: a 6-bit format on Blackwell's fp4 peak."""
    row = read_toml(precision._FILE)["fp8_tensorwise"]
    row = {**row, "aliases": [], "gemm_dtype": "fp6", "peak_key": "fp4", "archs": ["blackwell"],
           "low_precision": {**row["low_precision"], "weight_bytes": 0.75}} | changes
    return row


@pytest.fixture
def with_fp6(monkeypatch):
    table = {**registry(), **precision.parse({"fp6_test": _fake_row()})}
    monkeypatch.setattr(precision, "registry", lambda: table)
    return table["fp6_test"]


def _job(instance="ml.p6-b200.48xlarge"):
    return Job(resolve("llama-3.1-8b"), Cluster(find_node(instance), 1), Workload(8192, 64))


def test_a_new_row_reaches_memory_and_step_time_without_code_changes(with_fp6):
    from trainplan.costs.memory import memory_breakdown
    from trainplan.estimate import estimate

    j = _job()
    base = Layout(dp_shard=8, micro_batch=1, grad_accum=8, ac="selective", precision="fp8_tensorwise")
    new = base.with_(precision="fp6_test")
    check_layout(j, new)
    m8, m6 = memory_breakdown(j, base), memory_breakdown(j, new)
    assert m6.fp8_weights == pytest.approx(m8.fp8_weights * 0.75)  # the row's weight bytes
    g8, g6 = (memory_breakdown(j, L.with_(fp8_allgather=True)) for L in (base, new))
    assert g6.unsharded_params < g8.unsharded_params  # the row's FSDP low-precision all-gather
    # Megatron + Transformer Engine: linears save their input in the row's format for backward
    z8, z6 = (memory_breakdown(j, L.with_(sharding="zero1").with_stack("megatron")) for L in (base, new))
    assert z6.activations < z8.activations
    assert estimate(j, new).tokens_per_s > estimate(j, base).tokens_per_s  # the row's fp4 peak
    e6, e8 = estimate(j, new), estimate(j, base)
    assert e6.mfu > e8.mfu  # the headline MFU: both against the bf16 peak, so the faster row reads higher
    assert e6.mfu_recipe_peak < e8.mfu_recipe_peak  # each against its own peak: the row's fp4 peak is 2x fp8's


def test_a_new_row_reaches_the_search_and_the_support_checks(with_fp6):
    from trainplan.search.engine import precisions
    from trainplan.search.query import Query

    b200, h100 = find_node("ml.p6-b200.48xlarge"), find_node("ml.p5.48xlarge")
    q = Query(resolve("llama-3.1-8b"), (b200,))
    assert "fp6_test" in precisions(q, b200) and "fp6_test" not in precisions(q, h100)
    with pytest.raises(TrainplanError, match="'fp6_test' needs fp6 tensor cores, which h100-sxm-80gb"):
        check_layout(_job("ml.p5.48xlarge"), Layout(dp_shard=8, grad_accum=8, precision="fp6_test"))
    unsearched = dataclasses.replace(with_fp6, searched=False)
    precision.registry()["fp6_test"] = unsearched
    assert "fp6_test" not in precisions(q, b200)


def test_a_malformed_row_is_a_one_line_error_naming_the_key():
    with pytest.raises(TrainplanError, match=r"recipes.toml \[x\]: unknown key 'peak'"):
        precision.parse({"x": _fake_row(peak="fp8")})
    with pytest.raises(TrainplanError, match=r"recipes.toml \[x\]: unknown arch 'volta'"):
        precision.parse({"x": _fake_row(archs=["volta"])})


def test_every_compute_dtype_has_one_torch_name_and_an_unknown_one_is_refused():
    # the tracer and the trainer map a recipe's compute dtype through this one table
    for r in registry().values():
        assert precision.torch_dtype_name(r.compute_dtype) in ("bfloat16", "float16"), r.name
    with pytest.raises(TrainplanError, match="compute dtype 'fp8' has no torch dtype") as e:
        precision.torch_dtype_name("fp8")
    assert "\n" not in str(e.value)
