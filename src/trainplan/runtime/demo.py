"""The demo plan: a tiny Llama-style model that trains in seconds on CPU, on any world size."""

from __future__ import annotations

from trainplan.hardware import Cluster, find_node
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.models.spec import ModelSpec
from trainplan.plan import Plan, TrainSettings
from trainplan.runtime.data import BYTE_TOKENIZER_VOCAB
from trainplan.runtime.world import node_for_world

DEMO_MODEL = ModelSpec(
    name="demo-llama-tiny", model_type="llama", num_layers=4, hidden_size=128, num_heads=4,
    num_kv_heads=2, head_dim=32, ffn_size=384, vocab_size=BYTE_TOKENIZER_VOCAB, tied_embeddings=True,
    source="trainplan demo (byte-level vocabulary)",
)


def demo_plan(world: int, steps: int = 30, seq_len: int = 128, micro_batch: int = 4, model: ModelSpec = DEMO_MODEL,
              **layout) -> Plan:
    """FSDP over `world` processes (dp_shard = world), bf16 mixed precision, no checkpointing.
    The cluster is nominal: `world` GPUs of an H200 node (the planner needs one; the demo runs
    wherever it is started)."""
    L = Layout(micro_batch=micro_batch, dp_shard=world, **layout)
    L = L.with_(dp_shard=world // (L.dp_replicate * L.tp * L.pp * L.cp))
    return Plan(
        job=Job(model, Cluster(node_for_world(find_node("ml.p5e.48xlarge"), world), 1),
                Workload(seq_len=seq_len, global_batch=L.micro_batch * L.grad_accum * L.dp)),
        layout=L,
        train=TrainSettings(steps=steps, lr=3e-3, warmup_steps=3, weight_decay=0.1, checkpoint_every=0),
        reasons=("demo: a tiny model on the local machine; the cluster is nominal",),
    )
