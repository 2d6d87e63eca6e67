"""The plan a search chose, as plan.json holds it: `to_plan(result)` turns a search.SearchResult into
a plan.Plan with its runners-up, its Pareto set and, given the cost model's `detail`, the chosen
layout's family at other node counts (search/scaling.py); a sequence past the model's context is
marked long_context, and the trainer checkpoints at the interval that maximises goodput."""

from __future__ import annotations

from dataclasses import replace

from trainplan.models.checks import beyond_context
from trainplan.plan import Alternative, Plan, TrainSettings


def _marked(job):
    if beyond_context(job.model, job.workload.seq_len):  # allowed by --allow-long-context: say so
        return replace(job, workload=replace(job.workload, long_context=True))
    return job


def to_plan(result, detail=None) -> Plan:
    """The chosen plan with the runners-up and the Pareto set, each with its full estimate, and
    with `detail(job, layout) -> Estimate` the chosen layout's family at other node counts."""
    from trainplan.search.scaling import scaling_series

    def alt(x):
        return Alternative(_marked(x.job), x.layout, x.estimate)

    c = result.chosen
    job = _marked(c.job)
    reasons = tuple(result.reasons)
    if job.workload.long_context:
        m = job.model
        reasons += ((f"long context: sequence {job.workload.seq_len} is past {m.name}'s max_position_embeddings "
                     f"({m.max_position_embeddings}), asked for with --allow-long-context (RoPE extrapolation)"),)
    # the trainer saves at the interval that maximises goodput (costs/goodput.py)
    gp = c.estimate.goodput if c.estimate is not None else None
    train = TrainSettings(checkpoint_every=gp.checkpoint_interval_steps) if gp is not None else TrainSettings()
    if gp is not None:
        reasons += ((f"checkpoint every {gp.checkpoint_interval_steps} steps ({gp.checkpoint_interval_s / 60:.0f} min):"
                     f" goodput {gp.goodput:.1%} with a failure every {gp.mtbf_s / 3600:.1f} h and "
                     f"{gp.save_s:.0f} s saves (Young's interval)"),)
    return Plan(job=job, layout=c.layout, estimate=c.estimate, reasons=reasons, train=train,
                hf_config=result.query.hf_config, runners_up=tuple(alt(x) for x in result.runners_up),
                pareto=tuple(alt(x) for x in result.pareto),
                scaling=tuple(Alternative(_marked(j), lay, e) for j, lay, e in
                              (scaling_series(c.job, c.layout, detail) if detail else ())))
