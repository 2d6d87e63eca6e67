"""Plans on a framework's stack for the launch tests: fixed layouts (so the goldens do not follow the
search), checked and estimated like a plan the planner writes."""

from __future__ import annotations

from trainplan.estimate import estimate
from trainplan.hardware import Cluster, find_node
from trainplan.job import Job, Workload
from trainplan.layout import check_layout, parse_layout
from trainplan.models import resolve
from trainplan.plan import Plan, TrainSettings

# Megatron-LM: Llama-3.1-8B, tp=2 with the distributed optimizer over 4, on one p6-b200 node.
MEGATRON = "bf16 ac=selective mb=1 ga=4 dp=1x4(zero1) tp=2 stack=megatron"
# Mixtral-8x7B with experts and pipeline stages, over two nodes.
MEGATRON_MOE = "bf16 ac=full mb=1 ga=8 dp=1x8(zero1) pp=2 ep=8 stack=megatron"
# torchtitan: Llama-3.1-8B, FSDP over two p6-b200 nodes.
TORCHTITAN = "bf16 ac=full mb=1 ga=1 dp=1x16(fsdp) stack=torchtitan"


def plan_of(text: str, model: str = "llama-3.1-8b", nodes: int = 1, seq_len: int = 8192,
            instance: str = "ml.p6-b200.48xlarge") -> Plan:
    L = parse_layout(text)
    job = Job(resolve(model), Cluster(find_node(instance), nodes), Workload(seq_len=seq_len, global_batch=L.global_batch))
    check_layout(job, L)
    return Plan(job=job, layout=L, train=TrainSettings(steps=1000, checkpoint_every=200), estimate=estimate(job, L))


def megatron_plan() -> Plan:
    return plan_of(MEGATRON)


def megatron_moe_plan() -> Plan:
    return plan_of(MEGATRON_MOE, model="mixtral-8x7b", nodes=2)


def torchtitan_plan() -> Plan:
    return plan_of(TORCHTITAN, nodes=2)
