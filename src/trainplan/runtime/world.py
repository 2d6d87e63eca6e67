"""Fitting a plan to the processes actually started (torch-free, so compare-run can use it).

A plan for 8 GPUs can be tried on 1 GPU or 2 CPU processes with the same per-GPU work: dp_shard
is rescaled to the world size (and with it the global batch), and the cluster becomes one node
of the same instance type holding `world` GPUs, so that the estimate of the fitted plan predicts
exactly what runs.
"""

from __future__ import annotations

from dataclasses import fields, replace

from trainplan.errors import TrainplanError
from trainplan.hardware import Cluster, find_node
from trainplan.job import Job, Workload
from trainplan.layout import layout_from_dict
from trainplan.models.spec import spec_from_dict
from trainplan.plan import Plan, read_estimate, train_from_dict, workload_from_dict


def node_for_world(node, world: int):
    """The same instance type with `world` GPUs (a part of one node)."""
    if world == node.gpus_per_node:
        return node
    return replace(node, gpus_per_node=world, nvlink_domain_gpus=min(node.nvlink_domain_gpus, world))


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


def plan_from_run(d: dict, world: int) -> Plan:
    """The plan a run executed, from its plan.json and world size, without the cluster's GPU-count
    check (a fitted or demo run used part of a node)."""
    cluster = Cluster(node_for_world(find_node(d["cluster"]["instance"]), world), 1)
    wd = {k: v for k, v in d["workload"].items() if k in {f.name for f in fields(Workload)}}
    return Plan(
        job=Job(spec_from_dict(d["model"]), cluster, workload_from_dict(wd, "run plan: workload")),
        layout=layout_from_dict(d["layout"]), train=train_from_dict(d.get("train") or {}, "run plan: train"),
        estimate=read_estimate(d.get("estimate"), "run plan: estimate", d.get("created_by", "unknown")),
        reasons=tuple(d.get("reasons") or ()), hf_config=d.get("hf_config"),
    )
