"""`launch k8s --k8s-api jobset`: the plan as a JobSet (jobset.x-k8s.io/v1alpha2), as Google's A4 / A4X
guides run multi-node training on GKE, admitted by Kueue with --queue (jobset.toml [GKE]).

The same objects and pod as the PyTorchJob (k8s.pod_job: the ConfigMap with the plan and any
exported files, the checkpoint claim, the pod template with its GPUs, network and grace period),
under one replicated Job: an indexed batch/v1 Job of one pod per node. No operator starts the
ranks: torchrun does, on every pod, meeting at a c10d rendezvous on the stable DNS name JobSet
gives pod 0 (<jobset>-node-0-0.<jobset>). A failed pod fails its Job and the JobSet restarts
all of them together (failurePolicy.maxRestarts), so every rank resumes from the last checkpoint.
With --queue on GKE the pods carry Kueue's topology annotation (jobset.toml [topology]): a job
that fits in one A4X / A4X Max NVLink sub-block is required inside it.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path

from trainplan.launch import k8s, torchrun
from trainplan.launch.base import DEFAULT_RDZV_PORT, Rendered
from trainplan.parsing import read_toml

MANIFEST = "jobset.json"


@functools.cache
def data() -> dict:
    return read_toml(Path(__file__).with_name("jobset.toml"))


def max_name_len(nodes: int) -> int:
    """The longest JobSet name whose pods get valid names (jobset.toml [HOOK]): the longest pod name
    is <jobset>-<replicatedJob>-0-<nodes - 1>-<5 letters>, at most 63 characters; at most the
    PyTorchJob's 48 as well, so one --job-name suits both kinds."""
    t = data()
    return min(48, 63 - len(f"-{t['replicated_job']}-0-{nodes - 1}{t['pod_name_suffix']}"))


def render(plan, options: k8s.K8sOptions) -> Rendered:
    node, nodes = plan.job.cluster.node, plan.job.cluster.nodes
    t = data()
    rjob = t["replicated_job"]

    def launcher(name: str) -> list[str]:
        host = t["rendezvous_host"].format(name=name, replicated_job=rjob)
        return torchrun.c10d(nodes, node.gpus_per_node, f"{host}:{DEFAULT_RDZV_PORT}", name)

    job = k8s.pod_job(plan, options, launcher, max_name_len=max_name_len(nodes))
    template = job.template()
    annotation, note = topology(plan) if options.queue else ((), "")
    if annotation:
        template["metadata"].setdefault("annotations", {})[annotation[0]] = annotation[1]
    # A Job's pods may not restart in place (Always is refused); a failure fails the Job, and the
    # JobSet restarts every Job together (jobset.toml max_restarts).
    template["spec"]["restartPolicy"] = "Never"
    indexed = {"parallelism": nodes, "completions": nodes, "completionMode": "Indexed", "backoffLimit": 0,
               "template": template}
    jobset = {"apiVersion": t["api_version"], "kind": t["kind"], "metadata": k8s.job_meta(job, options),
              "spec": {"network": {"enableDNSHostnames": True},
                       "failurePolicy": {"maxRestarts": t["max_restarts"]},
                       "replicatedJobs": [{"name": rjob, "replicas": 1,
                                           "template": {"metadata": {"labels": dict(job.labels)},
                                                        "spec": indexed}}]}}
    rendered = k8s.manifest(job, [*job.items, jobset], MANIFEST)
    notes = (*rendered.notes, *((note,) if note else ()), "the cluster needs the JobSet controller"
             + (" and Kueue with a LocalQueue " + options.queue if options.queue else
                "; pass --queue NAME to have Kueue admit it (GKE's A4/A4X guides do)"))
    return replace(rendered, notes=notes)


def topology(plan) -> tuple[tuple[str, str] | tuple[()], str]:
    """Kueue's topology annotation for the job's pods on a cloud whose levels jobset.toml [topology]
    names (GKE), and a note: where an NVLink domain spans VMs (A4X, A4X Max: an 18-VM sub-block), a
    job that fits in one is required inside one sub-block, so tp / ep reach every GPU over NVLink; a
    larger one whose tp or ep group spans VMs is only preferred there (the annotation holds for the
    whole job, not per group), and the note says so; an 8-GPU domain (the VM) prefers packing by
    host, as Google's A4 example does."""
    node, nodes = plan.job.cluster.node, plan.job.cluster.nodes
    t = data()["topology"]
    levels = t.get(node.cloud or "")
    if levels is None or nodes < 2:
        return (), ""
    if node.nvlink_domain_gpus <= node.gpus_per_node:
        return (t["preferred"], levels["node"]), ""
    if nodes * node.gpus_per_node <= node.nvlink_domain_gpus:
        return (t["required"], levels["nvlink_domain"]), ""
    group = max(plan.layout.tp, plan.layout.ep)
    note = (f"the job's {nodes * node.gpus_per_node} GPUs exceed one NVLink domain ({node.nvlink_domain_gpus}): "
            f"Kueue is asked to prefer {levels['nvlink_domain']}, which does not keep each tp/ep group "
            f"({group} GPUs) inside one domain" if group > node.gpus_per_node else "")
    return (t["preferred"], levels["nvlink_domain"]), note


def problems(job: dict) -> list[str]:
    """What in a JobSet its API would refuse, by jobset.toml [crd]: a field it does not have, a
    required one missing, a nested object that is not one."""
    t, out = data(), []
    for key, want in (("apiVersion", t["api_version"]), ("kind", t["kind"])):
        if job.get(key) != want:
            out.append(f"{key} {job.get(key)!r}, not {want!r}")
    return out + k8s.crd_problems(t["crd"], "JobSet", job, "jobset", "jobset_types.go")
