"""The runtime's converter registry (runtime/converters.py): every declared converter loads and
implements the contract, each recipe gets the converter its row names, and torchao's float8
converter swaps the linears the planner costs in fp8 and hooks the optimizer only for the FSDP
float8 all-gather."""

import pytest
import torch
from torch import nn

from trainplan.converter_names import CONVERTERS
from trainplan.precision import registry
from trainplan.runtime import converters
from trainplan.runtime.converters import Converter

pytestmark = [pytest.mark.torch]
pytest.importorskip("torchao")


@pytest.mark.parametrize("name", sorted(CONVERTERS))
def test_every_declared_converter_loads_and_implements_the_contract(name):
    cls = converters._load(name)
    members = [m for m in vars(Converter) if not m.startswith("_")]
    assert members and all(callable(getattr(cls, m, None)) for m in members), (name, members)


@pytest.mark.parametrize("name", [r.name for r in registry().values() if r.runnable])
def test_each_recipe_gets_the_converter_its_row_names(name):
    r = registry()[name]
    conv = converters.for_recipe(r)
    if r.low_precision is None:
        assert conv is None
    else:
        assert type(conv) is converters._load(r.low_precision.converter)


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.wq, self.w1 = nn.Linear(64, 64), nn.Linear(64, 128)  # trainplan's own names
        self.q_proj, self.gate_proj = nn.Linear(64, 64), nn.Linear(64, 128)  # Hugging Face's
        self.router, self.gate, self.shared_gate = nn.Linear(64, 16), nn.Linear(64, 16), nn.Linear(64, 16)
        self.odd = nn.Linear(64, 24)  # not a multiple of 16: the fp8 kernels cannot take it


def _model():
    m = nn.Module()
    m.layers = nn.ModuleList([_Block(), _Block()])
    m.output, m.lm_head = nn.Linear(64, 256), nn.Linear(64, 256)
    return m


def _float8_recipe(allgather: bool):
    """A recipe of the float8 converter (one whose weights FSDP2 all-gathers in float8, if asked)."""
    return next(r for r in registry().values() if r.low_precision is not None and r.runnable
                and (r.low_precision.fsdp_allgather or not allgather))


def test_float8_keeps_the_heads_routers_and_odd_shapes_in_high_precision():
    from torchao.float8.float8_linear import Float8Linear

    model = _model()
    assert converters.for_recipe(_float8_recipe(False)).convert(model) == 2 * 4
    swapped = {n for n, m in model.named_modules() if isinstance(m, Float8Linear)}
    assert swapped == {f"layers.{i}.{k}" for i in (0, 1) for k in ("wq", "w1", "q_proj", "gate_proj")}


def test_the_optimizer_is_hooked_only_for_the_float8_all_gather():
    for allgather in (False, True):
        model = _model()
        conv = converters.for_recipe(_float8_recipe(allgather), fsdp_allgather=allgather)
        conv.convert(model)
        opt = torch.optim.AdamW(model.parameters())
        conv.hook_optimizer(opt, model)
        assert len(opt._optimizer_step_post_hooks) == int(allgather)
        opt.step()  # no FSDP here: torchao's precompute finds no float8 all-gather weight, a no-op
