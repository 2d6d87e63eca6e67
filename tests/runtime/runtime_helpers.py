"""Helpers for the distributed runtime tests: start torchrun with 2 gloo processes on CPU."""

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent


def torchrun(*args: str, nproc: int = 2, timeout: float = 240, env: dict | None = None) -> subprocess.CompletedProcess:
    """`torchrun --standalone --nproc-per-node N` with this interpreter; OMP threads pinned to 1
    so two ranks on a 2-core CI runner do not oversubscribe."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, check=False)


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
