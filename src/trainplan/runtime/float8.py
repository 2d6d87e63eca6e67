"""The converter "torchao_float8" (recipes.toml rows fp8_tensorwise, fp8_rowwise): torchao's float8
training, nn.Linear swapped for torchao's Float8Linear by torchao's own convert_to_float8_training.

What stays in high precision: the LM head and the MoE routers (their outputs feed a softmax, where
fp8 rounding hurts most; torchtitan and torchao skip the head too), and linears whose sizes are not
multiples of 16 (the fp8 GEMM kernels need them). The names cover trainplan's own decoder (output,
router, shared_gate) and Hugging Face models (lm_head, gate, shared_expert_gate), so the trainer's
--hf models and the tracer keep the same layers whole as the planner costs (LM head in the compute
dtype: precision.Recipe.compute_matmul_ceiling).
"""

from __future__ import annotations

from dataclasses import replace

from torch import nn

from trainplan.errors import TrainplanError
from trainplan.precision import Recipe

_HIGH_PRECISION = ("output", "lm_head", "router", "gate")  # fqn endings; "gate" covers shared_gate


def keeps_high_precision(fqn: str) -> bool:
    return fqn.endswith(_HIGH_PRECISION)


class Float8Converter:
    """Float8LinearConfig.from_recipe_name(converter_recipe); with fp8_allgather, FSDP2 all-gathers
    the weights in float8 (tensorwise only: the recipe row's fsdp_allgather) and the scales of all
    of them are computed after each optimizer step in one all-reduce, as torchao asks
    (precompute_float8_dynamic_scale_for_fsdp). That is the same amax and the same scale formula
    torchao's all-gather computes per weight otherwise: a max is exact, so the values are equal."""

    def __init__(self, recipe: Recipe, *, fsdp_allgather: bool = False) -> None:
        from torchao.float8 import Float8LinearConfig

        lp = recipe.low_precision
        config = Float8LinearConfig.from_recipe_name(lp.converter_recipe)
        if fsdp_allgather:
            if not lp.fsdp_allgather:
                raise TrainplanError(f"fp8_allgather: torchao cannot all-gather {recipe.name} weights in fp8 under FSDP2")
            config = replace(config, enable_fsdp_float8_all_gather=True)
        self.config = config
        self.fsdp_allgather = fsdp_allgather

    def convert(self, model: nn.Module) -> int:
        from torchao.float8 import convert_to_float8_training

        swapped = []

        def swap(mod: nn.Module, fqn: str) -> bool:
            ok = not keeps_high_precision(fqn) and mod.in_features % 16 == 0 and mod.out_features % 16 == 0
            if ok:
                swapped.append(fqn)
            return ok

        convert_to_float8_training(model, config=self.config, module_filter_fn=swap)
        return len(swapped)

    def tp_styles(self) -> tuple[type, type]:
        """torchao's float8 styles: they cast to float8 before the tp communication (torchtitan's)."""
        from torchao.float8.float8_tensor_parallel import (
            Float8ColwiseParallel,
            Float8RowwiseParallel,
        )

        return Float8ColwiseParallel, Float8RowwiseParallel

    def hook_optimizer(self, optimizer, model: nn.Module) -> None:
        if not self.fsdp_allgather:
            return
        from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp

        optimizer.register_step_post_hook(lambda *_: precompute_float8_dynamic_scale_for_fsdp(model))
