"""Target `k8s`: a Kubeflow training-operator PyTorchJob (`kubeflow.org/v1`) and its plan ConfigMap.

The manifest is a `v1` List (ConfigMap with plan.json + PyTorchJob), emitted as JSON, which is
valid YAML, so `kubectl apply -f` takes it as it is and no YAML library is needed.
The operator gives every replica a DNS name `<job>-master-0`; all pods meet at a c10d rendezvous
there. Each pod asks for the node's GPUs (`nvidia.com/gpu`, NVIDIA device plugin) and EFA
interfaces (`vpc.amazonaws.com/efa`, AWS EFA device plugin), so one pod fills one instance.
"""

from __future__ import annotations

import json
import subprocess

from trainplan.errors import TrainplanError
from trainplan.launch import torchrun
from trainplan.launch.base import (
    DEFAULT_RDZV_PORT,
    LaunchOptions,
    Rendered,
    check_dns_name,
    job_name,
)
from trainplan.launch.env import EFA_DEVICES, has_efa, network_env

NAME = "k8s"
PLAN_MOUNT = "/etc/trainplan"
# "The data stored in a ConfigMap cannot exceed 1 MiB" (https://kubernetes.io/docs/concepts/configuration/configmap/).
CONFIGMAP_MAX_BYTES = 1 << 20
MANIFEST = "pytorchjob.json"


def render(plan, options: LaunchOptions) -> Rendered:
    node, nodes = plan.job.cluster.node, plan.job.cluster.nodes
    # PyTorchJob names become pod and service names: DNS-1035 labels, and the operator appends
    # '-worker-NN', so keep room for it.
    name = check_dns_name(job_name(plan, options, max_len=48).lower(), "k8s job name", 48)
    if not options.image:
        raise TrainplanError(
            "launch k8s needs --image: a container image with trainplan and its torch extra installed"
        )
    resources = {"nvidia.com/gpu": node.gpus_per_node}
    if has_efa(node):
        efa = options.efa_devices or EFA_DEVICES.get(node.name)
        if not efa:
            raise TrainplanError(
                f"the number of EFA devices of {node.name} is not known: pass --efa-devices N"
            )
        resources["vpc.amazonaws.com/efa"] = efa
    plan_json = plan.to_json()
    if len(plan_json.encode()) > CONFIGMAP_MAX_BYTES:
        raise TrainplanError(
            f"the plan is {len(plan_json.encode())} bytes, more than a ConfigMap holds (1 MiB); "
            "drop hf_config or the estimate from it, or build it into --image"
        )
    env, why = network_env(node)
    ckpt = options.checkpoint_dir or "/checkpoints"
    out = options.out_dir or "/trainplan-out"
    argv = (torchrun.c10d(nodes, node.gpus_per_node, f"{name}-master-0:{DEFAULT_RDZV_PORT}", name)
            + torchrun.module()
            + torchrun.runtime_args(f"{PLAN_MOUNT}/plan.json", steps=options.steps, out_dir=out,
                                    checkpoint_dir=ckpt))
    labels = {"app.kubernetes.io/managed-by": "trainplan", "app.kubernetes.io/name": name}

    def replica(count: int) -> dict:
        pod = {
            "containers": [{
                "name": "pytorch",  # the training operator looks for this container name
                "image": options.image,
                # Kubernetes expands $(VAR) in command and args; $$ keeps a literal '$'.
                "command": [_k8s_literal(a) for a in argv],
                "env": [{"name": k, "value": v} for k, v in env.items()],
                "resources": {"limits": {k: str(v) for k, v in resources.items()},
                              "requests": {k: str(v) for k, v in resources.items()}},
                "volumeMounts": [{"name": "plan", "mountPath": PLAN_MOUNT, "readOnly": True},
                                 {"name": "dshm", "mountPath": "/dev/shm"}],
            }],
            # Shared memory for data-loader workers and NCCL's intra-node transport.
            "volumes": [{"name": "plan", "configMap": {"name": f"{name}-plan"}},
                        {"name": "dshm", "emptyDir": {"medium": "Memory"}}],
        }
        if node.ec2_name:
            pod["nodeSelector"] = {"node.kubernetes.io/instance-type": node.ec2_name}
        return {"replicas": count, "restartPolicy": "OnFailure",
                "template": {"metadata": {"labels": labels}, "spec": pod}}

    specs = {"Master": replica(1)}
    if nodes > 1:
        specs["Worker"] = replica(nodes - 1)
    namespace = check_dns_name(options.namespace, "k8s namespace", 63, "--namespace")
    meta = {"name": name, "namespace": namespace, "labels": labels}
    manifest = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {**meta, "name": f"{name}-plan"},
             "data": {"plan.json": plan_json}},
            {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": meta,
             "spec": {"nprocPerNode": str(node.gpus_per_node), "pytorchReplicaSpecs": specs}},
        ],
    }
    text = json.dumps(manifest, indent=2) + "\n"
    notes = [f"{ckpt} is inside the pod: mount persistent storage there to keep checkpoints"]
    return Rendered(target=NAME, argv=("kubectl", "apply", "-f", "-"), env=env, env_sources=why,
                    files={MANIFEST: text}, request=manifest, text=text, notes=tuple(notes))


def _k8s_literal(arg: str) -> str:
    return arg.replace("$", "$$")


def submit(rendered: Rendered) -> int:
    try:
        return subprocess.run(list(rendered.argv), input=rendered.files[MANIFEST], text=True,
                              check=False).returncode
    except FileNotFoundError:
        raise TrainplanError("kubectl is not on PATH: install it and point it at the cluster") from None
