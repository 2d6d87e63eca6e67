"""The trainer runs a recipe from the registry's fields (compute dtype, master copy, loss scaling,
converter), and refuses one it has no converter for before building anything."""

from dataclasses import replace

import pytest
import torch

from trainplan import precision
from trainplan.errors import TrainplanError
from trainplan.parsing import read_toml
from trainplan.precision import recipe, registry
from trainplan.runtime import converters, parallel
from trainplan.runtime.build import build_model
from trainplan.runtime.demo import demo_plan
from trainplan.runtime.dtypes import torch_dtype
from trainplan.runtime.trainer import make_scaler

pytestmark = [pytest.mark.torch]

RUNNABLE = [r.name for r in registry().values() if r.runnable]
REFUSED = [r.name for r in registry().values() if not r.runnable]


def test_the_registry_has_recipes_of_both_kinds():
    # from recipes.toml itself: a row runs without low-precision linears or with a declared converter
    rows = read_toml(precision._FILE)
    runs = [n for n, row in rows.items() if "low_precision" not in row or "converter" in row["low_precision"]]
    assert RUNNABLE == runs
    assert RUNNABLE and REFUSED and set(RUNNABLE) | set(REFUSED) == set(rows)


@pytest.mark.parametrize("name", REFUSED)
def test_a_recipe_without_a_converter_is_refused_before_the_model_is_built(name):
    # mesh=None: the refusal comes before anything touches a device mesh or a process group. The demo
    # plan itself refuses a recipe its GPU cannot run (check_layout), so the recipe is put into a
    # bf16 demo's layout: the trainer's own refusal is what this pins.
    plan = demo_plan(1)
    plan = replace(plan, layout=replace(plan.layout, precision=name))
    with pytest.raises(TrainplanError, match=f"precision '{name}' has no converter in the trainer") as e:
        build_model(plan, None, torch.device("cpu"), use_hf=False)
    assert "\n" not in str(e.value) and "bf16" in str(e.value)


@pytest.mark.parametrize("name", RUNNABLE)
def test_fsdp_policy_autocast_and_scaler_follow_the_recipe_fields(name):
    r = recipe(name)
    compute = torch_dtype(r.compute_dtype)
    policy = parallel.mp_policy(name)
    if r.pure:  # the parameters themselves are in the compute dtype: nothing to cast
        assert policy.param_dtype is None and policy.reduce_dtype is None
    else:
        assert policy.param_dtype == compute and policy.reduce_dtype == torch.float32
    with parallel.forward_context(name, "none", "cpu", fsdp=False)():
        assert torch.is_autocast_enabled("cpu") == (not r.pure)
        if not r.pure:
            assert torch.get_autocast_dtype("cpu") == compute
    assert (make_scaler(name, torch.device("cpu"), fsdp=False) is not None) == r.loss_scaling


def test_float8_converter_recipe_and_its_fsdp_allgather_come_from_the_registry():
    pytest.importorskip("torchao")
    assert converters.for_recipe(recipe("fp8_tensorwise"), fsdp_allgather=True).config.enable_fsdp_float8_all_gather
    assert not converters.for_recipe(recipe("fp8_rowwise")).config.enable_fsdp_float8_all_gather
    with pytest.raises(TrainplanError, match="cannot all-gather fp8_rowwise weights in fp8"):
        converters.for_recipe(recipe("fp8_rowwise"), fsdp_allgather=True)
    with pytest.raises(TrainplanError, match="precision 'mxfp8' has no converter"):
        converters.for_recipe(recipe("mxfp8"))


def test_the_torch_dtype_helper_maps_the_registry_names_to_torch_dtypes():
    assert torch_dtype("bf16") is torch.bfloat16 and torch_dtype("fp16") is torch.float16
    with pytest.raises(TrainplanError, match="no torch dtype"):
        torch_dtype("nvfp4")
