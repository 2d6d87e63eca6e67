"""Plans and golden-file helpers for the launch tests (plans built in Python, written with Plan.to_json())."""

from __future__ import annotations

import os
import re
from pathlib import Path

from trainplan.hardware import Cluster, find_node
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.models.spec import ModelSpec
from trainplan.plan import Plan

GOLDEN = Path(__file__).parent / "golden"

# Llama-3.1-8B's architecture (https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json),
# written out by hand so the tests depend on nothing but the spec type.
LLAMA_8B = ModelSpec(
    name="llama-3.1-8b", model_type="llama", num_layers=32, hidden_size=4096, num_heads=32,
    num_kv_heads=8, head_dim=128, ffn_size=14336, vocab_size=128256, max_position_embeddings=131072,
    source="https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json",
)

TINY = ModelSpec(
    name="tiny", model_type="llama", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2,
    head_dim=16, ffn_size=128, vocab_size=256, max_position_embeddings=128,
)


def make_plan(instance: str = "ml.p6-b200.48xlarge", nodes: int = 4, model: ModelSpec = LLAMA_8B,
              seq_len: int = 8192) -> Plan:
    gpus = find_node(instance).gpus_per_node * nodes
    cluster = Cluster(find_node(instance), nodes)
    layout = Layout(precision="bf16", ac="selective", micro_batch=1, grad_accum=1, dp_shard=gpus)
    return Plan(Job(model, cluster, Workload(seq_len=seq_len, global_batch=gpus)), layout)


def check_golden(name: str, text: str) -> None:
    """Compare with tests/launch/golden/<name>; rewrite it only with TRAINPLAN_UPDATE_GOLDEN=1."""
    path = GOLDEN / name
    if os.environ.get("TRAINPLAN_UPDATE_GOLDEN") == "1":
        path.write_text(text)
        return
    assert path.exists(), f"no golden file {path}; create it with TRAINPLAN_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{name} differs from its golden file (TRAINPLAN_UPDATE_GOLDEN=1 to accept)"


# Credentials put in the environment by the SageMaker tests only: AWS's documented example pair.
FAKE_KEY, FAKE_SECRET, FAKE_TOKEN = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "FwoGZXIvYXdzEXAMPLETOKEN"


def assert_no_credentials(ours: list[str], shipped: list[str] = ()) -> None:
    """No access key, secret or token in trainplan's artifacts (`ours`) or in anything shipped."""
    for t in [*ours, *shipped]:
        assert not re.search(r"AKIA[0-9A-Z]{16}|ASIA[0-9A-Z]{16}", t)
        assert FAKE_SECRET not in t and FAKE_TOKEN not in t
    for t in ours:  # the SDK's driver source names these variables; trainplan's artifacts never do
        assert not re.search(r"aws_secret_access_key|aws_session_token|aws_access_key_id", t, re.IGNORECASE)
