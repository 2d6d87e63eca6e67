"""The converters trainplan's runtime has, by the name a recipe row gives them, declared without torch.

A precision recipe whose linears run in a scaled low-precision format names its converter in
recipes.toml (`[x.low_precision] converter = "torchao_float8"`, `converter_recipe = "tensorwise"`).
The converter is the recipe's runtime behaviour (runtime/converters.py: build from the recipe and
the layout, convert the model, hook the optimizer); its code imports torch, so this table names it
as "module:attr", imported by the runtime on first use. The planner reads only what is declared
here: precision.py refuses a recipes.toml row that names an unknown converter or a converter recipe
it does not build, and supports.py reads what the converter's tensor-parallel styles run.

A new converter is one module beside runtime/float8.py plus one entry below.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainplan.errors import TrainplanError, unknown


@dataclass(frozen=True, slots=True)
class Declared:
    implementation: str  # "module:attr" of the class (runtime/converters.Converter), imported lazily
    recipes: tuple[str, ...]  # the converter_recipe values it builds
    tensor_parallel: tuple[str, ...]  # those of its recipes its tensor-parallel styles shard
    sequence_parallel_on_cpu: bool  # tp with sequence parallel runs over gloo (CPU)
    tensors: str  # what its modules compute in and communicate, as a refusal names it ("float8")
    source: str


CONVERTERS: dict[str, Declared] = {
    "torchao_float8": Declared(
        implementation="trainplan.runtime.float8:Float8Converter",
        recipes=("tensorwise", "rowwise"),
        tensor_parallel=("tensorwise",),
        sequence_parallel_on_cpu=False,
        tensors="float8",
        source="torchao.float8 (github.com/pytorch/ao torchao/float8): Float8LinearConfig.from_recipe_name "
               "'tensorwise' | 'rowwise'; float8_tensor_parallel.Float8ColwiseParallel / Float8RowwiseParallel "
               "cast with tensorwise scales; under sequence parallel Float8RowwiseParallel all-gathers a float8 "
               "gradient in backward, and gloo has no float8 dtypes ('Invalid scalar type'), NCCL has",
    ),
}


def declared(name: str) -> Declared:
    """The declaration of converter `name`; unknown: a one-line error listing the known ones."""
    if name not in CONVERTERS:
        raise unknown("converter", name, CONVERTERS, hint="runtime converters are declared in "
                      "trainplan/converter_names.py")
    return CONVERTERS[name]


def check(converter: str | None, converter_recipe: str | None, where: str) -> None:
    """Refuse, in one line, a recipe row naming a converter (or a recipe of it) the runtime lacks."""
    if converter not in CONVERTERS:
        raise TrainplanError(f"{where}: unknown converter {converter!r}; the runtime has: "
                             f"{', '.join(CONVERTERS)} (trainplan/converter_names.py)")
    recipes = CONVERTERS[converter].recipes
    if converter_recipe not in recipes:
        raise TrainplanError(f"{where}: converter {converter!r} builds converter_recipe "
                             f"{' or '.join(map(repr, recipes))}, not {converter_recipe!r}")
