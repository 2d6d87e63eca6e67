"""Data moves one way (DESIGN.md): every import in src/trainplan goes down the layer order below.

Each module is parsed with ast (every import counts, including the lazy ones inside functions),
and an import of a module in a higher layer, or of a sibling package in the same layer, fails with
the file, the line and the import. A new top-level module or package must be placed in LAYERS.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

# Lowest first. A group may import its own modules and any group of a lower layer; groups of one
# layer are siblings and do not import each other.
LAYERS: list[set[str]] = [
    {"__init__", "errors", "units", "memo", "spelling"},  # `trainplan` itself holds only __version__; spelling: flags/text/JSON keys of input fields
    {"parsing", "fileio", "torch_logs"},  # torch_logs: filters installed before torch is imported
    {"machine"},  # measured kernel and collective rates (trainplan-machine/1), read by costs via profile
    {"band"},  # a plan's throughput band from out-of-sample errors of runs like it, read through profile
    {"hardware", "profile"},  # profile: the step-time coefficients, read by costs, fitted by calibration
    {"models"},
    {"stacks"},  # the software that runs a layout and its execution settings (stacks.toml)
    {"converter_names"},  # the runtime's precision converters by name, torch-free (read by precision)
    {"precision"},
    {"layout", "job"},
    {"supports", "export"},  # what trainplan's trainer runs as costed (supports) and what each framework
    # runs (export: a costed plan as that framework's own configuration, refused in one line where it
    # would run otherwise, and that configuration read back): both read by search, launch and runtime
    {"costs"},
    {"estimate"},
    {"search"},
    {"plan"},
    {"chosen"},  # a search result -> the Plan written to plan.json (to_plan)
    {"validation"},
    {"calibration"},  # fits coefficients by predicting validation records
    {"launch", "report", "runtime", "probe"},  # probe: torch microbenchmarks -> machine profile
    {"ingest"},  # a framework's log (export/*_log.py) as the run directory the runtime's metrics write
    {"trace"},  # the real model code on fake tensors, converted by the runtime's converters
    {"commands"},
    {"cli"},
    {"__main__"},  # python -m trainplan
]
LAYER = {group: i for i, groups in enumerate(LAYERS) for group in groups}


def group_of(module: str) -> str:
    """'trainplan.costs.memory' -> 'costs'; 'trainplan' -> '__init__'."""
    parts = module.split(".")
    assert parts[0] == "trainplan", module
    return parts[1] if len(parts) > 1 else "__init__"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(source: str, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, absolute module) for every trainplan import in `source`, relative ones resolved."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            out.append((node.lineno, name))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
    return sorted((line, name) for line, name in out if name == "trainplan" or name.startswith("trainplan."))


def violations(source: str, module: str, is_package: bool, where: str) -> list[str]:
    mine = group_of(module)
    out = []
    for line, name in imported_modules(source, module, is_package):
        theirs = group_of(name)
        if theirs == mine:
            continue
        if theirs not in LAYER:
            out.append(f"{where}:{line}: imports {name}, whose group {theirs!r} is not in LAYERS")
        elif LAYER[theirs] > LAYER[mine]:
            out.append(f"{where}:{line}: imports {name}: {mine!r} (layer {LAYER[mine]}) may not import "
                       f"the higher layer {theirs!r} (layer {LAYER[theirs]})")
        elif LAYER[theirs] == LAYER[mine]:
            out.append(f"{where}:{line}: imports {name}: {mine!r} and {theirs!r} are siblings of layer "
                       f"{LAYER[mine]} and do not import each other")
    return out


def _modules():
    for path in sorted((SRC / "trainplan").rglob("*.py")):
        yield path, module_name(path)


def test_every_top_level_module_has_a_layer():
    missing = sorted({group_of(m) for _, m in _modules()} - set(LAYER))
    assert not missing, f"place these in tests/core/test_layering.py LAYERS: {missing}"


def test_no_upward_imports():
    found = []
    for path, module in _modules():
        found += violations(path.read_text(), module, path.name == "__init__.py",
                            str(path.relative_to(SRC.parent)))
    assert not found, "upward imports:\n" + "\n".join(found)


def test_the_check_sees_upward_lazy_and_relative_imports():
    # What the tree once had: costs reading the profile from calibration, a launcher reaching into
    # the CLI's helpers inside a function, and a relative import that climbs out of its package.
    src = ("from trainplan.errors import TrainplanError\n"
           "def f():\n    from trainplan.commands._common import write_atomic\n"
           "from ..calibration.profile import Profile\n")
    found = violations(src, "trainplan.costs.compute", False, "costs/compute.py")
    assert len(found) == 2
    assert "costs/compute.py:3: imports trainplan.commands._common" in found[0]
    assert "costs/compute.py:4: imports trainplan.calibration.profile" in found[1]
    sibling = violations("import trainplan.report.html\n", "trainplan.launch.slurm", False, "slurm.py")
    assert sibling and "siblings" in sibling[0]
