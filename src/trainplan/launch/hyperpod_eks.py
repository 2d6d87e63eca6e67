"""Target `hyperpod-eks`: a HyperPodPyTorchJob for the SageMaker HyperPod training operator on EKS.

The same pod as `launch k8s` (k8s.pod_job: the ConfigMap with the plan and any exported files,
the checkpoint claim at /checkpoints, GPUs and EFA, the grace period) under the operator's own kind
(apiVersion sagemaker.amazonaws.com/v1), with the HyperPod elastic agent (`hyperpodrun`) in
torchrun's place: the operator restarts the ranks through it on a fault and, with SIGTERM as its
shutdown signal, lets them save first. Names and sources in hyperpod_eks.toml; every manifest is
checked against the operator's models (tests/launch/test_hyperpod_eks.py).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

from trainplan.errors import TrainplanError
from trainplan.launch import k8s
from trainplan.launch.base import Rendered, Target
from trainplan.parsing import read_toml

NAME = "hyperpod-eks"
MANIFEST = "hyperpodpytorchjob.json"


@functools.cache
def data() -> dict:
    return read_toml(Path(__file__).with_name("hyperpod_eks.toml"))


@dataclass(frozen=True, slots=True)
class HyperPodEksOptions(k8s.PodOptions):
    max_retries: int = 3  # RunPolicy.jobMaxRetryCount: restarts the operator makes before it fails the job


def add_arguments(a) -> None:
    k8s.add_pod_arguments(a)
    a.add("--max-retries", type=int, default=3,
          help="restarts the HyperPod training operator makes on faults before the job fails (default 3)")


def from_args(args, common: dict) -> HyperPodEksOptions:
    if args.max_retries < 0:
        raise TrainplanError(f"--max-retries must be 0 or more, got {args.max_retries}")
    return HyperPodEksOptions(**common, **k8s.pod_options(args), max_retries=args.max_retries)


def launcher(nodes: int, nproc: int, grace_s: int) -> list[str]:
    spec = data()["launcher"]
    fill = {"nodes": nodes, "nproc": nproc, "grace": grace_s}
    return [spec["command"], *(a.format(**fill) for a in spec["args"])]


def render(plan, options: HyperPodEksOptions) -> Rendered:
    node, nodes = plan.job.cluster.node, plan.job.cluster.nodes
    t = data()
    job = k8s.pod_job(plan, options, lambda name: launcher(nodes, node.gpus_per_node, options.grace_s),
                      target=NAME, setup=(t["launcher"]["install"],))
    replica = {"name": t["replica_name"], "replicas": nodes,
               "template": job.template()}
    hp_job = {"apiVersion": t["api_version"], "kind": t["kind"], "metadata": job.meta,
              "spec": {"nprocPerNode": str(node.gpus_per_node), "replicaSpecs": [replica],
                       "runPolicy": {"cleanPodPolicy": t["clean_pod_policy"],
                                     "jobMaxRetryCount": options.max_retries}}}
    manifest = {"apiVersion": "v1", "kind": "List", "items": [*job.items, hp_job]}
    text = json.dumps(manifest, indent=2) + "\n"
    notes = [*job.notes, (f"the cluster needs the HyperPod training operator (EKS add-on); pods without "
                          f"`hyperpodrun` install {t['launcher']['package']} at start")]
    return Rendered(target=NAME, argv=("kubectl", "apply", "-f", "-"), env=job.env, env_sources=job.why,
                    files={MANIFEST: text}, request=manifest, text=text, notes=tuple(notes))


def problems(job: dict) -> list[str]:
    """What in a HyperPodPyTorchJob the operator's models would refuse: a key its model does not
    have, a required field missing, a nested object that is not one (hyperpod_eks.toml [crd])."""
    crd, out = data()["crd"], []
    for key, want in (("apiVersion", data()["api_version"]), ("kind", data()["kind"])):
        if job.get(key) != want:
            out.append(f"{key} {job.get(key)!r}, not {want!r}")
    extra = set(job) - {"apiVersion", "kind", "metadata", "spec"}
    out += [f"{k}: not a field of the job" for k in sorted(extra)]
    out += k8s.crd_problems(crd, "Metadata", job.get("metadata", {}), "metadata", "unified_config.py")
    out += k8s.crd_problems(crd, "HyperPodPytorchJob", job.get("spec", {}), "spec", "unified_config.py")
    return out


def _check(rendered: Rendered) -> Rendered:
    """The job checked against the operator's field names before a dry run prints it or kubectl gets it."""
    job = rendered.request["items"][-1]
    if found := problems(job):
        raise TrainplanError(f"the {data()['kind']} does not match the operator's models: {found[0]}")
    return k8s.check_compute_domain(rendered)


def submit(rendered: Rendered, workdir=".") -> tuple[int, str]:
    return k8s.submit(rendered, workdir, manifest=MANIFEST)


TARGET = Target(NAME, "HyperPodPyTorchJob for the SageMaker HyperPod training operator (EKS)", HyperPodEksOptions,
                add_arguments, from_args, render, submit, check=_check)
