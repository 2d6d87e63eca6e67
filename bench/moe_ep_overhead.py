"""Expert-parallel overhead of the reference trainer on CPU: tiny-moe at ep=1, 2, 4 on 4 gloo ranks.

Same model (runtime/demo.py TINY_MOE: 8 experts, top-2, 3 MoE layers of 4), same data, same global
batch, bf16 mixed precision as the demo (a plan file holds only registry recipes; on CPUs without
bf16 units that includes emulation, the same in every run), FSDP over the 4 ranks in every run; ep > 1 splits the experts and adds two all_to_all_single per MoE layer and pass (plus the
token-count exchange). Runs alternate (ep=1, 2, 4, ep=1, ...) so drift in the machine's speed hits
all; each run yields the trainer's median step_time_s over steps 2..N. Headline: the best run of
each ep (other processes only ever add time), medians too, and the ratio to ep=1. The losses of
the runs are recorded as well: ep moves rows between ranks and nothing else.

    .venv/bin/python bench/moe_ep_overhead.py [--steps 12] [--repeats 2] [--out bench/results/moe_ep_overhead.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from trainplan.runtime.demo import TINY_MOE, demo_plan

WORLD, SEQ, MB = 4, 128, 4
EPS = (1, 2, 4)


def a2a_bytes_per_step(ep: int) -> float:
    """Rows each rank sends to other ranks per step (dispatch + combine, forward + backward), fp32:
    of its tokens' top-k copies, the share whose expert lives elsewhere (balanced routing), in the
bf16 the experts compute in under FSDP's mixed precision."""
    if ep == 1:
        return 0.0
    m = TINY_MOE.moe
    moe_layers = TINY_MOE.num_layers - m.first_dense_layers
    copies = MB * SEQ * m.experts_per_token * (ep - 1) / ep
    return copies * TINY_MOE.hidden_size * 2 * 2 * 2 * moe_layers


def run(ep: int, steps: int, work: Path) -> dict:
    # A plan file names a whole node (8 GPUs); --fit-world below rescales it to the 4 ranks started.
    p = demo_plan(8, steps=steps, seq_len=SEQ, micro_batch=MB, model=TINY_MOE, ep=ep)
    p = replace(p, train=replace(p.train, log_every=1))
    plan_file = work / f"plan-ep{ep}.json"
    plan_file.write_text(p.to_json())
    out = work / f"run-ep{ep}"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={WORLD}",
            "-m", "trainplan.runtime", "--plan", str(plan_file), "--fit-world", "--out", str(out), "--no-progress"]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if proc.returncode:
        raise SystemExit(f"ep={ep} failed:\n{proc.stderr[-3000:]}")
    recs = [json.loads(x) for x in (out / "measurements.jsonl").read_text().splitlines() if x.strip()]
    (out / "measurements.jsonl").unlink()
    return {"step_time_s": statistics.median(r["step_time_s"] for r in recs[1:]),
            "losses": [r["loss"] for r in recs]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default="bench/results/moe_ep_overhead.json")
    a = ap.parse_args()
    runs: dict[int, list[dict]] = {ep: [] for ep in EPS}
    with tempfile.TemporaryDirectory() as d:
        for _ in range(a.repeats):
            for ep in EPS:
                runs[ep].append(run(ep, a.steps, Path(d)))
                print(f"ep={ep}: {runs[ep][-1]['step_time_s'] * 1e3:.1f} ms/step", file=sys.stderr)
    best = {ep: min(r["step_time_s"] for r in rs) for ep, rs in runs.items()}
    result = {
        "what": "trainplan.runtime step time of tiny-moe on 4 CPU gloo ranks (FSDP), bf16 mixed, by expert-parallel degree",
        "machine": {"platform": platform.platform(), "processor": platform.processor(), "cpus": os.cpu_count(),
                    "note": "a shared machine: other processes add time; the best run is the headline"},
        "model": TINY_MOE.name, "world": WORLD, "seq_len": SEQ, "micro_batch": MB, "steps": a.steps,
        "repeats": a.repeats,
        "by_ep": {str(ep): {
            "best_step_time_s": best[ep],
            "median_step_time_s": statistics.median(r["step_time_s"] for r in runs[ep]),
            "vs_ep1": best[ep] / best[1],
            "all_to_all_bytes_per_rank_per_step": a2a_bytes_per_step(ep),
            "losses_first_run": runs[ep][0]["losses"],
        } for ep in EPS},
    }
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    for ep in EPS:
        print(f"ep={ep}: best {best[ep] * 1e3:.1f} ms/step ({best[ep] / best[1]:.2f}x ep=1)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
