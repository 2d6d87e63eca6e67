"""Precision recipes on fake tensors: compute dtype, master weights, low-precision linears.

The model is built directly in the compute dtype (bf16 or fp16), because `model.to(dtype)` fails
under FakeTensorMode (swap_tensors on a weakref) and because that is what FSDP2's
MixedPrecisionPolicy(param_dtype=bf16) computes in: activations are bf16 in every recipe.

Mixed recipes (a master copy in the recipe registry: bf16, fp16, fp8) keep an fp32 master copy of
every parameter; AdamW runs on the masters with fp32 gradients (FSDP2 reduce_dtype=fp32), and the
updated masters are copied back to the compute weights. Pure recipes run AdamW on the compute-dtype
weights themselves. Low-precision linears come from the recipe's converter, the one the trainer
runs (runtime/converters.py). What a recipe is comes from precision.py; this module only maps it
to torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainplan.precision import recipe, torch_dtype_name
from trainplan.runtime.converters import Converter, for_recipe

# A constant loss scale stands in for dynamic loss scaling on fake tensors (2**16, torch.amp
# GradScaler's init_scale).
_LOSS_SCALE = 65536.0


@dataclass(frozen=True, slots=True)
class RecipeSetup:
    compute_dtype: str  # "bfloat16" | "float16"
    master_weights: bool  # fp32 master copy + fp32 grads + fp32 AdamW states
    loss_scale: float  # fp16 dynamic loss scaling (a constant on fake tensors)
    converter: Converter | None  # swaps the linears for the recipe's low-precision ones, or None


def setup(name: str) -> RecipeSetup:
    """How the tracer runs recipe `name` (one the tracer runs: trace.settings.PRECISIONS)."""
    r = recipe(name)
    return RecipeSetup(torch_dtype_name(r.compute_dtype), not r.pure, _LOSS_SCALE if r.loss_scaling else 1.0,
                       for_recipe(r))


class MasterWeights:
    """fp32 masters + AdamW over them; `step()` moves grads to fp32, steps, copies weights back."""

    def __init__(self, params, torch, foreach: bool):
        self.params = [p for p in params if p.requires_grad]
        self.masters = [torch.empty_like(p, dtype=torch.float32).requires_grad_(True) for p in self.params]
        self.opt = torch.optim.AdamW(self.masters, lr=1e-4, foreach=foreach)
        self.torch = torch

    def step(self, grad_scale: float = 1.0):
        with self.torch.no_grad():
            for p, m in zip(self.params, self.masters):
                if p.grad is not None:
                    m.grad = p.grad.float()  # fp32 gradient (FSDP2 reduce_dtype=fp32)
                    if grad_scale != 1.0:
                        m.grad.mul_(1.0 / grad_scale)  # fp16: unscale
                    p.grad = None  # the compute-dtype gradient is freed after the cast
            self.opt.step()
            for p, m in zip(self.params, self.masters):
                p.copy_(m)

    def zero_grad(self):
        self.opt.zero_grad(set_to_none=True)
        for p in self.params:
            p.grad = None

    def state_tensors(self):
        return [t for s in self.opt.state.values() for t in s.values() if hasattr(t, "nbytes") and t.dim() > 0]
