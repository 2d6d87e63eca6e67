"""estimate(job, layout) -> Estimate: memory, step time, communication ledger, throughput and cost.

MFU convention: model FLOPs per step / (step time x GPUs x the GPU's bf16 dense peak), whatever the
recipe (precision.mfu_peak, as torchtitan and Megatron-Bridge quote it: an fp8 plan and a bf16 plan
read on one scale); `mfu_recipe_peak` divides by the dense peak of the recipe's GEMM dtype instead
(fp8: twice the bf16 peak), and `peak_tflops_per_gpu` / `recipe_peak_tflops_per_gpu` name both. Model FLOPs are 6N + attention with causal masking counted at half the s x s work, the LM
head included and recompute excluded (costs/flops.py). This is torchtitan's 6N + attention with
the causal halving that a causal flash kernel does; Megatron (Narayanan et al. 2021 eq. 3) and
torchtitan count the full s x s attention, which gives a larger MFU at long sequences
(`mfu_noncausal` reports that one). HFU adds recompute.

The search calls this tens of thousands of times: per-model constants (FLOPs per layer kind,
parameter splits) are cached on the ModelSpec; nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainplan.costs.comm import CommEntry
from trainplan.costs.cost import Cost, cost
from trainplan.costs.flops import model_flops
from trainplan.costs.goodput import Goodput, goodput
from trainplan.costs.states import checkpoint_bytes_per_param, total_params
from trainplan.costs.steptime import StepTime, step_time
from trainplan.hardware.evidence import ceiling_widening
from trainplan.hardware.reliability import Reliability, reliability
from trainplan.job import Job
from trainplan.layout import Layout
from trainplan.models.layers import model_features
from trainplan.precision import mfu_peak
from trainplan.profile import Profile, default_profile
from trainplan.units import TFLOPS, GiB


@dataclass(frozen=True, slots=True)
class Estimate:
    memory: object  # costs.memory.MemoryBreakdown
    time: StepTime
    comm: tuple[CommEntry, ...]
    flops_per_step: float  # model FLOPs, whole cluster, no recompute (convention above)
    hardware_flops_per_step: float  # with recompute
    tokens_per_s: float  # whole cluster
    tokens_per_s_per_gpu: float
    mfu: float  # against the bf16 dense peak (peak_tflops_per_gpu), every recipe
    mfu_noncausal: float  # Megatron / torchtitan convention: full s x s attention counted (bf16 peak)
    hfu: float  # with recompute (bf16 peak)
    mfu_recipe_peak: float  # against the dense peak of the recipe's GEMM dtype (fp8: the fp8 peak)
    peak_tflops_per_gpu: float  # the denominator of mfu, mfu_noncausal and hfu (bf16 dense)
    recipe_peak_tflops_per_gpu: float  # the denominator of mfu_recipe_peak
    cost: Cost
    binding: str  # one of BINDINGS
    band: tuple[float, float]  # tokens/s per GPU, low and high, from the out-of-sample error (band.py)
    profile: str
    goodput: Goodput | None = None  # failures and checkpoint saves (costs/goodput.py)
    machine: str | None = None  # the machine profile whose measured rates were used (trainplan/machine)
    outside: tuple[str, ...] = ()  # its lookups beyond a table's range: the table's edge was used
    # GEMMs priced as the compute dtype's measured rows x a cited ratio (the band is widened for it)
    derived: tuple[str, ...] = ()
    # what the band is the error of, in words (band.py); "" where the profile has no out-of-sample
    # errors and its name says it (profile.band_basis)
    band_basis: str = ""

    @property
    def step_time_s(self) -> float:
        return self.time.total

    @property
    def tflops_per_gpu(self) -> float:
        """Model TFLOP/s achieved per GPU (mfu x its bf16 peak)."""
        return self.mfu * self.peak_tflops_per_gpu

    @property
    def cluster_band(self) -> tuple[float, float]:
        """The band in tokens/s of the whole cluster (`band` is per GPU)."""
        gpus = self.tokens_per_s / self.tokens_per_s_per_gpu
        return self.band[0] * gpus, self.band[1] * gpus

    @property
    def peak_mem_gib(self) -> float | None:
        return None if self.memory is None else self.memory.total / GiB

    @property
    def fits(self) -> bool:
        return self.binding != "memory"

    @property
    def cost_per_hour(self) -> float | None:
        return self.cost.cost_per_hour

    @property
    def usd_per_million_tokens(self) -> float | None:
        return self.cost.usd_per_million_tokens

    @property
    def hours_to_tokens(self) -> float | None:
        return self.cost.hours_to_tokens

    @property
    def usd_to_tokens(self) -> float | None:
        return self.cost.usd_to_tokens

    def to_dict(self) -> dict:
        """Measurement field names and units (peak_mem_gib, step_time_s, tokens_per_s_per_gpu, mfu)."""
        return {
            "peak_mem_gib": self.peak_mem_gib,
            "step_time_s": self.step_time_s,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "tokens_per_s": self.tokens_per_s,
            "mfu": self.mfu,
            "mfu_noncausal": self.mfu_noncausal,
            "hfu": self.hfu,
            "mfu_recipe_peak": self.mfu_recipe_peak,
            "peak_tflops_per_gpu": self.peak_tflops_per_gpu,
            "recipe_peak_tflops_per_gpu": self.recipe_peak_tflops_per_gpu,
            "flops_per_step": self.flops_per_step,
            "hardware_flops_per_step": self.hardware_flops_per_step,
            "binding": self.binding,
            "band": list(self.band),  # tokens/s per GPU, low and high
            **({"band_basis": self.band_basis} if self.band_basis else {}),
            "time_s": self.time.to_dict(),
            "comm": [c.to_dict() for c in self.comm],
            "memory": None if self.memory is None else self.memory.to_dict(),
            **self.cost.to_dict(),
            "profile": self.profile,
            "goodput": None if self.goodput is None else self.goodput.to_dict(),
            "machine": {"profile": self.machine, "outside_grid": list(self.outside), "derived": list(self.derived)},
        }


# Estimate.to_dict() keys that are not fields: derived totals, and the Cost fields it flattens.
_DERIVED = {"peak_mem_gib", "step_time_s", "time_s", "comm", "memory", "band", "band_basis", "goodput", "machine"}
_COST_KEYS = set(Cost.__slots__)
_SCALARS = ("flops_per_step", "hardware_flops_per_step", "tokens_per_s", "tokens_per_s_per_gpu", "mfu",
            "mfu_noncausal", "hfu", "mfu_recipe_peak", "peak_tflops_per_gpu", "recipe_peak_tflops_per_gpu",
            "binding", "profile")
_MEMORY_META = {"worst_stage", "convention", "microbatches_in_flight"}


def estimate_from_dict(d: dict, where: str = "estimate") -> Estimate:
    """The inverse of Estimate.to_dict(): an estimate read back from plan.json, exactly as written.

    Unknown and missing keys are refused (a file from another trainplan version says so)."""
    from trainplan.costs.comm import CommEntry
    from trainplan.costs.memory import MemoryBreakdown
    from trainplan.errors import TrainplanError
    from trainplan.parsing import check_keys, check_types

    if not isinstance(d, dict):
        raise TrainplanError(f"{where}: expected an object, got {type(d).__name__}")
    keys = set(_SCALARS) | _DERIVED | _COST_KEYS
    # goodput came later: a plan written before it reads back without one
    # machine (the machine profile used) came later too
    # band_basis came with out-of-sample bands
    check_keys(d, keys, where, required=keys - {"peak_mem_gib", "step_time_s", "goodput", "machine", "band_basis"})
    check_types(Estimate, {k: d[k] for k in _SCALARS}, where)
    check_types(Cost, {k: d[k] for k in _COST_KEYS}, where)
    try:
        time = StepTime(**_fields(d["time_s"], StepTime, f"{where}.time_s"))
        # network_bytes is required although CommEntry defaults it: a ledger without it would draw
        # no inter-node traffic at all
        comm = tuple(CommEntry(**_fields(e, CommEntry, f"{where}.comm[{i}]", {"network_bytes"}))
                     for i, e in enumerate(d["comm"]))
        mem = None
        if d["memory"] is not None:
            m = d["memory"]
            check_keys(m, {"bytes", "gib", "activation_groups", "activation_groups_gib"} | _MEMORY_META,
                       f"{where}.memory", required={"bytes", "activation_groups"} | _MEMORY_META)
            check_types(MemoryBreakdown, {k: m[k] for k in _MEMORY_META}, f"{where}.memory")
            groups = m["activation_groups"]
            if not isinstance(groups, dict) or not all(_number(v) for v in groups.values()):
                raise TrainplanError(f"{where}.memory.activation_groups must map names to numbers")
            terms = {k: v for k, v in m["bytes"].items() if not k.startswith("total")}
            terms = _fields(terms, MemoryBreakdown, f"{where}.memory.bytes")
            if any(isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 for v in terms.values()):
                raise TrainplanError(f"{where}.memory.bytes: every term must be a number >= 0")
            # bytes are floats inside (MemoryBreakdown.terms() lists the float fields): 0 reads as 0.0
            mem = MemoryBreakdown(**{k: float(v) for k, v in terms.items()},
                                  activation_groups=dict(m["activation_groups"]),
                                  **{k: m[k] for k in _MEMORY_META})
        cost_ = Cost(**{k: d[k] for k in _COST_KEYS})
        if not isinstance(d["band"], list) or len(d["band"]) != 2 or not all(_number(x) for x in d["band"]):
            raise TrainplanError(f"{where}: band must be a list of two numbers, got {d['band']!r}")
        band = tuple(float(x) for x in d["band"])
        if not isinstance(d.get("band_basis", ""), str):
            raise TrainplanError(f"{where}: band_basis must be text, got {d['band_basis']!r}")
        mach = d.get("machine") or {}
        check_keys(mach, {"profile", "outside_grid", "derived"}, f"{where}.machine")
        if (not isinstance(mach.get("profile"), (str, type(None))) or not isinstance(mach.get("outside_grid") or [], list)
                or not isinstance(mach.get("derived") or [], list)):
            raise TrainplanError(f"{where}.machine: profile must be a name or null, outside_grid and derived lists")
        machine = {"machine": mach.get("profile"), "outside": tuple(str(x) for x in mach.get("outside_grid") or ()),
                   "derived": tuple(str(x) for x in mach.get("derived") or ())}
        gp = d.get("goodput")
        if gp is not None:
            gp = Goodput(**{**_fields(gp, Goodput, f"{where}.goodput"), "sources": tuple(gp["sources"])})
    except (TypeError, ValueError, AttributeError) as e:
        raise TrainplanError(f"{where}: malformed ({e})") from None
    return Estimate(memory=mem, time=time, comm=comm, cost=cost_, band=band, goodput=gp, **machine,
                    band_basis=d.get("band_basis", ""), **{k: d[k] for k in _SCALARS})


def _fields(d: dict, cls, where: str, also_required: set[str] = frozenset()) -> dict:
    """d's keys checked against cls's fields: required are those without a default, and
    `also_required`."""
    from dataclasses import MISSING, fields

    from trainplan.errors import TrainplanError
    from trainplan.parsing import check_keys, check_types

    if not isinstance(d, dict):
        raise TrainplanError(f"{where}: expected an object, got {type(d).__name__}")
    fs = [f for f in fields(cls) if f.init]
    required = {f.name for f in fs if f.default is MISSING and f.default_factory is MISSING} | also_required
    check_keys(d, {f.name for f in fs}, where, required=required)
    check_types(cls, d, where)
    return d


def _number(v) -> bool:
    import math

    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


BINDINGS = ("memory", "compute", "communication", "bubble", "host offload")  # what _binding names


def _binding(t: StepTime, fits: bool) -> str:
    if not fits:
        return "memory"
    parts = {"compute": t.compute + t.recompute + t.optimizer + t.nongemm, "communication": t.exposed_comm,
             "bubble": t.bubble, "host offload": t.offload}
    return max(parts, key=parts.get)


def job_goodput(job: Job, layout: Layout, step_s: float, rel: Reliability | None = None) -> Goodput:
    """Goodput of `layout` at `step_s` seconds per step (costs/goodput.py). `rel` None: the catalog's
    defaults, saving to the checkpoint storage of the node's cloud where the catalog names one."""
    rel = rel or reliability(job.cluster.node.checkpoint_storage)
    ckpt = total_params(job.model) * checkpoint_bytes_per_param(layout.recipe, layout.sharding)
    return goodput(step_s, job.cluster.num_gpus, ckpt, rel)


def estimate(job: Job, layout: Layout, profile: Profile | None = None, *, with_memory: bool = True,
             rel: Reliability | None = None) -> Estimate:
    """Predict one layout of one job. Assumes check_layout(job, layout) passed.

    `with_memory=False` skips the memory model (calibration fits time only); `memory` is then None.
    `rel`: failure rate, restart time and checkpoint storage for the goodput (default: the
    catalog's defaults, hardware/reliability.toml, with the node's own checkpoint storage: job_goodput).
    """
    from trainplan.costs.fit import capacity, within
    from trainplan.costs.memory import memory_breakdown

    prof = profile or default_profile()
    r = step_time(job, layout, prof)
    c, w = job.cluster, job.workload
    t = r.time.total
    tps = w.tokens_per_step / t
    per_gpu = tps / c.num_gpus
    peak = c.num_gpus * mfu_peak(c.gpu)
    own_peak = layout.recipe.peak(c.gpu)
    mf = model_flops(job.model)
    noncausal = w.tokens_per_step * mf.model_per_token(w.seq_len, causal=False)
    mem = memory_breakdown(job, layout) if with_memory else None
    fits = mem is None or within(mem.total, capacity(job))  # the point estimate: no band
    # the out-of-sample error of runs like this one (band.py); a GEMM priced through a cited ratio
    # carries the ratio table's own error on top (costs/measured.py), and a GPU whose matmul ceiling
    # nobody measured the spread of its siblings' (hardware/evidence.py)
    b = prof.throughput_band(c.gpu.arch, job.model.moe is not None, c.num_gpus, layout.stack, model_features(job.model))
    wide = ceiling_widening(c.gpu)
    err = b.error + r.microbatch.derived_error + wide.error
    return Estimate(
        memory=mem, time=r.time, comm=r.comm, flops_per_step=r.model_flops,
        hardware_flops_per_step=r.hardware_flops, tokens_per_s=tps, tokens_per_s_per_gpu=per_gpu,
        mfu=r.model_flops / t / peak, mfu_noncausal=noncausal / t / peak, hfu=r.hardware_flops / t / peak,
        mfu_recipe_peak=r.model_flops / t / (c.num_gpus * own_peak), peak_tflops_per_gpu=mfu_peak(c.gpu) / TFLOPS,
        recipe_peak_tflops_per_gpu=own_peak / TFLOPS,
        cost=cost(c, tps, w.tokens), binding=_binding(r.time, fits),
        band=(per_gpu / (1 + err), per_gpu * (1 + err)), band_basis=b.basis, profile=prof.name,
        goodput=job_goodput(job, layout, t, rel),
        machine=(m.name if (m := prof.machine_for(c.gpu.name)) else None), outside=r.outside,
        derived=r.derived + wide.lines,
    )
