"""Fitting a plan to the processes actually started (torch-free, so `train` and `launch` fit before
any process starts).

A plan for 8 GPUs can be tried on 1 GPU or 2 CPU processes with the same per-GPU work: dp_shard
is rescaled to the world size (and with it the global batch), and the cluster becomes one node
of the same instance type holding `world` GPUs, so that the estimate of the fitted plan predicts
exactly what runs. The run directory's plan.json holds the fitted plan; compare-run and calibrate
read it back with the run's world size (plan.plan_from_dict's `world`).
"""

from __future__ import annotations

from dataclasses import replace

from trainplan.errors import TrainplanError
from trainplan.hardware import Cluster, node_for_world
from trainplan.job import Job
from trainplan.plan import Plan


def fit_to_world(plan: Plan, world: int) -> Plan:
    L = plan.layout
    other = L.dp_replicate * L.tp * L.pp * L.cp
    if world % other:
        raise TrainplanError(f"--fit-world: {world} processes is not a multiple of dp_replicate*tp*pp*cp = {other}")
    if L.num_gpus == world and plan.job.cluster.num_gpus == world:
        return plan
    layout = L.with_(dp_shard=world // other)
    if layout.sharding == "none" and layout.dp_shard > 1:
        layout = layout.with_(sharding="fsdp")
    w = replace(plan.job.workload, global_batch=layout.global_batch)
    cluster = Cluster(node_for_world(plan.job.cluster.node, world), 1)
    return replace(plan, layout=layout, job=Job(plan.job.model, cluster, w))
