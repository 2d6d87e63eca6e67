"""A calibration profile: the few efficiency coefficients the step-time model cannot derive.

Each coefficient has a physical meaning and a prior default with its reason. A profile JSON
(`trainplan-profile/1`) holds the fitted values, the records they were fitted on, the
leave-one-source-out fold values and the cross-validated error; `estimate` uses the packaged
`profiles/default.json` when it exists, else the priors below.

The type sits below costs (tests/core/test_layering.py): the cost model reads coefficients, and
calibration (which fits them by running the cost model) sits above it.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from trainplan.band import ASSUMED_ERROR, Band, bands_of, cross_validated_error, scale_group
from trainplan.errors import TrainplanError
from trainplan.parsing import check_keys, check_types, read_json

SCHEMA = "trainplan-profile/1"
_HERE = Path(__file__).parent / "profiles"


# Records a model kind needs in the fitted data before its own error sets the band (Profile.throughput_error,
# Profile.memory_band).
MODEL_KIND_MIN_RECORDS = 5


@dataclass(frozen=True, slots=True)
class MemoryBand:
    """The relative error a peak-memory prediction carries, and the runs it was measured on."""

    error: float
    basis: str  # "the p90 memory error of 19 dense runs", printed beside the band


@dataclass(frozen=True, slots=True)
class Profile:
    """Coefficients of the step-time model (costs/compute.py, costs/steptime.py)."""

    # Every efficiency below is a fraction of a physical ceiling, bounded to (0, 1] (calibration/fitting.py
    # BOUNDS): nothing in the model runs faster than its measured or datasheet limit.
    # Achieved fraction of the measured matmul ceiling (GPUSpec.matmul_ceiling, per dtype: fp8 GEMMs
    # are bounded by the fp8 MAMF) inside a real training step: clocks under sustained load, launch
    # gaps, imperfect tiling. Prior 0.9.
    gemm_eff: float = 0.9
    # Long-sequence flash-attention forward rate as a fraction of the bf16 dense peak (before the
    # sequence and head-dim shape factors of costs/compute.py). Prior 0.73: FlashAttention-2 forward
    # reaches up to 73% of A100 peak (Dao 2023 sec. 4.1); FA3 on H100 ~75% (Shah et al. 2024).
    attn_eff: float = 0.73
    # Grouped (routed-expert) GEMMs relative to dense ones of the same shape: per-expert launches or
    # CUTLASS/TE grouped kernels with ragged M, the router's top-k and the token permutation's
    # padding. Prior 1.0 (no loss); fitted on the MoE sources only (dense records do not see it).
    moe_gemm_eff: float = 1.0
    # GEMM dimension at which a GEMM reaches half of its ceiling: eff = 1 / (1 + sum(d_half/dim)).
    d_half: float = 128.0
    # Achieved fraction of the datasheet HBM bandwidth for memory-bound element-wise kernels
    # (bytes counted per op class in costs/compute.py). Prior 0.8 (a streaming kernel's usual
    # 80-90% of the datasheet bandwidth).
    hbm_eff: float = 0.8
    # Fraction of overlappable communication (FSDP/ZeRO gathers and reductions, DP all-reduce, CP
    # ring, PP p2p) hidden behind compute when compute is long enough. Prior 0.8.
    overlap: float = 0.8
    # Fraction of tensor-parallel and expert all-to-all communication hidden (async-TP,
    # Megatron tp_comm_overlap, DeepEP), applied only where the layout's execution settings turn that
    # overlap on (costs/step_terms.py). Prior 0.0.
    tp_overlap: float = 0.0
    # Residual corrections on the machine profile's measured rates (trainplan/machine/), used only where
    # a table covers a kernel: kernels inside a training step against the same kernels run alone.
    # Prior 1.0 (the microbenchmark holds). `machine_compute` scales GEMM, grouped-GEMM and attention
    # rates; `machine_hbm` the element-wise bandwidth (our bytes per op class are a count, not the
    # source's, so it may exceed 1: calibration/fitting.py BOUNDS).
    machine_compute: float = 1.0
    machine_hbm: float = 1.0
    # Fixed per-step overhead in seconds (data loading, logging, optimizer launch). Prior 0.
    step_overhead_s: float = 0.0
    # Per GPU architecture factor on the GEMM rate (ampere / hopper / blackwell): how far a
    # generation's training kernels are from its MAMF beyond gemm_eff. Prior: none (1.0).
    arch_gemm_eff: dict = field(default_factory=dict, compare=False, hash=False)
    # Per stack factor on the whole step time (measured / predicted, median over the sources of
    # that stack; only fitted where at least two sources show it). The layout's `stack` picks one.
    framework_time: dict = field(default_factory=dict, compare=False, hash=False)
    name: str = "prior"
    cv_error: dict = field(default_factory=dict, compare=False, hash=False)
    folds: dict = field(default_factory=dict, compare=False, hash=False)
    # Coefficients of the out-of-sample splits beside LOSO (validation/splits.py): split key
    # ('time<2025-06-01', 'family=llama', 'generation=hopper') -> the coefficients fitted without it.
    splits: dict = field(default_factory=dict, compare=False, hash=False)
    source: str = "priors in trainplan/profile.py"
    # When and on what the profile was fitted, and the coefficients' bounds (calibration/build.py).
    meta: dict = field(default_factory=dict, compare=False, hash=False)
    # Machine profiles whose measured rates the cost model reads (one per GPU type; trainplan/machine).
    # Loaded profiles carry the packaged ones; Profile() (the bare priors) carries none.
    machines: tuple = field(default=(), compare=False, hash=False)
    # The data the coefficients were fitted on (FittedOn below); None for the priors and for a
    # profile written before trainplan recorded it.
    fitted_on: FittedOn | None = field(default=None, compare=False, hash=False)

    def machine_for(self, gpu_name: str):
        """The machine profile of this GPU type, or None (the model's formulas apply)."""
        return next((m for m in self.machines if m.gpu == gpu_name), None)

    def with_machine(self, machine) -> Profile:
        """This profile with `machine` in place of the packaged one of its GPU type."""
        return replace(self, machines=(machine, *(m for m in self.machines if m.gpu != machine.gpu)))

    def coefficients(self) -> dict:
        out = {k: getattr(self, k) for k in COEFFICIENTS}
        out["arch_gemm_eff"] = dict(self.arch_gemm_eff)
        out["framework_time"] = dict(self.framework_time)
        return out

    def fold(self, source_key: str) -> Profile:
        """The profile fitted without `source_key` (for cross-validated predictions)."""
        if source_key in self.folds:
            return replace(self, **self.folds[source_key], name=f"{self.name} (without {source_key})")
        return self

    def split_fold(self, key: str) -> Profile | None:
        """The profile of split fold `key` (validation/splits.py), or None when it has none."""
        if key in self.splits:
            return replace(self, **self.splits[key], name=f"{self.name} ({key})")
        return None

    def throughput_band(self, generation: str, moe: bool, num_gpus: int, stack: str,
                        features: tuple[str, ...] = ()) -> Band:
        """The band of a plan's tokens/s (band.py, the one home): the p90 out-of-sample error of
        the measured runs most like it, widened where nothing like it was measured. A profile
        without out-of-sample errors (a team's calibration, the bare priors) carries its own
        cross-validated error (throughput_error), with no basis of its own (band_basis names it)."""
        if (b := bands_of(self.cv_error)) is not None:
            return b.band(generation, "moe" if moe else "dense", scale_group(num_gpus), stack, "full", features)
        return Band(self.throughput_error(moe), "", 0)

    def throughput_error(self, moe: bool) -> float:
        """The band of a profile without out-of-sample errors (band.cross_validated_error): its own
        cross-validated p90, widened to the p90 of the model's kind where it measured enough runs."""
        return cross_validated_error(self.cv_error, moe, MODEL_KIND_MIN_RECORDS)

    def memory_band(self, moe: bool) -> MemoryBand:
        """The band a plan's peak memory must leave below capacity (costs/fit.py within): the
        cross-validated p90 |error| of peak memory (cv_error peak_mem_gib) of runs of the model's
        kind (MoE or dense, group 'model=...') where the profile measured at least
        MODEL_KIND_MIN_RECORDS of them, else of all its runs. The p90, not the median: half the
        measured errors exceed the median's margin (issue 27: a 4% band, plans chosen at 96% of
        HBM, B200 runs 7% above their prediction).
        A profile that measured no memory error (the bare priors) has no band, and says so."""
        kind = "moe" if moe else "dense"
        cv = self.cv_error.get("peak_mem_gib", {})
        own, every = cv.get(f"model={kind}", {}), cv.get("all", {})
        if own.get("count", 0) >= MODEL_KIND_MIN_RECORDS and own.get("p90_abs") is not None:
            return MemoryBand(own["p90_abs"], f"the p90 memory error of {own['count']} {kind} runs")
        if every.get("p90_abs") is not None:
            return MemoryBand(every["p90_abs"], f"the p90 memory error of all {every.get('count', 0)} runs; "
                                                f"fewer than {MODEL_KIND_MIN_RECORDS} {kind} runs measured")
        return MemoryBand(0.0, f"profile {self.name} measured no memory error")

    def time_factor(self, stack: str) -> float:
        """The step-time factor of the stack that runs a layout (1.0 if none was fitted)."""
        return self.framework_time.get(stack, 1.0)

    def to_dict(self) -> dict:
        return {"schema": SCHEMA, "name": self.name, "source": self.source, "meta": self.meta,
                **({"fitted_on": self.fitted_on.to_dict()} if self.fitted_on else {}),
                "coefficients": self.coefficients(), "cv_error": self.cv_error, "folds": self.folds,
                **({"splits": self.splits} if self.splits else {})}

    def describe(self, gpus=(), model: str | None = None) -> str:
        """The one line a plan priced with this profile prints (describe() below)."""
        return describe(self.name, self.fitted_on, self.cv_error.get("tokens_per_s_per_gpu", {}), gpus, model)


COEFFICIENTS = ("gemm_eff", "attn_eff", "moe_gemm_eff", "d_half", "hbm_eff", "overlap", "tp_overlap",
                "machine_compute", "machine_hbm", "step_overhead_s")
TABLES = ("arch_gemm_eff", "framework_time")


def profile_from_dict(d: dict, where: str) -> Profile:
    check_keys(d, {"schema", "name", "source", "meta", "coefficients", "cv_error", "folds", "splits", "data",
                   "fitted_on"},
               where, required={"schema", "coefficients"})
    if d["schema"] != SCHEMA:
        raise TrainplanError(f"{where}: unknown schema {d['schema']!r}; expected {SCHEMA!r}")
    co = d["coefficients"]
    check_keys(co, set(COEFFICIENTS) | set(TABLES), f"{where}: coefficients")
    flat = {k: v for k, v in co.items() if k in COEFFICIENTS}
    flat |= {f"{t}.{k}": v for t in TABLES for k, v in (co.get(t) or {}).items()}
    for k, v in flat.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            raise TrainplanError(f"{where}: coefficient {k} must be a non-negative number, got {v!r}")
    return Profile(**{k: float(v) for k, v in co.items() if k in COEFFICIENTS},
                   **{t: {k: float(v) for k, v in (co.get(t) or {}).items()} for t in TABLES},
                   name=d.get("name", "custom"), source=d.get("source", where),
                   cv_error=d.get("cv_error", {}), folds=d.get("folds", {}), splits=d.get("splits", {}),
                   meta=d.get("meta", {}),
                   fitted_on=fitted_on_from_dict(d["fitted_on"], f"{where}: fitted_on") if "fitted_on" in d else None)


def load_profile(path: str | Path) -> Profile:
    """A calibration profile from JSON, with the packaged machine profiles attached."""
    from trainplan.machine.profile import packaged

    prof = profile_from_dict(read_json(path, "calibration profile"), str(path))
    return replace(prof, machines=packaged())


@functools.cache
def default_profile() -> Profile:
    """The packaged calibrated profile when there is one, else the priors."""
    p = _HERE / "default.json"
    if p.is_file():
        return load_profile(p)
    from trainplan.machine.profile import packaged

    return Profile(machines=packaged())




def band_basis(profile_name: str) -> str:
    """What a plan's throughput band is the error of, by the name of the profile that priced it
    (Estimate.profile): the packaged profile's is that of published runs, cross-validated; any
    other's is its own, which its describe() line states (a team's runs, or an assumed error)."""
    if profile_name == default_profile().name:
        return "the p90 error of published runs"
    return f"profile {profile_name}'s p90 error"


# ---- provenance: what a profile was fitted on (`fitted_on` in trainplan-profile/1) ---------------
# Written by calibration/runs.py (a team's runs, `trainplan calibrate`) and calibration/build.py
# (the published records of the packaged profile); stated beside every plan priced with --profile.

FITTED_KINDS = {"runs": "run", "published": "published record"}  # kind -> what one of `count` is


@dataclass(frozen=True, slots=True)
class FittedOn:
    """The data a profile's coefficients were fitted on."""

    kind: str  # "runs": a team's runs (`trainplan calibrate`); "published": published records
    count: int  # runs or records in the fit
    gpus: tuple[str, ...]  # catalog GPU names they ran on
    models: tuple[str, ...]
    sources: tuple[str, ...]  # run directories (absolute paths), or the records' source keys
    dates: tuple[str, ...] = ()  # ISO dates of the first and last run (runs only: summary.json written)
    method: str = ""  # how cv_error was measured: "leave one run out", "leave one source out"

    def to_dict(self) -> dict:
        return asdict(self)


def fitted_on_from_dict(d, where: str) -> FittedOn:
    check_keys(d, set(FittedOn.__slots__), where, required={"kind", "count", "gpus", "models", "sources"})
    check_types(FittedOn, d, where)
    if d["kind"] not in FITTED_KINDS:
        raise TrainplanError(f"{where}: kind must be one of {', '.join(sorted(FITTED_KINDS))}, got {d['kind']!r}")
    lists = {k: tuple(d.get(k) or ()) for k in ("gpus", "models", "sources", "dates")}
    if d["count"] < 0:
        raise TrainplanError(f"{where}: count must be >= 0, got {d['count']}")
    return FittedOn(kind=d["kind"], count=d["count"], method=d.get("method", ""), **lists)


def describe(name: str, fitted: FittedOn | None, cv: dict, gpus=(), model: str | None = None) -> str:
    """'profile cal: fitted on 4 runs of llama-3.1-8b on h100-sxm-80gb (2026-07-01 to 2026-07-03),
    cross-validated error 7.0% (p90 9.1%, leave one run out)'. `cv`: the profile's cv_error
    tokens_per_s_per_gpu; `gpus`, `model`: what the plan runs, named when the fit did not cover them."""
    median, p90 = (cv.get("all") or {}).get("median_abs"), cv.get("p90_abs")
    if fitted is None:
        what = "no record of what it was fitted on"
    else:
        unit = FITTED_KINDS[fitted.kind] + ("" if fitted.count == 1 else "s")
        what = (f"fitted on {fitted.count} {unit} of {_few(fitted.models, 'models')} on {_few(fitted.gpus, 'GPU types')}"
                + (f" ({' to '.join(sorted(set(fitted.dates)))})" if fitted.dates else ""))
    if median is None or p90 is None:
        error = f"no cross-validated error: its band is an assumed {ASSUMED_ERROR if p90 is None else p90:.0%}"
    else:
        how = f", {fitted.method}" if fitted is not None and fitted.method else ""
        error = f"cross-validated error {median:.1%} (p90 {p90:.1%}{how})"
    line = f"profile {name}: {what}, {error}"
    if fitted is not None and fitted.kind == "runs":
        outside = [g for g in sorted(set(gpus)) if g not in fitted.gpus]
        outside += [model] if model is not None and model not in fitted.models else []
        if outside:
            line += f"; this plan's {', '.join(outside)} {'is' if len(outside) == 1 else 'are'} outside that fit"
    return line


def _few(names, plural: str, shown: int = 3) -> str:
    """The names, or how many when there are more than `shown`."""
    names = sorted(set(names))
    return ", ".join(names) if 0 < len(names) <= shown else f"{len(names)} {plural}"
