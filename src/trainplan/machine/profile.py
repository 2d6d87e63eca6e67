"""A machine profile (`trainplan-machine/1`): measured kernel and collective rates of one GPU type
and the instances it comes in, with where every table came from. docs/machine-profile.md.

The cost model reads a profile's tables where they cover a kernel and falls back to its formulas
elsewhere (costs/compute.py, costs/comm.py); the calibration profile's coefficients are residual
corrections on top. Packaged profiles (machine/profiles/*.json) cite public microbenchmarks;
`trainplan probe` writes one measured on the user's machine.

Parsed once at the edge: unknown keys, kinds, selectors and axes are one-line errors naming the
allowed ones; inside, tables are frozen `Grid`s (machine/interp.py).
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from trainplan.errors import TrainplanError
from trainplan.machine.interp import Grid, Lookup
from trainplan.parsing import check_keys, read_json

SCHEMA = "trainplan-machine/1"
PACKAGED = Path(__file__).parent / "profiles"

# Table kinds: the selectors that pick a table (exact match), the axes a table may vary over, and
# the unit of its values. Attention FLOPs are those the kernel does (causal: half the s x s work).
KINDS = {
    "gemm": {"select": {"dtype"}, "axes": ("m", "n", "k"), "unit": "tflops"},
    # a low-precision GEMM's rate over the `over` dtype's at the same shape (fp8:bf16), from a cited
    # microbenchmark: prices `dtype` where the profile has `over` rows but none of its own (costs/measured.py)
    "gemm_ratio": {"select": {"dtype", "over"}, "axes": ("m", "n", "k"), "unit": "ratio"},
    "grouped_gemm": {"select": {"dtype", "pass"}, "axes": ("experts", "tokens_per_expert", "n", "k"),
                     "unit": "tflops"},
    "attention": {"select": {"pass", "causal", "kernel"}, "axes": ("seq", "heads", "kv_heads", "head_dim"),
                  "unit": "tflops"},
    "elementwise": {"select": {"kernel"}, "axes": ("bytes",), "unit": "gbps"},
    "collective": {"select": {"op", "tier"}, "axes": ("bytes", "ranks"), "unit": "busbw_gbps"},
}
SELECT_VALUES = {
    "pass": ("fwd", "bwd", "dgrad", "wgrad"),
    "causal": (True, False),
    "kernel": ("te", "sdpa", "norm", "swiglu", "rotary", "cross_entropy", "permute", "default"),
    "op": ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p"),
    "tier": ("nvlink", "efa", "host"),  # host: gloo between CPU processes (`probe --device cpu`)
}
DTYPE_SELECTORS = {"dtype", "over"}
_TABLE_KEYS = {"kind", "axes", "points", "source", "instances", "latency_us", "note"}


@dataclass(frozen=True)
class Table:
    kind: str
    select: tuple[tuple[str, object], ...]  # sorted (selector, value) pairs
    grid: Grid
    source: str
    instances: tuple[str, ...] = ()  # collectives across nodes: the instances measured; () = any node of the GPU
    latency_us: float | None = None  # collectives: small-message time floor

    def selector(self, key: str):
        return dict(self.select).get(key)

    def lookup(self, **query: float) -> Lookup:
        return self.grid.lookup(query)


@dataclass(frozen=True, eq=False)
class MachineProfile:
    gpu: str  # hardware catalog key (GPUSpec.name)
    name: str
    provenance: dict = field(compare=False, hash=False)  # kind, source / machine, date, software
    tables: tuple[Table, ...] = ()
    _found: dict = field(default_factory=dict, init=False, repr=False)  # find()'s answers: the search asks often

    def find(self, kind: str, instance: str | None = None, **select) -> Table | None:
        """The table of `kind` whose selectors equal `select` (for collectives across nodes, one
        measured on `instance`); None when the profile has no such table (the model falls back)."""
        key = (kind, instance, *sorted(select.items()))
        if key not in self._found:
            self._found[key] = self._find(kind, instance, select)
        return self._found[key]

    def _find(self, kind: str, instance: str | None, select: dict) -> Table | None:
        for t in self.tables:
            if t.kind != kind or any(t.selector(k) != v for k, v in select.items()):
                continue
            if t.instances and instance not in t.instances:
                continue
            return t
        return None

    def to_dict(self) -> dict:
        return {"schema": SCHEMA, "name": self.name, "gpu": self.gpu, "provenance": self.provenance,
                "tables": [_table_dict(t) for t in self.tables]}


def _table_dict(t: Table) -> dict:
    d = {"kind": t.kind, **dict(t.select), "axes": list(t.grid.axes),
         "points": [[*p, v] for p, v in zip(t.grid.points, t.grid.values, strict=True)], "source": t.source}
    if t.instances:
        d["instances"] = list(t.instances)
    if t.latency_us is not None:
        d["latency_us"] = t.latency_us
    return d


def _positive(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def table_from_dict(d: dict, where: str) -> Table:
    if not isinstance(d, dict):
        raise TrainplanError(f"{where}: a table must be an object")
    kind = d.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        raise TrainplanError(f"{where}: unknown kind {kind!r}; known kinds: {', '.join(KINDS)}")
    spec = KINDS[kind]
    check_keys(d, _TABLE_KEYS | spec["select"], where, required={"kind", "axes", "points", "source"} | spec["select"])
    # dtype: a recipe's gemm_dtype or compute_dtype (recipes.toml; the registry sits above this layer, so
    # any lower-case name is read and a name no recipe uses is simply never looked up)
    for s in spec["select"] & DTYPE_SELECTORS:
        if not (isinstance(d[s], str) and re.fullmatch(r"[a-z0-9_]+", d[s])):
            raise TrainplanError(f"{where}: {s} {d[s]!r} must be a lower-case dtype name such as bf16 or fp8")
    if kind == "gemm_ratio" and d["dtype"] == d["over"]:
        raise TrainplanError(f"{where}: a gemm_ratio relates two dtypes; dtype and over are both {d['dtype']!r}")
    for s in spec["select"] - DTYPE_SELECTORS:
        typed = isinstance(d[s], bool) if s == "causal" else isinstance(d[s], str)
        if not typed or d[s] not in SELECT_VALUES[s]:
            raise TrainplanError(f"{where}: {s} {d[s]!r} unknown; allowed: {', '.join(map(str, SELECT_VALUES[s]))}")
    axes = d["axes"]
    if (not isinstance(axes, list) or not all(isinstance(a, str) for a in axes) or len(set(axes)) != len(axes)
            or any(a not in spec["axes"] for a in axes)):
        raise TrainplanError(f"{where}: axes {axes!r} must be distinct names among {', '.join(spec['axes'])}")
    if not isinstance(d["source"], str) or not d["source"].strip():
        raise TrainplanError(f"{where}: source must name where the numbers came from")
    pts = d["points"]
    if not isinstance(pts, list) or not pts:
        raise TrainplanError(f"{where}: points must be a non-empty list of [{', '.join(axes + [spec['unit']])}]")
    coords, values = [], []
    for i, p in enumerate(pts):
        if not isinstance(p, list) or len(p) != len(axes) + 1 or not all(_positive(x) for x in p):
            raise TrainplanError(f"{where}: point {i} must be {len(axes) + 1} positive numbers "
                                 f"[{', '.join(axes + [spec['unit']])}], got {p!r}")
        coords.append(tuple(float(x) for x in p[:-1]))
        values.append(float(p[-1]))
    if len(set(coords)) != len(coords):
        raise TrainplanError(f"{where}: two points share the same coordinates; keep one")
    if not axes and len(pts) != 1:
        raise TrainplanError(f"{where}: a table without axes holds exactly one point")
    lat = d.get("latency_us")
    if lat is not None and not _positive(lat):
        raise TrainplanError(f"{where}: latency_us must be a positive number")
    inst = d.get("instances") or []
    if not isinstance(inst, list) or not all(isinstance(x, str) for x in inst):
        raise TrainplanError(f"{where}: instances must be a list of instance names")
    if kind == "collective" and d["tier"] == "efa" and not inst:
        raise TrainplanError(f"{where}: an efa collective table must name the instances it was measured on")
    return Table(kind, tuple(sorted((s, d[s]) for s in spec["select"])), Grid(tuple(axes), tuple(coords), tuple(values)),
                 d["source"], tuple(inst), None if lat is None else float(lat))


def machine_from_dict(d: dict, where: str) -> MachineProfile:
    if not isinstance(d, dict):
        raise TrainplanError(f"{where}: a machine profile must be a JSON object")
    check_keys(d, {"schema", "name", "gpu", "provenance", "tables"}, where,
               required={"schema", "gpu", "provenance", "tables"})
    if d["schema"] != SCHEMA:
        raise TrainplanError(f"{where}: unknown schema {d['schema']!r}; expected {SCHEMA!r}")
    for key in ("gpu", "name"):
        if key in d and not (isinstance(d[key], str) and d[key].strip()):
            raise TrainplanError(f"{where}: {key} must be a non-empty string")
    prov = d["provenance"]
    if not isinstance(prov, dict):
        raise TrainplanError(f"{where}: provenance must be an object")
    check_keys(prov, {"kind", "source", "machine", "date", "software", "note"}, f"{where}: provenance",
               required={"kind"})
    if prov["kind"] not in ("published", "probe"):
        raise TrainplanError(f"{where}: provenance kind {prov['kind']!r} unknown; allowed: published, probe")
    if prov["kind"] == "probe" and not all(prov.get(k) for k in ("machine", "date", "software")):
        raise TrainplanError(f"{where}: a probed profile names its machine, date and software in provenance")
    tables = d["tables"]
    if not isinstance(tables, list):
        raise TrainplanError(f"{where}: tables must be a list")
    return MachineProfile(str(d["gpu"]), str(d.get("name") or d["gpu"]), prov,
                          tuple(table_from_dict(t, f"{where}: tables[{i}]") for i, t in enumerate(tables)))


def load_machine(path: str | Path) -> MachineProfile:
    return machine_from_dict(read_json(path, "machine profile"), str(path))


@functools.cache
def packaged() -> tuple[MachineProfile, ...]:
    """The packaged default profiles (one per GPU type), each citing its public sources."""
    profs = tuple(load_machine(p) for p in sorted(PACKAGED.glob("*.json")))
    seen: dict[str, str] = {}
    for m in profs:  # two defaults for one GPU type: which one priced an estimate would be a file-name accident
        if m.gpu in seen:
            raise TrainplanError(f"packaged machine profiles {seen[m.gpu]!r} and {m.name!r} are both for {m.gpu!r}; "
                                 "merge their tables into one file")
        seen[m.gpu] = m.name
    return profs
