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


def run_worker(out: Path, configs: dict, *, nproc: int = 2, timeout: float = 300, worker: str = "_worker.py",
               allow_errors: bool = False) -> dict:
    """Run `worker` (tests/runtime) under torchrun on `configs` (name -> config) and return its
    results (name -> result); unless `allow_errors`, fail on any config that raised, with its trace."""
    p = torchrun(str(HERE / worker), str(out), json.dumps(configs), nproc=nproc, timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    results = json.loads(Path(out).read_text())
    if not allow_errors:
        errors = [f"{k}: {v['error']}\n{v.get('trace', '')}" for k, v in results.items() if "error" in v]
        assert not errors, "\n".join(errors)
    return results


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def plan_file(path: Path, steps: int = 6, checkpoint_every: int = 2, world: int = 8) -> Path:
    """The demo model as a plan.json for one 8-GPU node that checkpoints every `checkpoint_every`
    steps (run it with --fit-world on 2 processes)."""
    from dataclasses import replace

    from trainplan.runtime.demo import demo_plan

    plan = demo_plan(world, steps=steps)
    path.write_text(replace(plan, train=replace(plan.train, checkpoint_every=checkpoint_every)).to_json())
    return path


def ranks_of(torchrun_pid: int) -> dict[int, int]:
    """{global rank: pid} of torchrun's workers, read from /proc."""
    pids = Path(f"/proc/{torchrun_pid}/task/{torchrun_pid}/children").read_text().split()
    out = {}
    for pid in pids:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        rank = next(int(e[5:]) for e in env if e.startswith(b"RANK="))
        out[rank] = int(pid)
    return out


def private_mounts() -> bool:
    """Whether this machine lets a test mount a tmpfs or a read-only bind mount in a private
    user + mount namespace (`unshare -rm`); where it cannot, the fault switch simulates the fault."""
    try:
        p = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt || exit 1"],
                           capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return p.returncode == 0


def trainplan_frames(stderr: str) -> list[str]:
    """Traceback lines in trainplan's own code (torchrun prints its own traceback when a worker
    fails or it was signalled; that one is torch's)."""
    return [line for line in stderr.splitlines() if line.lstrip().startswith("File ") and "/trainplan/" in line]
