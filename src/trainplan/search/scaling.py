"""The chosen layout's family at other node counts: the scaling series a plan carries.

A family keeps everything of the layout but the data-parallel degree: precision, checkpointing,
micro-batch, tp, pp (schedule, vp, split), cp, ep and the sharding, with the global batch of the
job. Scaling the node count by f scales the data-parallel degree by f (dp_replicate when the
layout replicates, else dp_shard) and divides the gradient accumulation by f, so a series is
the strong scaling of one run: the same batch on more GPUs. A count whose layout does not divide
the batch, breaks the interleaved schedule's rounds, or does not fit in memory is left out.
Pure: `evaluate(job, layout)` gives the estimate (the search's evaluator or estimate()).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from trainplan.errors import TrainplanError
from trainplan.job import Job
from trainplan.layout import Layout, check_layout

FACTORS = (1 / 8, 1 / 4, 1 / 2, 1, 2, 4, 8)


def family_at(job: Job, layout: Layout, nodes: int) -> tuple[Job, Layout] | None:
    """The layout's family member on `nodes` nodes, or None when it cannot exist there."""
    gpus = nodes * job.cluster.node.gpus_per_node
    fixed = layout.tp * layout.pp * layout.cp
    if gpus % fixed:
        return None
    dp = gpus // fixed
    other = layout.dp_shard if layout.dp_replicate > 1 else layout.dp_replicate
    if dp % other:
        return None
    per_step = layout.micro_batch * dp
    gb = job.workload.global_batch
    if gb % per_step:
        return None
    ga = gb // per_step
    if layout.pp_schedule == "interleaved" and ga % layout.pp:
        return None
    changes = {"dp_replicate": dp // other} if layout.dp_replicate > 1 else {"dp_shard": dp // other}
    if layout.sharding == "none":
        changes = {"dp_replicate": dp}
    lay = layout.with_(grad_accum=ga, **changes)
    j = replace(job, cluster=replace(job.cluster, nodes=nodes))
    try:
        check_layout(j, lay)
    except TrainplanError:
        return None
    return j, lay


def scaling_series(job: Job, layout: Layout, evaluate: Callable, factors=FACTORS) -> list[tuple[Job, Layout, object]]:
    """(job, layout, estimate) of the family at nodes x each factor that exists and fits, by nodes."""
    out = []
    for f in factors:
        n = job.cluster.nodes * f
        if n < 1 or n != int(n):
            continue
        member = family_at(job, layout, int(n))
        if member is None:
            continue
        e = evaluate(*member)
        if e is not None and e.fits:
            out.append((*member, e))
    return out
