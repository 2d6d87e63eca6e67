"""Precision recipes: what a training step computes in and what it stores.

The recipes are data (recipes.toml, one record per recipe, a source per number); this module loads
them once into frozen `Recipe`s and is the only place that knows a recipe by name. Memory, step
time, the search, the validation loader, the tracer and the trainer read a recipe's fields.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from trainplan.converter_names import check as check_converter
from trainplan.errors import TrainplanError, unknown
from trainplan.hardware.types import ARCH_DTYPES, GPUSpec
from trainplan.parsing import check_keys, read_toml

DEFAULT = "bf16"  # the recipe a layout, a plan query or a record without a precision uses
# The headline MFU's denominator for every recipe: the GPU's bf16 dense peak, as torchtitan
# (utils.get_peak_flops: the bf16 peak whatever float8 does) and Megatron-Bridge's performance
# tables quote it, so fp8 and bf16 plans are compared on one scale; a recipe's own peak gives the
# second MFU (Estimate.mfu_recipe_peak).
MFU_PEAK_DTYPE = "bf16"
_FILE = Path(__file__).with_name("recipes.toml")
# torch's name of each compute dtype a recipe can name (torch.<name>); the torch-side code (trainer,
# tracer, kernel probe) maps through torch_dtype_name, so this table is the only one.
TORCH_DTYPE_NAMES = {"bf16": "bfloat16", "fp16": "float16"}

_KEYS = {
    "description", "aliases", "gemm_dtype", "compute_dtype", "peak_key", "ceiling_key", "param_bytes",
    "grad_bytes", "master_bytes", "optimizer_bytes", "loss_scaling", "searched", "archs",
    "low_precision", "sources",
}
_LOWP_KEYS = {
    "weight_bytes", "amax_history", "fsdp_allgather", "cast_bytes_eager", "cast_bytes_fused",
    "weight_cast_bytes", "converter", "converter_recipe",
}


@dataclass(frozen=True, slots=True)
class LowPrecision:
    """The scaled low-precision format a recipe's linear layers run in (recipes.toml documents
    each field)."""

    weight_bytes: float  # per element of the low-precision weight copy, scales included
    amax_history: int  # fp32 amax values per scaled tensor
    fsdp_allgather: bool  # FSDP2 can all-gather weights in this format
    cast_bytes_eager: tuple[float, float]  # HBM bytes per (K, N) activation element, unfused
    cast_bytes_fused: tuple[float, float]  # the same, amax and cast fused into the producer
    weight_cast_bytes: float  # HBM bytes per weight element cast per micro-batch
    converter: str | None  # a runtime converter (converter_names.py), None: the trainer refuses it
    converter_recipe: str | None  # the converter's own recipe name


@dataclass(frozen=True, slots=True)
class Recipe:
    name: str
    description: str
    gemm_dtype: str  # what the linears' GEMMs consume (descriptive)
    compute_dtype: str  # activations, attention, LM head: a GPUSpec peak / ceiling key
    peak_key: str  # GPUSpec.peak_flops key of the linears' GEMMs
    ceiling_key: str  # GPUSpec.matmul_ceiling key of the linears' GEMMs
    param_bytes: float  # compute copy of a weight
    grad_bytes: float  # gradient as accumulated and reduced
    master_bytes: float  # master copy (0: none)
    optimizer_bytes: float  # one AdamW moment
    loss_scaling: bool
    searched: bool  # `plan` tries it without --precision
    archs: frozenset[str]  # GPUSpec.arch values that run it
    low_precision: LowPrecision | None  # None: the linears run in compute_dtype
    aliases: tuple[str, ...] = ()
    sources: tuple[tuple[str, str], ...] = ()

    @property
    def pure(self) -> bool:
        """No master copy: the optimizer updates the compute-dtype weights themselves."""
        return self.master_bytes == 0

    def peak(self, gpu: GPUSpec) -> float:
        """Dense peak FLOP/s of the linears' GEMMs: the recipe's own peak (the denominator of
        Estimate.mfu_recipe_peak; the headline MFU's is mfu_peak)."""
        return gpu.peak(self.peak_key)

    def matmul_ceiling(self, gpu: GPUSpec) -> float:
        """Best-shape measured FLOP/s of the linears' GEMMs: peak x measured fraction."""
        return gpu.peak(self.peak_key) * gpu.matmul_ceiling[self.ceiling_key]

    def compute_matmul_ceiling(self, gpu: GPUSpec) -> float:
        """The same for GEMMs that stay in the compute dtype (LM head)."""
        return gpu.peak(self.compute_dtype) * gpu.matmul_ceiling[self.compute_dtype]

    def runs_on(self, gpu: GPUSpec) -> bool:
        return gpu.arch in self.archs

    @property
    def runnable(self) -> bool:
        """The reference trainer (and the tracer) can run it: no low-precision linears, or a converter."""
        return self.low_precision is None or self.low_precision.converter is not None


def _low_precision(name: str, d: dict) -> LowPrecision:
    where = f"recipes.toml [{name}.low_precision]"
    check_keys(d, _LOWP_KEYS, where, required=_LOWP_KEYS - {"converter", "converter_recipe"})
    if "converter" in d or "converter_recipe" in d:  # one without the other is refused too
        check_converter(d.get("converter"), d.get("converter_recipe"), where)
    return LowPrecision(
        weight_bytes=float(d["weight_bytes"]), amax_history=int(d["amax_history"]),
        fsdp_allgather=bool(d["fsdp_allgather"]), cast_bytes_eager=tuple(map(float, d["cast_bytes_eager"])),
        cast_bytes_fused=tuple(map(float, d["cast_bytes_fused"])), weight_cast_bytes=float(d["weight_cast_bytes"]),
        converter=d.get("converter"), converter_recipe=d.get("converter_recipe"),
    )


def parse(table: dict) -> dict[str, Recipe]:
    """Recipes from recipes.toml's table (or a test's extra rows), checked once here."""
    out = {}
    for name, d in table.items():
        where = f"recipes.toml [{name}]"
        check_keys(d, _KEYS, where, required=_KEYS - {"aliases", "low_precision"})
        bad = sorted(set(d["archs"]) - set(ARCH_DTYPES))
        if bad:
            raise TrainplanError(f"{where}: unknown arch {bad[0]!r}; known: {', '.join(ARCH_DTYPES)}")
        lp = d.get("low_precision")
        out[name] = Recipe(
            name=name, description=d["description"], gemm_dtype=d["gemm_dtype"],
            compute_dtype=d["compute_dtype"], peak_key=d["peak_key"], ceiling_key=d["ceiling_key"],
            param_bytes=float(d["param_bytes"]), grad_bytes=float(d["grad_bytes"]),
            master_bytes=float(d["master_bytes"]), optimizer_bytes=float(d["optimizer_bytes"]),
            loss_scaling=bool(d["loss_scaling"]), searched=bool(d["searched"]), archs=frozenset(d["archs"]),
            low_precision=None if lp is None else _low_precision(name, lp),
            aliases=tuple(d.get("aliases", ())), sources=tuple(d["sources"].items()),
        )
    return out


@functools.cache
def registry() -> dict[str, Recipe]:
    """Every recipe by name, in file order (the search tries them in this order)."""
    return parse(read_toml(_FILE))


def mfu_peak(gpu: GPUSpec) -> float:
    """Dense FLOP/s per GPU that MFU is quoted against, whatever the recipe (MFU_PEAK_DTYPE): the
    estimate, the trainer's measured MFU and the search all divide by it."""
    return gpu.peak(MFU_PEAK_DTYPE)


def _aliases() -> dict[str, str]:
    return {a: r.name for r in registry().values() for a in r.aliases}


def canonical(name: str) -> str:
    """The registry name of recipe `name` or of one of its aliases ('fp8' -> 'fp8_tensorwise').
    Every input that names a precision (a flag, --layout text, a plan.json, a validation record) is
    read through it, so that a Layout holds the registry name only and no alias reaches the output;
    unknown: a one-line error."""
    if name in registry():
        return name
    aliases = _aliases()
    if name in aliases:
        return aliases[name]
    raise unknown("precision", name, registry(), aliases=aliases)


def recipe(name: str) -> Recipe:
    """A recipe by its registry name, as a Layout holds it; unknown: a one-line error. An alias
    here is a bug, not an input: whatever read it skipped `canonical`, and it would leak into the
    output, so it fails loudly (the one check that no alias got past the edge)."""
    table = registry()
    if name in table:
        return table[name]
    aliases = _aliases()
    if name in aliases:
        raise AssertionError(f"precision alias {name!r} reached the planner; read it with "
                             f"precision.canonical where it enters ({aliases[name]!r})")
    raise unknown("precision", name, table, aliases=aliases)


def names() -> list[str]:
    return list(registry())


def matching(**fields) -> Recipe:
    """The one recipe whose fields have these values: how a reader of another framework's runs
    names what it computes in (e.g. no master copy, bf16 compute, no low-precision linears)."""
    found = [r for r in registry().values() if all(getattr(r, k) == v for k, v in fields.items())]
    if len(found) != 1:
        raise TrainplanError(f"{len(found)} precision recipes have {fields}; expected one")
    return found[0]


def searched(gpu: GPUSpec) -> list[Recipe]:
    """Recipes `plan` tries by itself on this GPU."""
    return [r for r in registry().values() if r.searched and r.runs_on(gpu)]


def check_supported(r: Recipe, gpu: GPUSpec) -> None:
    """Refuse a recipe the GPU's tensor cores cannot run (fp8 on A100, mxfp8 on Hopper)."""
    if not r.runs_on(gpu):
        runs = sorted(x.name for x in registry().values() if x.runs_on(gpu))
        raise TrainplanError(
            f"precision {r.name!r} needs {r.gemm_dtype} tensor cores, which {gpu.name} ({gpu.arch}) "
            f"does not have; use one of: {', '.join(runs)}"
        )


def no_converter(r: Recipe) -> str:
    """Why the reference trainer cannot run recipe `r` (it has no runtime converter), in one line."""
    runs = [x.name for x in registry().values() if x.runnable]
    return f"precision {r.name!r} has no converter in the trainer; use one of {', '.join(runs)}"


def torch_dtype_name(compute_dtype: str) -> str:
    """torch's name ("bfloat16") of a recipe's compute dtype ("bf16"); the planner stays torch-free."""
    if compute_dtype not in TORCH_DTYPE_NAMES:
        raise TrainplanError(
            f"compute dtype {compute_dtype!r} has no torch dtype; use one of: {', '.join(TORCH_DTYPE_NAMES)}")
    return TORCH_DTYPE_NAMES[compute_dtype]


def check_runnable(r: Recipe) -> None:
    """Refuse, before anything starts, a recipe the reference trainer has no converter for."""
    if not r.runnable:
        raise TrainplanError(no_converter(r))
