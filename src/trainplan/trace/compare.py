"""Traced vs analytic: the planner's own formulas (costs/activations.py, costs/flops.py) evaluated
for the same model and settings, and the relative differences.

Like-for-like conventions:
- activations: bytes kept for backward per decoder layer, averaged over the full model's layers
  (the analytic per-layer policy follows the trace: partial = first `ac_layers` layers full);
- FLOPs: torch.utils.flop_counter counts attention without causal skipping and its flash backward
  at 2.5x the forward, so the model matmul FLOPs (projections, MLP, experts, LM head; forward +
  backward, no recompute) are compared exactly (`flops_matmul`); recompute is compared on its own
  (`recompute_flops_matmul`) with the planner's own rule (costs/flops.recompute_per_token): torch's
  non-reentrant checkpoint stops recomputing once the last saved tensor is rebuilt (the layer's
  last matmul is not re-run), and torchtitan's selective policy recomputes every second matmul;
  the step total is reported with attention non-causal.
"""

from __future__ import annotations

from trainplan.trace.result import TraceResult


def rel(traced: float, analytic: float) -> float | None:
    """(analytic - traced) / traced: positive when the analytic model over-estimates."""
    return None if not traced else (analytic - traced) / traced


def planner_activations_per_layer(spec, s) -> float:
    """Bytes kept for backward per decoder layer, averaged over the model's layers, as the planner
    itself counts them: costs/memory.py (the memory model of `plan` and `estimate`) for the trace's
    layout (one micro-batch of the traced size, FSDP2 over the traced world, no tp/pp/cp), which
    applies no trace calibration. FSDP2 even for a world of one: the planner then counts PyTorch's
    conventions (torchtitan's), the code the tracer runs. The cluster only has to hold the world:
    activations do not depend on the GPU."""
    from trainplan.costs.memory import memory_breakdown
    from trainplan.hardware import cluster
    from trainplan.job import Job, Workload
    from trainplan.layout import Layout

    node = "ml.p6-b200.48xlarge"  # 8 GPUs per node
    layout = Layout(precision=s.precision, ac=s.ac, ac_layers=s.ac_layers if s.ac == "partial" else 0,
                    micro_batch=s.micro_batch, grad_accum=1, dp_shard=s.fsdp, sharding="fsdp")
    job = Job(spec, cluster(node, -(-s.fsdp // 8)), Workload(s.seq_len, s.micro_batch * s.fsdp))
    b = memory_breakdown(job, layout)
    return b.activations / b.microbatches_in_flight / spec.num_layers


def analytic(spec, r: TraceResult) -> dict:
    from trainplan.costs.activations import ActivationContext, layer_activations, saved_kinds
    from trainplan.costs.flops import model_flops, recompute_per_token
    from trainplan.models import count_params
    from trainplan.models.layers import moe_flags

    s = r.settings
    tokens = s.micro_batch * s.seq_len
    # the traced code on CPU runs transformers' PyTorch Mamba-1 scan (mamba_ssm's kernels are CUDA's):
    # the formulas of that path; the planner column keeps the kernel's, which a GPU run uses
    ctx = ActivationContext(seq_len=s.seq_len, elem_bytes=2, mamba_scan="reference")
    policies = r.full_policies()
    moe = moe_flags(spec)
    mixers = saved_kinds(spec)  # the Mamba-2, DeltaNet and one-part blocks keep their own tensors
    per_layer = [layer_activations(spec, moe[i], ctx, policies[i], *mixers[i]) for i in range(spec.num_layers)]
    from trainplan.calibration.activations import correction

    act = [x.total * tokens for x in per_layer]
    calibrated = [(x.total + correction(spec, moe[i], policies[i], block=mixers[i], seq_len=s.seq_len)) * tokens
                  for i, x in enumerate(per_layer)]
    by_kind: dict = {}  # as the trace keys its layers (TraceResult.full): the kinds of config.layer_kinds
    for i, kind in enumerate(r.full_kinds):
        by_kind.setdefault(f"{kind}|ac={policies[i]}", {"model": round(act[i]), "calibrated": round(calibrated[i])})
    groups: dict = {}
    for x in per_layer:
        for g, v in x.to_dict().items():
            groups[g] = groups.get(g, 0.0) + v * tokens / len(per_layer)
    mf = model_flops(spec)
    linear = mf.linear_per_token() * tokens
    head = mf.head_per_token * tokens
    attn_fwd = mf.attention_per_token(s.seq_len, causal=False) * tokens
    matmul = 3 * (linear + head)
    # The planner's recompute rule for PyTorch's non-reentrant checkpoint and torchtitan's per-op
    # policy (costs/flops.py steps 9-13), with attention non-causal as torch's flop counter counts it.
    re = recompute_per_token(mf, s.seq_len, s.ac, "pytorch", s.ac_layers, causal=False)
    recompute = re.linear * tokens
    return {
        "params": count_params(spec).total,
        "activation_bytes_per_layer": round(sum(act) / len(act)),
        # what `plan` and `estimate` use: the memory model for this layout, uncalibrated
        "activation_bytes_per_layer_planner": round(planner_activations_per_layer(spec, s)),
        # + calibration/activations/hf_eager.json: what the formulas miss against HF eager code
        # (fitted data for the tracer's own checks; the planner does not add it)
        "activation_bytes_per_layer_calibrated": round(sum(calibrated) / len(calibrated)),
        "activation_groups_per_layer": {k: round(v) for k, v in groups.items() if v},
        "activation_bytes_per_layer_by_kind": by_kind,
        "flops_matmul": round(matmul),
        "recompute_flops_matmul": round(recompute),
        "flops_per_step": round(matmul + recompute + 3 * attn_fwd + re.attention * tokens),
    }


def notes(spec) -> list[str]:
    """What the reader of a comparison must know about how the two sides differ by design."""
    if spec.mamba1 is None:
        return []
    return [("Mamba-1 layers: the trace ran transformers' PyTorch scan (no mamba_ssm on CPU), compared with "
            "its own accounting; the planner counts mamba_ssm's kernel, which recomputes the per-state "
            "tensors in backward (costs/activations._mamba1)")]


def comparison(spec, r: TraceResult) -> dict:
    """{'analytic': ..., 'relative_difference': ...} for a trace; spec is the model's ModelSpec."""
    a = analytic(spec, r)
    t = r.full()
    model_kinds = a["activation_bytes_per_layer_by_kind"]  # a kind the slice lacked was traced as another
    kinds = {k: {w: rel(v, model_kinds[k][w]) for w in ("model", "calibrated")}
             for k, v in t["activation_bytes_per_layer_by_kind"].items() if k in model_kinds}
    return {
        "analytic": a,
        "relative_difference": {
            "params": rel(t["params"], a["params"]),
            "activation_bytes_per_layer": rel(t["activation_bytes_per_layer"], a["activation_bytes_per_layer"]),
            "activation_bytes_per_layer_planner": rel(t["activation_bytes_per_layer"],
                                                      a["activation_bytes_per_layer_planner"]),
            "activation_bytes_per_layer_calibrated": rel(t["activation_bytes_per_layer"],
                                                         a["activation_bytes_per_layer_calibrated"]),
            "activation_bytes_per_layer_by_kind": kinds,
            "flops_matmul": rel(t["model_flops_matmul"], a["flops_matmul"]),
            "recompute_flops_matmul": rel(t["recompute_flops_by_class"]["matmul"], a["recompute_flops_matmul"]),
            "flops_per_step": rel(t["flops_per_step"], a["flops_per_step"]),
        },
    }
