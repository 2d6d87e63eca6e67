"""Precision recipes: what a training step computes in and what it stores.

Bytes per parameter for each recipe and sharding mode live in costs/memory.py; this module names the
recipes, the tensor-core dtype their GEMMs run in, and what the GPU must support to run them.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainplan.errors import TrainplanError, unknown
from trainplan.hardware.types import GPUSpec


@dataclass(frozen=True, slots=True)
class PrecisionRecipe:
    name: str
    gemm_dtype: str  # the dtype linear layers run in (a key of GPUSpec.peak_flops, or mxfp8/nvfp4)
    pure: bool  # bf16 weights, gradients and optimizer states, no fp32 master copy
    loss_scaling: bool  # fp16 needs a dynamic loss scaler
    fp8: bool  # an fp8-family recipe: scales, transposed copies, optional fp8 all-gather
    description: str


RECIPES: dict[str, PrecisionRecipe] = {
    r.name: r
    for r in (
        PrecisionRecipe("bf16", "bf16", False, False, False,
                        "bf16 mixed precision: bf16 compute, fp32 master weights, gradients reduced in fp32, fp32 AdamW states"),
        PrecisionRecipe("fp16", "fp16", False, True, False,
                        "fp16 mixed precision with dynamic loss scaling, fp32 master weights and states"),
        PrecisionRecipe("bf16_pure", "bf16", True, False, False,
                        "pure bf16: bf16 weights, gradients and AdamW states (no fp32 master)"),
        PrecisionRecipe("fp8_tensorwise", "fp8", False, False, True,
                        "fp8 linears with one scale per tensor (TE delayed/current scaling, torchao tensorwise); rest bf16 mixed"),
        PrecisionRecipe("fp8_rowwise", "fp8", False, False, True,
                        "fp8 linears with one scale per row (torchao rowwise); rest bf16 mixed"),
        PrecisionRecipe("mxfp8", "mxfp8", False, False, True,
                        "MXFP8: fp8 with one e8m0 scale per 32 elements (Blackwell tensor cores); rest bf16 mixed"),
        PrecisionRecipe("nvfp4", "nvfp4", False, False, True,
                        "NVFP4: 4-bit linears with fp8 scales per 16 elements (Blackwell); rest bf16 mixed"),
    )
}

# Names used by published runs (trainplan-validation/1) for the same recipes.
ALIASES = {"fp8": "fp8_tensorwise", "fp8_unspecified": "fp8_tensorwise", "bf16-mixed": "bf16"}


def recipe(name: str) -> PrecisionRecipe:
    key = ALIASES.get(name, name)
    if key not in RECIPES:
        raise unknown("precision", name, RECIPES)
    return RECIPES[key]


def check_supported(r: PrecisionRecipe, gpu: GPUSpec) -> None:
    """Refuse a recipe the GPU's tensor cores cannot run (fp8 on A100, mxfp8 on Hopper)."""
    if not gpu.supports(r.gemm_dtype):
        runs = sorted(n for n, x in RECIPES.items() if gpu.supports(x.gemm_dtype))
        raise TrainplanError(
            f"precision {r.name!r} needs {r.gemm_dtype} tensor cores, which {gpu.name} "
            f"({gpu.arch}) does not have; use one of: {', '.join(runs)}"
        )
