"""Two torchrun processes on this machine, one worker each, meet at a c10d rendezvous on
127.0.0.1 and train the tiny model for a few steps: the multi-node command `launch local` renders
is the one that runs."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("trainplan.runtime.__main__")

from trainplan.hardware import Cluster, find_node
from trainplan.job import Job, Workload
from trainplan.launch import render
from trainplan.launch.local import LocalOptions
from trainplan.layout import Layout
from trainplan.models.spec import ModelSpec
from trainplan.plan import Plan, TrainSettings

# Vocabulary above the runtime's byte tokenizer (256 bytes + 3 specials).
TINY = ModelSpec(name="tiny", model_type="llama", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2,
                 head_dim=16, ffn_size=128, vocab_size=320, tied_embeddings=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.torch
@pytest.mark.distributed
@pytest.mark.slow
def test_two_node_rendezvous_on_localhost_trains(tmp_path):
    # A valid 4-GPU plan (one p6e-gb200 node); --fit-world rescales dp_shard to the 2 processes.
    plan = Plan(Job(TINY, Cluster(find_node("ml.p6e-gb200.36xlarge"), 1), Workload(seq_len=64, global_batch=8)),
                Layout(micro_batch=2, dp_shard=4),
                TrainSettings(steps=3, lr=3e-3, warmup_steps=1, checkpoint_every=0))
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(plan.to_json())
    endpoint = f"127.0.0.1:{_free_port()}"
    procs = []
    for rank in (0, 1):
        r = render("local", plan, LocalOptions(
            plan_path=str(plan_path), nnodes=2, nproc_per_node=1, node_rank=rank, rdzv_endpoint=endpoint,
            rdzv_id="launch-test", device="cpu", fit_world=True, steps=3, out_dir=str(tmp_path / f"out{rank}")))
        assert r.argv[0] == "torchrun" and "--rdzv-endpoint" in r.argv
        # The venv's torchrun: the one next to this interpreter.
        env = {**os.environ, **r.env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
        procs.append(subprocess.Popen(list(r.argv), env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outputs = []
    try:
        for p in procs:
            outputs.append(p.communicate(timeout=300)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, out in zip(procs, outputs):
        assert p.returncode == 0, out[-3000:]
    summaries = [json.loads(f.read_text()) for f in tmp_path.glob("out*/summary.json")]
    assert len(summaries) == 1, "rank 0 writes one summary.json"
    s = summaries[0]
    assert (s["world_size"], s["device"], s["steps"], s["model"]) == (2, "cpu", 3, "tiny")
