"""Results in the shapes the commands print, for the report tests.

The plan is real: five layouts of Llama 3.1 70B on 2 x ml.p6-b200.48xlarge estimated by trainplan's
cost model and written as plan.json holds them (the chosen plan, its runners-up, a Pareto set), so
that a change of the Estimate or plan.json shape shows up here. compare and validate results are
hand-built in the shapes those commands print (report.records docstring).
"""

from __future__ import annotations

import functools

from trainplan.estimate import estimate
from trainplan.hardware import Cluster, find_node
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.models.spec import ModelSpec
from trainplan.plan import Alternative, Plan

LLAMA_70B = ModelSpec(name="llama-3.1-70b", model_type="llama", num_layers=80, hidden_size=8192,
                      num_heads=64, num_kv_heads=8, head_dim=128, ffn_size=28672, vocab_size=128256)

LAYOUTS = {  # chosen first, then the runners-up in rank order (tokens/s)
    "hsdp_fp8": Layout(precision="fp8_rowwise", ac="full", micro_batch=1, grad_accum=8,
                       dp_replicate=2, dp_shard=8),
    "fsdp16_fp8": Layout(precision="fp8_rowwise", ac="full", micro_batch=1, grad_accum=8, dp_shard=16),
    "fsdp16": Layout(ac="full", micro_batch=2, grad_accum=4, dp_shard=16),
    "hsdp": Layout(ac="full", micro_batch=1, grad_accum=8, dp_replicate=2, dp_shard=8),
    "tp2": Layout(ac="full", micro_batch=1, grad_accum=16, dp_shard=8, tp=2),
}
REASONS = (
    "fp8 rowwise: +44% tokens/s over bf16 at hidden 8192",
    "HSDP (2 x 8): FSDP traffic stays on NVLink; only the gradient all-reduce crosses EFA",
    "full checkpointing: selective needs 247.0 of 179.0 GiB",
)


def job(nodes: int = 2) -> Job:
    return Job(LLAMA_70B, Cluster(find_node("ml.p6-b200.48xlarge"), nodes),
               Workload(seq_len=8192, global_batch=128, tokens=1_000_000_000_000))


@functools.cache
def _alternatives() -> tuple[Alternative, ...]:
    j = job()
    return tuple(Alternative(j, lay, estimate(j, lay)) for lay in LAYOUTS.values())


@functools.cache
def _scaling() -> tuple[Alternative, ...]:
    """The chosen layout's family on 1 to 16 nodes (search/scaling.py), as `plan` writes it."""
    from trainplan.search.scaling import scaling_series

    chosen = _alternatives()[0]
    return tuple(Alternative(j, lay, e) for j, lay, e in scaling_series(chosen.job, chosen.layout, estimate))


def plan(runners_up: bool = True, pareto: tuple[int, ...] = (0, 1, 4), scaling: bool = True) -> Plan:
    """The chosen plan (hsdp_fp8) with the four others as runners-up, `pareto` (indices into
    LAYOUTS' order) as its Pareto set and its family's scaling series."""
    alts = _alternatives()
    chosen = alts[0]
    return Plan(job=chosen.job, layout=chosen.layout, estimate=chosen.estimate, reasons=REASONS,
                runners_up=alts[1:] if runners_up else (), pareto=tuple(alts[i] for i in pareto),
                scaling=_scaling() if scaling else ())


def plan_result() -> dict:
    """`trainplan plan --json`-shaped: the search's flat summary next to the plan.json it wrote."""
    return {"priority": "throughput", "plan": plan().to_dict()}


def compare_result() -> dict:
    return {"model": "llama-3.1-70b", "tokens": 1_000_000_000_000, "instances": [
        {"instance": "ml.p6-b200.48xlarge", "gpu": "b200-180gb", "fits": True, "nodes": 2,
         "tokens_per_s": 18_500, "usd_per_million_tokens": 3.421, "hours_to_tokens": 15014.4},
        {"instance": "ml.p5en.48xlarge", "gpu": "h200-sxm-141gb", "fits": True, "nodes": 2,
         "tokens_per_s": 9_800, "usd_per_million_tokens": 4.210, "hours_to_tokens": 28344.0},
        {"instance": "ml.p5.48xlarge", "gpu": "h100-sxm-80gb", "fits": True, "nodes": 3,
         "tokens_per_s": 10_900, "usd_per_million_tokens": 5.600, "hours_to_tokens": 25483.2},
        {"instance": "ml.p4d.24xlarge", "gpu": "a100-sxm-40gb", "fits": False,
         "why": "does not fit in 4 nodes"},
    ]}


def compare_clouds_result() -> dict:
    """`trainplan compare --json`-shaped, across three clouds (issue #26): each row's cloud, its price
    with the price's date and source (none published for two of them) and its plan's goodput."""
    def row(instance, gpu, cloud, nodes, tps, usd_m, hours, price, date, source, storage, goodput):
        return {"instance": instance, "gpu": gpu, "cloud": cloud, "fits": True, "choice": "cheapest",
                "nodes": nodes, "tokens_per_s": tps, "usd_per_million_tokens": usd_m, "hours_to_tokens": hours,
                "price_usd_per_hour": price, "price_kind": "on-demand" if price else "no price published",
                "price_date": date, "price_source": source, "checkpoint_storage": storage, "goodput": goodput}

    return {"model": "llama-3.1-405b", "tokens": 15_000_000_000_000, "tolerance": 0.1, "instances": [
        row("ml.p6-b200.48xlarge", "b200-180gb", "aws", 11, 40_100, 8.678, 103_860.0, 113.93, "2026-01-21",
            "a price table", "fsx-lustre-1000", 0.993),
        row("a4-highgpu-8g", "b200-180gb", "gcp", 11, 40_100, None, 103_860.0, None, None, "none found",
            "gcp-managed-lustre-1000", 0.993),
        row("Standard_ND128isr_GB200_v6", "gb200-186gb", "azure", 22, 54_200, None, 76_815.0, None, None,
            "quote only", "azure-managed-lustre-500", 0.990),
    ]}


@functools.cache
def _validate_result() -> dict:
    from trainplan.profile import default_profile
    from trainplan.validation.dataset import DEV_DATASET, load_dataset
    from trainplan.validation.run import run

    _, cases = load_dataset(DEV_DATASET)
    ids = ("M001", "M009", "M020", "M091", "M099", "M171")  # A100, a skipped one, H100, B200, H200, GB200
    return run([c for c in cases if c.id in ids], default_profile())


def validate_result() -> dict:
    """What `trainplan validate --json` prints for six records of the packaged dev dataset."""
    import copy

    return copy.deepcopy(_validate_result())


def validate_points_sample() -> dict:
    """Hand-built records for report.records.validate_points; M004 is skipped, M005 has no
    `measured` (error only)."""
    def rec(rid, gpu, pred, meas):
        return {"id": rid, "gpu": gpu, "source_key": "src-" + gpu, "predicted": pred, "measured": meas,
                "error": {k: pred[k] / meas[k] - 1 for k in pred if meas.get(k)}, "skipped_reason": None}
    keys = ("peak_mem_gib", "step_time_s", "tokens_per_s_per_gpu", "mfu")
    P = lambda *v: dict(zip(keys, v))
    return {"records": [
        rec("M001", "a100-sxm-80gb", P(None, 1.2, 853.3, 0.38), P(None, 1.1, 930.9, 0.415)),
        rec("M002", "h100-sxm-80gb", P(61.0, 2.9, 5650.0, 0.41), P(66.2, 3.1, 5300.0, 0.385)),
        rec("M003", "b200-180gb", P(140.2, 5.5, 11900.0, 0.36), P(151.0, 5.0, 13100.0, 0.40)),
        {"id": "M004", "predicted": None, "error": None,
         "skipped_reason": "precision nvfp4 on a GPU without fp4 tensor cores"},
        {"id": "M005", "gpu": "h100-sxm-80gb", "predicted": P(70.0, 4.0, 3000.0, 0.45),
         "error": {"peak_mem_gib": 0.1, "step_time_s": -0.2, "tokens_per_s_per_gpu": 0.25,
                   "mfu": 0.25}, "skipped_reason": None},
    ], "summary": {"tokens_per_s_per_gpu": {"count": 4, "median_abs": 0.1}}}
