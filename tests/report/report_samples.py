"""Hand-built results in the shapes the commands print (report.inputs / report.records docstrings).

The numbers are made up but plausible (Llama 3.1 70B on 2 x ml.p6-b200.48xlarge); they exist to
exercise the reports, not to be right. Every estimate is built by one function so that a change
of the Estimate.to_dict() shape is one edit here.
"""

from __future__ import annotations

from trainplan.hardware import Cluster, find_node
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.models.spec import ModelSpec
from trainplan.plan import Plan

GiB = 1024**3
GB = 1e9

LLAMA_70B = ModelSpec(name="llama-3.1-70b", model_type="llama", num_layers=80, hidden_size=8192,
                      num_heads=64, num_kv_heads=8, head_dim=128, ffn_size=28672, vocab_size=128256)


TOKENS_PER_STEP = 8192 * 128
PEAK_BF16 = 2.25e15  # B200 dense bf16 FLOP/s (HARDWARE_FACTS.md); only to make MFU plausible


def estimate(mem_gib: dict, time_s: dict, comm: list[tuple], gpus: int = 16) -> dict:
    """An Estimate.to_dict()-shaped dict. comm rows: (collective, dimension, tier, GB, s, exposed_s)."""
    step = sum(v if not isinstance(v, dict) else sum(v.values()) for v in time_s.values())
    tokens_per_s = TOKENS_PER_STEP / step
    mfu = 6 * 70.6e9 * tokens_per_s / gpus / PEAK_BF16
    return {
        "memory": {f"{k}_gib": v for k, v in mem_gib.items()} | {"total_gib": sum(mem_gib.values())},
        "peak_mem_gib": sum(mem_gib.values()),
        "time": {**time_s, "total": step},
        "step_time_s": step,
        "comm": [{"collective": c, "dimension": d, "tier": t, "bytes": gb * GB, "seconds": s,
                  "exposed_s": e, "count": 80} for c, d, t, gb, s, e in comm],
        "tokens_per_s": tokens_per_s,
        "tokens_per_s_per_gpu": tokens_per_s / gpus,
        "mfu": mfu,
        "cost_per_hour": 2 * 113.93,
        "usd_per_million_tokens": 2 * 113.93 / (tokens_per_s * 3600) * 1e6,
        "binding": "compute",
    }


def _mem(states: float, act: float, logits: float = 9.8) -> dict:
    return {"parameters": states * 0.25, "gradients": states * 0.25, "optimizer": states * 0.5,
            "unsharded_in_flight": 6.4, "activations": act, "logits": logits, "overheads": 3.1}


def _candidates() -> list[tuple[Layout, dict]]:
    hsdp = Layout(ac="selective", micro_batch=1, grad_accum=8, dp_replicate=2, dp_shard=8)
    fsdp16 = Layout(ac="selective", micro_batch=1, grad_accum=8, dp_shard=16)
    full = Layout(ac="full", micro_batch=2, grad_accum=4, dp_shard=16)
    tp2 = Layout(ac="none", micro_batch=1, grad_accum=16, dp_shard=8, tp=2)
    fp8 = Layout(precision="fp8_rowwise", ac="selective", micro_batch=1, grad_accum=8,
                 dp_replicate=2, dp_shard=8)
    nv = "nvlink"
    return [
        (fp8, estimate(_mem(65.8, 71.0), {"compute": 24.1, "recompute": 1.9, "exposed_comm": {
            "fsdp": 0.9, "dp": 0.4}, "optimizer": 0.3, "non_gemm": 2.2},
            [("all-gather", "fsdp", nv, 61.9, 5.1, 0.5), ("reduce-scatter", "fsdp", nv, 123.8, 9.2, 0.4),
             ("all-reduce", "dp", "efa", 17.6, 3.1, 0.4)])),
        (hsdp, estimate(_mem(65.8, 71.0), {"compute": 29.8, "recompute": 2.4, "exposed_comm": {
            "fsdp": 1.1, "dp": 0.4}, "optimizer": 0.3, "non_gemm": 2.2},
            [("all-gather", "fsdp", nv, 123.8, 6.1, 0.6), ("reduce-scatter", "fsdp", nv, 123.8, 6.3, 0.5),
             ("all-reduce", "dp", "efa", 17.6, 3.1, 0.4)])),
        (fsdp16, estimate(_mem(32.9, 71.0), {"compute": 29.6, "recompute": 2.4, "exposed_comm": {
            "fsdp": 2.6}, "optimizer": 0.2, "non_gemm": 2.2},
            [("all-gather", "fsdp", nv, 17.4, 1.1, 0.2), ("all-gather", "fsdp", "efa", 53.1, 7.9, 1.4),
             ("reduce-scatter", "fsdp", "efa", 66.4, 8.5, 1.0)])),
        (full, estimate(_mem(32.9, 22.5), {"compute": 29.6, "recompute": 9.8, "exposed_comm": {
            "fsdp": 1.3}, "optimizer": 0.2, "non_gemm": 2.0},
            [("all-gather", "fsdp", nv, 8.7, 0.6, 0.1), ("all-gather", "fsdp", "efa", 26.5, 3.9, 0.7),
             ("reduce-scatter", "fsdp", "efa", 33.2, 4.2, 0.5)])),
        (tp2, estimate(_mem(65.8, 88.0, 4.9), {"compute": 30.1, "exposed_comm": {"tp": 3.9, "fsdp": 0.5},
                                                "optimizer": 0.3, "non_gemm": 2.0},
            [("all-gather", "tp", nv, 210.0, 3.1, 2.0), ("reduce-scatter", "tp", nv, 210.0, 3.0, 1.9),
             ("all-gather", "fsdp", nv, 61.9, 3.2, 0.3), ("all-reduce", "dp", nv, 8.8, 0.5, 0.0)])),
    ]


def plan_result() -> dict:
    """`trainplan plan --json`-shaped: the chosen plan.json, runners-up, Pareto set."""
    cluster = Cluster(find_node("ml.p6-b200.48xlarge"), 2)
    job = Job(LLAMA_70B, cluster, Workload(seq_len=8192, global_batch=128, tokens=1_000_000_000_000))
    cands = _candidates()
    chosen_layout, chosen_est = cands[0]
    plan = Plan(job=job, layout=chosen_layout, estimate=chosen_est, reasons=(
        "fp8 rowwise: +21% tokens/s over bf16 at hidden 8192",
        "HSDP (2 x 8): FSDP traffic stays on NVLink; only the gradient all-reduce crosses EFA",
        "selective checkpointing: fits with 14 GiB free; full checkpointing costs +20% step time",
    )).to_dict()
    others = [{"layout": lay.to_dict(), "estimate": est} for lay, est in cands[1:]]
    return {"plan": plan, "runners_up": others,
            "pareto": [{"layout": chosen_layout.to_dict(), "estimate": chosen_est}, others[1], others[2]]}


def compare_result() -> dict:
    return {"model": "llama-3.1-70b", "tokens": 1_000_000_000_000, "instances": [
        {"instance": "ml.p6-b200.48xlarge", "nodes": 2, "tokens_per_s": 18_500,
         "usd_per_billion_tokens": 3421.0, "days_to_budget": 625.6},
        {"instance": "ml.p5en.48xlarge", "nodes": 2, "tokens_per_s": 9_800,
         "usd_per_billion_tokens": 4210.0, "days_to_budget": 1181.0},
        {"instance": "ml.p5.48xlarge", "nodes": 3, "tokens_per_s": 10_900,
         "usd_per_billion_tokens": 5600.0, "days_to_budget": 1061.8},
        {"instance": "ml.p4d.24xlarge", "nodes": None, "tokens_per_s": None,
         "usd_per_billion_tokens": None, "days_to_budget": None,
         "reason": "does not fit in 4 nodes"},
    ]}


def validate_result() -> dict:
    """`trainplan validate --json`-shaped; M004 is skipped, M005 has no `measured` (error only)."""
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
