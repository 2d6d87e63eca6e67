"""Expert- and tensor-parallel overhead of the reference trainer on CPU: tiny-moe on 4 gloo ranks at
(tp, ep) = (1, 1), (1, 2), (1, 4), (2, 1), (2, 2), and (2, 2), (2, 4) with etp = 1.

Same model (runtime/demo.py TINY_MOE: 8 experts, top-2, 3 MoE layers of 4), same data, same global
batch, bf16 mixed precision as the demo (a plan file holds only registry recipes; on CPUs without
bf16 units that includes emulation, the same in every run), FSDP over the 4 ranks in every run; ep > 1 splits the experts and adds two all_to_all_single per MoE layer and pass (plus the
token-count exchange); tp = 2 (with sequence parallel, the demo's) splits attention, shared and
routed experts over 2 ranks (etp = tp, runtime/moe.py) and halves the data-parallel ranks, so those
runs accumulate 2 micro-batches to keep the tokens per step; with etp = 1 the experts stay whole and
each tp rank routes its half of the sequence through an ep group that spans the tp ranks. Runs alternate (one of each layout, then again) so drift in the machine's speed hits
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

import _stamp

from trainplan.runtime.demo import TINY_MOE, demo_plan

WORLD, SEQ, MB = 4, 128, 4
LAYOUTS = ((1, 1, None), (1, 2, None), (1, 4, None), (2, 1, None), (2, 2, None), (2, 2, 1), (2, 4, 1))  # (tp, ep, etp)


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


def key(tp: int, ep: int, etp: int | None) -> str:
    return f"tp{tp}_ep{ep}" + ("_etp1" if etp == 1 and tp > 1 else "")


def run(tp: int, ep: int, etp: int | None, steps: int, work: Path) -> dict:
    # A plan file names a whole node (8 GPUs); --fit-world below rescales it to the 4 ranks started.
    p = demo_plan(8, steps=steps, seq_len=SEQ, micro_batch=MB, model=TINY_MOE, ep=ep, tp=tp, etp=etp,
                  grad_accum=tp)
    p = replace(p, train=replace(p.train, log_every=1))
    plan_file = work / f"plan-{key(tp, ep, etp)}.json"
    plan_file.write_text(p.to_json())
    out = work / f"run-{key(tp, ep, etp)}"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={WORLD}",
            "-m", "trainplan.runtime", "--plan", str(plan_file), "--fit-world", "--device", "cpu", "--out", str(out), "--no-progress"]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if proc.returncode:
        raise SystemExit(f"{key(tp, ep, etp)} failed:\n{proc.stderr[-3000:]}")
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
    runs: dict[tuple, list[dict]] = {lay: [] for lay in LAYOUTS}
    with tempfile.TemporaryDirectory() as d:
        for _ in range(a.repeats):
            for lay in LAYOUTS:
                runs[lay].append(run(*lay, a.steps, Path(d)))
                print(f"{key(*lay)}: {runs[lay][-1]['step_time_s'] * 1e3:.1f} ms/step", file=sys.stderr)
    best = {lay: min(r["step_time_s"] for r in rs) for lay, rs in runs.items()}
    base = best[1, 1, None]
    result = {
        "what": "trainplan.runtime step time of tiny-moe on 4 CPU gloo ranks (FSDP), bf16 mixed, by tensor- and "
                "expert-parallel degree (tp runs accumulate tp micro-batches: same tokens per step; tp with sequence "
                "parallel; etp1: whole experts, ep spanning the tp ranks)",
        "machine": {"platform": platform.platform(), "processor": platform.processor(), "cpus": os.cpu_count(),
                    "note": "a shared machine: other processes add time; the best run is the headline"},
        "model": TINY_MOE.name, "world": WORLD, "seq_len": SEQ, "micro_batch": MB, "steps": a.steps,
        "repeats": a.repeats,
        "by_layout": {key(tp, ep, etp): {
            "tp": tp, "ep": ep, "etp": etp if etp is not None else tp,
            "best_step_time_s": best[tp, ep, etp],
            "median_step_time_s": statistics.median(r["step_time_s"] for r in runs[tp, ep, etp]),
            "vs_tp1_ep1": best[tp, ep, etp] / base,
            # etp = tp: every tp rank routes the whole micro-batch; etp = 1: its 1/tp of it
            "all_to_all_bytes_per_rank_per_step": a2a_bytes_per_step(ep) * (tp if etp is None else 1),
            "losses_first_run": runs[tp, ep, etp][0]["losses"],
        } for tp, ep, etp in LAYOUTS},
    }
    _stamp.write(a.out, result, __file__)
    for lay in LAYOUTS:
        print(f"{key(*lay)}: best {best[lay] * 1e3:.1f} ms/step ({best[lay] / base:.2f}x tp=1 ep=1)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
