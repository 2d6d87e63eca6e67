"""Target `k8s`: a Kubeflow training-operator PyTorchJob (`kubeflow.org/v1`) and its plan ConfigMap.

The manifest is a `v1` List (ConfigMap with plan.json + PyTorchJob), emitted as JSON, which is
valid YAML, so `kubectl apply -f` takes it as it is and no YAML library is needed.
The operator gives every replica a DNS name `<job>-master-0`; all pods meet at a c10d rendezvous
there. Each pod asks for the node's GPUs (`nvidia.com/gpu`, NVIDIA device plugin) and EFA
interfaces (`vpc.amazonaws.com/efa`, AWS EFA device plugin), so one pod fills one instance. On GKE
and AKS the pod takes what its network kind needs instead (k8s_networks.toml: GKE's RDMA network
annotations for RoCE nodes, AKS's InfiniBand device resource), with the NCCL environment of
hardware/network.toml, and selects its nodes by the instance-type label every cloud sets.

Checkpoints go to a PersistentVolumeClaim mounted at /checkpoints, never the container's writable
layer (gone when the pod restarts): --checkpoint-pvc names an existing claim (FSx for Lustre on EKS,
ReadWriteMany), else the manifest asks for one, `<job>-checkpoints`, ReadWriteMany, sized for the
checkpoints the trainer keeps. Pods get --grace seconds between SIGTERM and SIGKILL
(terminationGracePeriodSeconds); torchrun, the container's first process, passes SIGTERM to the
ranks and gives them as long (TORCH_ELASTIC_SHUTDOWN_TIMEOUT) to save.

A job across the VMs of one NVLink domain (NVL72 racks of 4-GPU VMs) brings a ComputeDomain of
NVIDIA's DRA driver, and every pod claims its IMEX channel (compute_domain.toml).

--k8s-api jobset renders the same objects and pod under a JobSet instead (jobset.py), as GKE's
A4 / A4X guides run training; --queue labels the job for Kueue, whichever its kind. Every rendered
manifest is validated against the published schemas in tests/launch/test_k8s_schema.py.
"""

from __future__ import annotations

import functools
import json
import math
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field

from trainplan.errors import TrainplanError
from trainplan.launch import torchrun
from trainplan.launch.base import (
    DEFAULT_RDZV_PORT,
    LaunchOptions,
    Rendered,
    Target,
    check_dns_name,
    job_name,
    node_paths,
)
from trainplan.launch.env import has_efa, network_env
from trainplan.launch.framework import framework_run, shell_line
from trainplan.models.params import count_params
from trainplan.units import GiB

NAME = "k8s"
PLAN_MOUNT = "/etc/trainplan"
CHECKPOINT_MOUNT = "/checkpoints"
# "The data stored in a ConfigMap cannot exceed 1 MiB" (https://kubernetes.io/docs/concepts/configuration/configmap/).
CONFIGMAP_MAX_BYTES = 1 << 20
MANIFEST = "pytorchjob.json"
PYTORCHJOB, JOBSET = "pytorchjob", "jobset"
APIS = {PYTORCHJOB: "Kubeflow training-operator PyTorchJob (kubeflow.org/v1)",
        JOBSET: "JobSet (jobset.x-k8s.io/v1alpha2) of one indexed Job, as GKE's A4/A4X guides run training"}
# Kueue admits a job that carries this label to the LocalQueue it names (kubernetes-sigs/kueue
# pkg/controller/constants/constants.go QueueLabel), a PyTorchJob and a JobSet alike (its
# integrations pkg/controller/jobs/kubeflow/jobs/pytorchjob and pkg/controller/jobs/jobset).
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# A checkpoint holds the weights and both AdamW moments: fp32 each (12 bytes per parameter), bf16
# each for pure bf16 (6); the trainer keeps two and writes a third before pruning
# (runtime/checkpoint.py save(keep=2)).
CHECKPOINTS_ON_DISK = 3


@dataclass(frozen=True, slots=True)
class PodOptions(LaunchOptions):
    """What every Kubernetes target's pod takes (k8s, hyperpod-eks)."""

    image: str = ""  # required: an image with trainplan and its torch extra
    namespace: str = "default"
    efa_devices: int | None = None  # EFA devices per pod; None = the instance's (instances.toml)
    checkpoint_pvc: str = ""  # an existing claim; "" = the manifest creates <job>-checkpoints
    storage_class: str = ""  # of the created claim; "" = the cluster's default class
    checkpoint_gib: int | None = None  # size of the created claim; None = from the plan
    grace_s: int = 120  # terminationGracePeriodSeconds and torchrun's shutdown timeout


@dataclass(frozen=True, slots=True)
class K8sOptions(PodOptions):
    api: str = PYTORCHJOB  # the job's kind: one of APIS
    queue: str = ""  # Kueue LocalQueue the job is submitted to (QUEUE_LABEL); "" = none


def add_pod_arguments(a) -> None:
    """The pod's flags, shared by every Kubernetes target (k8s, hyperpod-eks)."""
    a.add("--image", default="", help="container image with trainplan and its torch extra (required for trainplan's "
                                      "trainer; a plan on a framework's stack: default the framework's image)")
    a.add("--namespace", default="default")
    a.add("--efa-devices", type=a.positive_int, help="EFA devices per pod (default: the instance's)")
    a.add("--checkpoint-pvc", default="",
          help="existing PersistentVolumeClaim for checkpoints, e.g. an FSx for Lustre claim "
               "(default: the manifest creates <job>-checkpoints, ReadWriteMany)")
    a.add("--storage-class", default="", help="storage class of the created checkpoint claim (default: the cluster's)")
    a.add("--checkpoint-gib", type=a.positive_int, help="size of the created checkpoint claim (default: from the plan)")
    a.add("--grace", type=a.duration, default=120,
          help="seconds between SIGTERM and SIGKILL for the ranks to save (default 120s)")


def add_arguments(a) -> None:
    add_pod_arguments(a)
    a.add("--k8s-api", choices=tuple(APIS), default=PYTORCHJOB,
          help="the job's kind: " + "; ".join(f"{k}: {v}" for k, v in APIS.items()) + f" (default {PYTORCHJOB})")
    a.add("--queue", default="", help=f"Kueue LocalQueue that admits the job (label {QUEUE_LABEL}; default: none)")


def pod_options(args) -> dict:
    """The PodOptions fields from the command line (add_pod_arguments)."""
    return {"image": args.image, "namespace": args.namespace, "efa_devices": args.efa_devices,
            "checkpoint_pvc": args.checkpoint_pvc, "storage_class": args.storage_class,
            "checkpoint_gib": args.checkpoint_gib, "grace_s": args.grace}


def from_args(args, common: dict) -> K8sOptions:
    return K8sOptions(**common, **pod_options(args), api=args.k8s_api, queue=args.queue)


@dataclass(frozen=True)
class NetworkPod:
    """What a pod adds for its node's network kind (k8s_networks.toml)."""

    annotations: dict
    resources: dict
    note: str


def network_pod(node) -> NetworkPod:
    d = _network_pods().get(node.network.kind)
    if d is None:
        return NetworkPod({}, {}, "")
    ann = dict(d.get("annotations", {}))
    r = d.get("rdma_interfaces")
    if r is not None:
        if not node.network.interfaces:
            raise TrainplanError(f"the number of RDMA NICs of {node.name} is not known, so its pod's network "
                                 "interfaces cannot be written (instances.toml network.interfaces)")
        nics = [{"interfaceName": r["default_interface"], "network": "default"}]
        nics += [{"interfaceName": f"{r['interface_prefix']}{r['first_interface'] + i}",
                  "network": f"{r['network_prefix']}{i}"} for i in range(node.network.interfaces)]
        ann[r["annotation"]] = json.dumps(nics)
    return NetworkPod(ann, dict(d.get("resources", {})), d.get("note", ""))


@functools.cache
def compute_domain() -> dict:
    from pathlib import Path

    from trainplan.parsing import read_toml

    return read_toml(Path(__file__).with_name("compute_domain.toml"))


@functools.cache
def _network_pods() -> dict:
    from pathlib import Path

    from trainplan.hardware.types import NETWORK_KINDS
    from trainplan.parsing import check_keys, read_toml

    data = read_toml(Path(__file__).with_name("k8s_networks.toml"))
    for kind, d in data.items():
        assert kind in NETWORK_KINDS, kind
        check_keys(d, {"annotations", "rdma_interfaces", "resources", "source", "note"}, f"k8s_networks.toml [{kind}]",
                   required={"source"})
    return data


def checkpoint_gib(plan) -> int:
    """GiB for the checkpoints the trainer keeps on disk at once."""
    per_param = 6 if plan.layout.recipe.pure else 12
    return max(1, math.ceil(CHECKPOINTS_ON_DISK * per_param * count_params(plan.job.model).total / GiB))


@dataclass(frozen=True)
class PodJob:
    """What a Kubernetes training job of a plan is made of, whichever operator runs it (k8s: the
    Kubeflow PyTorchJob; hyperpod_eks: the HyperPodPyTorchJob): its name and metadata, the objects
    it needs first (the ConfigMap of the plan and exported files, a checkpoint claim) and the pod."""

    name: str
    meta: dict
    labels: dict
    items: list  # ConfigMap (+ PersistentVolumeClaim) before the job
    pod: Callable[[], dict]  # a fresh pod spec
    env: dict
    why: dict
    notes: list
    annotations: dict = field(default_factory=dict)  # of the pod template (k8s_networks.toml)

    def template(self) -> dict:
        """The pod template (core/v1 PodTemplateSpec) every kind of job runs: a fresh copy."""
        meta = {"labels": dict(self.labels), **({"annotations": dict(self.annotations)} if self.annotations else {})}
        return {"metadata": meta, "spec": self.pod()}


def pod_job(plan, options: PodOptions, launcher: Callable[[str], list[str]], target: str = NAME,
            setup: tuple[str, ...] = (), max_name_len: int = 48) -> PodJob:
    """The parts of a training job for `plan`; launcher(name) is the command that starts the ranks
    on each pod (torchrun with a rendezvous, or the operator's agent), the entry follows it; `setup`
    (shell commands) run before it, as a framework's own setup does. Job names become pod and
    service names, DNS-1035 labels of at most 63 characters, and the operator appends to them
    ('-worker-NN' for a PyTorchJob: 48 leaves room), so `max_name_len` is the kind's."""
    node = plan.job.cluster.node
    name = check_dns_name(job_name(plan, options, max_len=max_name_len).lower(), "k8s job name", max_name_len)
    fw = None if options.probe else framework_run(plan)
    if not options.image and fw is None:
        raise TrainplanError(
            f"launch {target} needs --image: a container image with trainplan and its torch extra installed"
        )
    resources = {"nvidia.com/gpu": node.gpus_per_node}
    net = network_pod(node)
    resources.update(net.resources)
    # an NVLink domain across VMs (NVL72 racks of 4-GPU VMs): every pod claims the job's IMEX channel
    imex = plan.job.cluster.nodes > 1 and node.nvlink_domain_gpus > node.gpus_per_node
    channel = f"{name}-imex-channel"  # the ResourceClaimTemplate the ComputeDomain's controller makes
    if has_efa(node):
        efa = options.efa_devices or node.network.interfaces
        if not efa:
            raise TrainplanError(
                f"the number of EFA devices of {node.name} is not known: pass --efa-devices N"
            )
        resources["vpc.amazonaws.com/efa"] = efa
    plan_json = plan.to_json()
    config = {"plan.json": plan_json, **(fw.files if fw else {})}
    size = sum(len(t.encode()) for t in config.values())
    if size > CONFIGMAP_MAX_BYTES:
        raise TrainplanError(
            f"the plan{' and its exported files are' if fw else ' is'} {size} bytes, more than a ConfigMap holds "
            "(1 MiB); drop hf_config or the estimate from it, or build it into --image"
        )
    env, why = network_env(node)
    env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] = str(options.grace_s)
    why["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] = (
        "seconds torchrun gives the ranks to save after SIGTERM before SIGKILL (default 30; torch >= 2.11, "
        "torch/distributed/launcher/api.py): the pod's terminationGracePeriodSeconds (--grace)")
    ckpt = options.checkpoint_dir or f"{CHECKPOINT_MOUNT}/{name}"
    claim = options.checkpoint_pvc or f"{name}-checkpoints"
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", claim) or len(claim) > 253:
        # Object names are DNS subdomains (https://kubernetes.io/docs/concepts/overview/working-with-objects/names/).
        raise TrainplanError(f"--checkpoint-pvc {claim!r} is not a claim name: lowercase letters, digits, "
                             "'-' and '.', starting and ending with a letter or digit")
    out = options.out_dir or "/trainplan-out"
    notes = [torchrun.probe_note(out) + " (copy it off the pod's output volume)"] if options.probe else []
    notes += [net.note] if net.note else []
    if fw is None:
        argv = launcher(name) + torchrun.entry(options, f"{PLAN_MOUNT}/plan.json", node.name, out_dir=out,
                                               checkpoint_dir=ckpt, data=node_paths(options.data, target))
    else:
        fw_env, fw_why = fw.env(PLAN_MOUNT)
        env, why = env | fw_env, why | fw_why
        argv = launcher(name) + fw.entry(PLAN_MOUNT, ckpt, out, data=node_paths(options.data, target),
                                         steps=options.steps)
        setup = (*setup, *fw.setup(install=True))
        notes += fw.notes(image_note=not options.image)
    if setup:  # through bash, which then execs the launcher: it stays the container's first process
        argv = ["bash", "-c", "; ".join(("set -e", *setup, f"exec {shell_line(argv)}"))]
    image = fw.image(options.image) if fw else options.image
    labels = {"app.kubernetes.io/managed-by": "trainplan", "app.kubernetes.io/name": name}

    def pod() -> dict:
        spec = {
            "containers": [{
                "name": "pytorch",  # the training operator looks for this container name
                "image": image,
                # Kubernetes expands $(VAR) in command and args; $$ keeps a literal '$'.
                "command": [_k8s_literal(a) for a in argv],
                "env": [{"name": k, "value": v} for k, v in env.items()],
                "resources": {"limits": {k: str(v) for k, v in resources.items()},
                              "requests": {k: str(v) for k, v in resources.items()}},
                "volumeMounts": [{"name": "plan", "mountPath": PLAN_MOUNT, "readOnly": True},
                                 {"name": "checkpoints", "mountPath": CHECKPOINT_MOUNT},
                                 {"name": "dshm", "mountPath": "/dev/shm"}],
            }],
            # Shared memory for data-loader workers and NCCL's intra-node transport.
            "volumes": [{"name": "plan", "configMap": {"name": f"{name}-plan"}},
                        {"name": "checkpoints", "persistentVolumeClaim": {"claimName": claim}},
                        {"name": "dshm", "emptyDir": {"medium": "Memory"}}],
            "terminationGracePeriodSeconds": options.grace_s,
        }
        # the well-known label every cloud's nodes carry (kubernetes.io/docs/reference/labels-annotations-taints/
        # #nodekubernetesioinstance-type): EC2's name on EKS, the machine type on GKE, the VM size on AKS
        instance_type = node.ec2_name or (node.name if node.cloud else None)
        if instance_type:
            spec["nodeSelector"] = {"node.kubernetes.io/instance-type": instance_type}
        if node.cpu_arch == "arm64":
            # Grace hosts (GB200 / GB300): GKE taints every Arm node kubernetes.io/arch=arm64:NoSchedule
            # unless its pool says otherwise (GKE API TaintConfig.ArchitectureTaintBehavior: unspecified
            # = ARM), so a pod without the toleration never schedules on A4X; Google's gke-a4x example
            # (cluster-toolkit examples/gke-a4x/nccl-jobset-example.yaml) carries it. Harmless where
            # no such taint is set (EKS, AKS); the arch label is the kubelet's own, on every cloud.
            spec["nodeSelector"] = {**spec.get("nodeSelector", {}), "kubernetes.io/arch": "arm64"}
            spec["tolerations"] = [{"key": "kubernetes.io/arch", "operator": "Equal", "value": "arm64",
                                    "effect": "NoSchedule"}]
        if imex:
            spec["resourceClaims"] = [{"name": compute_domain()["claim"], "resourceClaimTemplateName": channel}]
            spec["containers"][0]["resources"]["claims"] = [{"name": compute_domain()["claim"]}]
        return spec

    namespace = check_dns_name(options.namespace, "k8s namespace", 63, "--namespace")
    meta = {"name": name, "namespace": namespace, "labels": labels}
    items = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {**meta, "name": f"{name}-plan"},
              "data": config}]
    if not options.checkpoint_pvc:
        # Every pod writes its shards into one directory and reads them all back on resume: the
        # claim must be mountable on every node at once (ReadWriteMany).
        size = options.checkpoint_gib or checkpoint_gib(plan)
        pvc = {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": f"{size}Gi"}}}
        if options.storage_class:
            pvc["storageClassName"] = options.storage_class
        items.append({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                      "metadata": {**meta, "name": claim}, "spec": pvc})
        notes.append(f"checkpoints go to a new claim {claim} ({size} GiB, ReadWriteMany): its storage class "
                     "must offer ReadWriteMany (FSx for Lustre, EFS; Managed Lustre on GKE and AKS); "
                     "or pass --checkpoint-pvc")
    if imex:
        cd = compute_domain()
        items.append({"apiVersion": cd["api_version"], "kind": cd["kind"],
                      "metadata": {**meta, "name": f"{name}-compute-domain"},
                      "spec": {"numNodes": plan.job.cluster.nodes, "channel": {"resourceClaimTemplate": {"name": channel}}}})
        notes.append(cd["note"] + (" (no AKS guide for it was found: compute_domain.toml)" if node.cloud == "azure"
                                   else ""))
    if not (ckpt == CHECKPOINT_MOUNT or ckpt.startswith(CHECKPOINT_MOUNT + "/")):
        notes.append(f"{ckpt} is outside the checkpoint volume ({CHECKPOINT_MOUNT}): it is lost when a pod restarts")
    return PodJob(name, meta, labels, items, pod, env, why, notes, net.annotations)


def render(plan, options: K8sOptions) -> Rendered:
    if options.api == JOBSET:
        from trainplan.launch import jobset  # it builds on pod_job here

        return jobset.render(plan, options)
    node, nodes = plan.job.cluster.node, plan.job.cluster.nodes
    job = pod_job(plan, options, lambda name: torchrun.c10d(nodes, node.gpus_per_node,
                                                            f"{name}-master-0:{DEFAULT_RDZV_PORT}", name))

    def replica(count: int) -> dict:
        return {"replicas": count, "restartPolicy": "OnFailure", "template": job.template()}

    specs = {"Master": replica(1)}
    if nodes > 1:
        specs["Worker"] = replica(nodes - 1)
    # runPolicy spelled out: the operator's CRD lets it be left out (kubebuilder Optional), but its
    # API (the kubeflow-training SDK's KubeflowOrgV1PyTorchJobSpec) requires it. cleanPodPolicy None,
    # the operator's default for a PyTorchJob (training-operator pytorch_defaults.go
    # SetDefaults_PyTorchJob): pods stay after the job for their logs.
    spec = {"nprocPerNode": str(node.gpus_per_node), "pytorchReplicaSpecs": specs,
            "runPolicy": {"cleanPodPolicy": "None"}}
    items = [*job.items, {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": job_meta(job, options),
                          "spec": spec}]
    return manifest(job, items, MANIFEST)


def job_meta(job: PodJob, options: K8sOptions) -> dict:
    """The job object's metadata: the Kueue queue label with --queue (not on the ConfigMap or claim)."""
    if not options.queue:
        return job.meta
    queue = check_dns_name(options.queue, "Kueue queue name", 63, "--queue")
    return {**job.meta, "labels": {**job.meta["labels"], QUEUE_LABEL: queue}}


def manifest(job: PodJob, items: list, file: str) -> Rendered:
    """A `v1` List of the objects, as JSON (valid YAML), for `kubectl apply -f -`."""
    request = {"apiVersion": "v1", "kind": "List", "items": items}
    text = json.dumps(request, indent=2) + "\n"
    return Rendered(target=NAME, argv=("kubectl", "apply", "-f", "-"), env=job.env, env_sources=job.why,
                    files={file: text}, request=request, text=text, notes=tuple(job.notes))


def _k8s_literal(arg: str) -> str:
    return arg.replace("$", "$$")


def submit(rendered: Rendered, workdir=".", manifest: str = "") -> tuple[int, str]:
    """kubectl apply of the manifest (`manifest`, or the one file rendered)."""
    (text,) = [rendered.files[manifest]] if manifest else rendered.files.values()
    try:
        code = subprocess.run(list(rendered.argv), input=text, text=True, check=False).returncode
    except FileNotFoundError:
        raise TrainplanError("kubectl is not on PATH: install it and point it at the cluster") from None
    return code, f"kubectl exited with {code}"


def _check(rendered: Rendered) -> Rendered:
    """A JobSet and a ComputeDomain checked against their APIs' field names before a dry run prints
    them or kubectl gets them."""
    if rendered.request and (js := [i for i in rendered.request["items"] if i["kind"] == "JobSet"]):
        from trainplan.launch import jobset

        if found := jobset.problems(js[0]):
            raise TrainplanError(f"the JobSet does not match its API (jobset.toml): {found[0]}")
    return check_compute_domain(rendered)


def check_compute_domain(rendered: Rendered) -> Rendered:
    """A ComputeDomain checked against its API's field names (compute_domain.toml [crd])."""
    cd = compute_domain()
    for item in (rendered.request or {}).get("items", []):
        if item["kind"] == cd["kind"] and (found := crd_problems(cd["crd"], "ComputeDomain", item, "computedomain",
                                                                 "computedomain.go")):
            raise TrainplanError(f"the ComputeDomain does not match its API (compute_domain.toml): {found[0]}")
    return rendered


def crd_problems(crd: dict, model: str, value, where: str, file: str) -> list[str]:
    """What in `value` a custom resource's API would refuse, by the field names written as data
    (hyperpod_eks.toml, jobset.toml [crd]: per model its `line` in `file`, `fields` each naming the
    model a nested object must match, "" for a value, and `required`): a key the model does not
    have, a required field missing, a nested object that is not one."""
    out: list[str] = []
    if isinstance(value, list):
        for i, v in enumerate(value):
            out += crd_problems(crd, model, v, f"{where}[{i}]", file)
        return out
    if not isinstance(value, dict):
        return [f"{where}: an object ({model}) expected, got {type(value).__name__}"]
    m = crd[model]
    out += [f"{where}.{k}: required ({model}, {file}:{m['line']})" for k in m["required"] if k not in value]
    for k, v in value.items():
        if k not in m["fields"]:
            out.append(f"{where}.{k}: not a field of {model} ({file}:{m['line']})")
        elif m["fields"][k]:
            out += crd_problems(crd, m["fields"][k], v, f"{where}.{k}", file)
    return out


TARGET = Target(NAME, "Kubeflow PyTorchJob (or, --k8s-api jobset, a JobSet) manifest for Kubernetes (EKS, GKE, AKS)",
                K8sOptions, add_arguments, from_args, render, submit, check=_check)
