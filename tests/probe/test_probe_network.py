"""The probe's network part across two torchrun ranks (gloo on CPU): every collective the backend
has gets a table of bus bandwidth by size, written by rank 0 only."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
SRC = Path(__file__).resolve().parents[2] / "src"


def test_two_ranks_measure_collectives(tmp_path):
    out = tmp_path / "m.json"
    env = os.environ | {"PYTHONPATH": str(SRC)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", "29517",
           "-m", "trainplan", "probe", "--device", "cpu", "--quick", "--gpu", "h100-sxm-80gb", "--out", str(out)]
    r = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(out.read_text())
    coll = [t for t in d["tables"] if t["kind"] == "collective"]
    assert {t["op"] for t in coll} >= {"all_reduce", "all_gather"}
    for t in coll:
        assert t["tier"] == "host"
        assert all(p[1] == 2 and p[2] > 0 for p in t["points"])  # ranks 2, busbw positive
    assert not list(tmp_path.glob(".m.json.*"))  # one writer, nothing half-written
