"""The demo plan: a tiny Llama-style model that trains in seconds on CPU, on any world size."""

from __future__ import annotations

from trainplan.errors import TrainplanError
from trainplan.hardware import Cluster, find_node, node_for_world
from trainplan.job import Job, Workload
from trainplan.layout import Layout, check_layout
from trainplan.models.spec import ModelSpec, MoESpec
from trainplan.plan import Plan, TrainSettings
from trainplan.runtime.data import BYTE_TOKENIZER_VOCAB
from trainplan.supports import TRAINER_STACK, trainer_fields

DEMO_MODEL = ModelSpec(
    name="demo-llama-tiny", model_type="llama", num_layers=4, hidden_size=128, num_heads=4,
    num_kv_heads=2, head_dim=32, ffn_size=384, vocab_size=BYTE_TOKENIZER_VOCAB, tied_embeddings=True,
    source="trainplan demo (byte-level vocabulary)",
)

# DeepSeek-V3's MoE recipe in miniature: a dense first layer, 8 routed experts (top-2, sigmoid
# scores, routed within 2 of 4 expert groups), one shared expert, aux-loss-free balancing.
TINY_MOE = ModelSpec(
    name="tiny-moe", model_type="deepseek_v3", num_layers=4, hidden_size=128, num_heads=4, num_kv_heads=2,
    head_dim=32, ffn_size=384, vocab_size=BYTE_TOKENIZER_VOCAB, tied_embeddings=True,
    moe=MoESpec(num_experts=8, experts_per_token=2, expert_ffn_size=96, num_shared_experts=1,
                shared_expert_ffn_size=96, first_dense_layers=1, num_groups=4, topk_groups=2,
                router_score="sigmoid", load_balance="aux_free"),
    source="trainplan demo (byte-level vocabulary)",
)
DEMO_MODELS = {m.name: m for m in (DEMO_MODEL, TINY_MOE)}


def demo_model(name: str | None) -> ModelSpec:
    if name is None:
        return DEMO_MODEL
    if name not in DEMO_MODELS:
        raise TrainplanError(f"--model {name!r} is not a demo model; known: {', '.join(DEMO_MODELS)} "
                             "(any other model: make a plan with `trainplan plan` and pass --plan)")
    return DEMO_MODELS[name]


def demo_plan(world: int, steps: int = 30, seq_len: int = 128, micro_batch: int = 4, model: ModelSpec = DEMO_MODEL,
              **layout) -> Plan:
    """FSDP over `world` processes (dp_shard = world / (tp * ...); ep, if given, carved out of it), bf16 mixed
    precision, no checkpointing.
    The cluster is nominal: `world` GPUs of an H200 node (the planner needs one; the demo runs
    wherever it is started)."""
    # tp as the trainer runs it (the LM head whole on every tp rank), unless a test says otherwise
    L = Layout(micro_batch=micro_batch, dp_shard=world,
               **{**trainer_fields(TRAINER_STACK, layout.get("tp", 1)), **layout})
    others = L.dp_replicate * L.tp * L.pp * L.cp
    if world % others:
        raise TrainplanError(f"dp_replicate*tp*pp*cp = {others} does not divide the {world} processes started; "
                             "choose degrees whose product divides them")
    L = L.with_(dp_shard=world // others)
    job = Job(model, Cluster(node_for_world(find_node("ml.p5e.48xlarge"), world), 1),
              Workload(seq_len=seq_len, global_batch=L.global_batch))
    check_layout(job, L)  # ep, tp or etp that does not fit the experts, heads or processes: one line
    return Plan(
        job=job,
        layout=L,
        train=TrainSettings(steps=steps, lr=3e-3, warmup_steps=min(3, steps), weight_decay=0.1, checkpoint_every=0),
        reasons=("demo: a tiny model on the local machine; the cluster is nominal",),
    )
