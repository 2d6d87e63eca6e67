"""GPU check: run a handful of one-GPU layouts ~20 steps each; predicted vs measured.

On a CUDA machine (prepared for one H200): Llama-3.2-1B and -3B (the catalog's configs) at
sequence 2k-8k, checkpointing none/selective/full, bf16 and fp8 (torchao tensorwise). Each layout
is an 8-GPU plan for ml.p5e.48xlarge (8 x H200) run with --fit-world on the one GPU present, in
its own process (`python -m trainplan.runtime`), so one layout's memory never leaks into the next.
`trainplan compare-run` then puts the estimate of that one-GPU plan next to the measurement:
peak memory (reserved, as the estimate models it), step time, tokens/s per GPU, MFU.

Without CUDA it runs the CPU path: the same pipeline on a tiny model for a few steps (losses and step
time measured, nothing compared: compare-run refuses a CPU run, the planner has no CPU device),
written to a separate file so it is never mistaken for GPU data.

    .venv/bin/python bench/gpu_check.py [--steps 20] [--only NAME] [--out bench/results] [--runs-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import _stamp

from trainplan.hardware import Cluster, find_node
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.plan import Plan, TrainSettings

NODE = "ml.p5e.48xlarge"  # 8 x H200 141 GB; a plan for the node, fitted to the one GPU present

# (name, model, seq_len, micro_batch, precision, ac): sized to fit one H200 with room to spare.
GPU_CASES = (
    ("1b-s2k-bf16-none", "llama-3.2-1b", 2048, 4, "bf16", "none"),
    ("1b-s4k-bf16-selective", "llama-3.2-1b", 4096, 2, "bf16", "selective"),
    ("1b-s8k-bf16-full", "llama-3.2-1b", 8192, 2, "bf16", "full"),
    ("1b-s4k-fp8-none", "llama-3.2-1b", 4096, 2, "fp8_tensorwise", "none"),
    ("3b-s4k-bf16-selective", "llama-3.2-3b", 4096, 1, "bf16", "selective"),
    ("3b-s4k-fp8-selective", "llama-3.2-3b", 4096, 1, "fp8_tensorwise", "selective"),
    ("3b-s8k-bf16-full", "llama-3.2-3b", 8192, 1, "bf16", "full"),
    # MoE: Qwen3-30B-A3B's layer (128 experts, top-8, expert ffn 768) cut to 4 layers (3.1B
    # parameters, ~57 GiB estimated on one H200): the trainer's grouped GEMM (torch._grouped_mm), router and permutation on CUDA
    ("moe-4l-s4k-bf16-selective", "qwen3-30b-a3b-4l", 4096, 2, "bf16", "selective"),
)
CPU_CASES = (
    ("tiny-s128-bf16-none", "tiny", 128, 2, "bf16", "none"),
    ("tiny-s128-bf16-selective", "tiny", 128, 2, "bf16", "selective"),
    ("tiny-s128-bf16-full", "tiny", 128, 2, "bf16", "full"),
    ("tiny-s128-fp8-none", "tiny", 128, 2, "fp8_tensorwise", "none"),
    ("tiny-moe-s128-bf16-none", "tiny-moe", 128, 2, "bf16", "none"),
)


def model_spec(name: str):
    if name == "tiny":
        from trainplan.runtime.demo import DEMO_MODEL

        return replace(DEMO_MODEL, num_layers=2)
    if name == "tiny-moe":
        from trainplan.runtime.demo import TINY_MOE

        return TINY_MOE
    from trainplan.models.library import resolve

    if name.endswith("-4l"):  # a catalog model's first 4 layers (MoE cases sized for one GPU)
        return replace(resolve(name.removesuffix("-4l")), num_layers=4, name=name)

    return resolve(name)


def make_plan(model: str, seq: int, mb: int, precision: str, ac: str, steps: int) -> Plan:
    gpus = find_node(NODE).gpus_per_node
    layout = Layout(precision=precision, ac=ac, micro_batch=mb, dp_shard=gpus, chunked_loss=True)
    job = Job(model_spec(model), Cluster(find_node(NODE), 1), Workload(seq_len=seq, global_batch=mb * gpus))
    return Plan(job=job, layout=layout,
                train=TrainSettings(steps=steps, lr=3e-4, warmup_steps=min(5, steps), checkpoint_every=0),
                reasons=("bench/gpu_check.py",))


def run_case(case, steps: int, out: Path, timeout_s: float, machine=None, cuda: bool = True) -> dict:
    name, model, seq, mb, precision, ac = case
    d = out / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "input-plan.json").write_text(make_plan(model, seq, mb, precision, ac, steps).to_json())
    argv = [sys.executable, "-m", "trainplan.runtime", "--plan", str(d / "input-plan.json"), "--fit-world",
            "--steps", str(steps), "--out", str(d), "--no-progress", *([] if cuda else ["--device", "cpu"])]
    t0 = time.time()
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
        code, tail = p.returncode, p.stderr[-1500:]
    except subprocess.TimeoutExpired:
        code, tail = "timeout", ""
    row = {"name": name, "model": model, "seq_len": seq, "micro_batch": mb, "precision": precision, "ac": ac,
           "wall_s": round(time.time() - t0, 1)}
    if code != 0 or not (d / "summary.json").is_file():
        return {**row, "error": f"exit {code}", "stderr_tail": tail}
    s = json.loads((d / "summary.json").read_text())
    if not cuda:  # compare-run refuses a CPU run (the planner has no CPU device): what it measured, unpredicted
        return {**row, "first_loss": s["first_loss"], "last_loss": s["last_loss"],
                "step_time_s_measured": s.get("step_time_s"), "note": "CPU: no prediction to compare with"}
    from trainplan.commands.compare_run import compare

    c = compare(d)
    row = {**row, "gpu": c["gpu"], "layout": c["layout"], "first_loss": s["first_loss"], "last_loss": s["last_loss"],
           "prediction_error": c["prediction_error"],
           **{f"{r['field']}_{k}": r[k] for r in c["rows"] for k in ("predicted", "measured", "measured_over_predicted")}}
    if machine is not None:  # the same run predicted with the machine profile (--machine): before and after
        cm = compare(d, machine)
        row |= {f"{r['field']}_{k}_machine": r[k] for r in cm["rows"] for k in ("predicted", "measured_over_predicted")}
    return row


def main() -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=None, help="steps per layout (20 on GPU, 4 on CPU)")
    ap.add_argument("--only", help="run only the layouts whose name contains this")
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--timeout", type=float, default=240, help="seconds per layout")
    ap.add_argument("--runs-dir", default="/tmp/trainplan-gpu-check",
                    help="scratch directory for each layout's run (plan, measurements, summary)")
    ap.add_argument("--machine", default=None, metavar="PROFILE",
                    help="also predict every run with this machine profile (trainplan probe's output)")
    args = ap.parse_args()
    machine = None
    if args.machine:
        from trainplan.commands._profile_args import load_profiles

        machine = load_profiles(None, args.machine)
    cuda = torch.cuda.is_available()
    cases = [c for c in (GPU_CASES if cuda else CPU_CASES) if not args.only or args.only in c[0]]
    steps = args.steps or (20 if cuda else 4)
    results_dir = Path(args.out)
    runs = Path(args.runs_dir)
    rows = []
    for case in cases:
        row = run_case(case, steps, runs, args.timeout, machine, cuda)
        rows.append(row)
        brief = {k: row.get(k) for k in ("name", "error", "peak_mem_gib_measured", "peak_mem_gib_predicted",
                                         "step_time_s_measured", "step_time_s_predicted", "mfu_measured", "mfu_predicted")}
        print(json.dumps(brief), flush=True)
    device = torch.cuda.get_device_name(0) if cuda else "cpu"
    result = {"schema": "trainplan-gpu-check/1", "device": device, "torch": torch.__version__,
              "steps": steps,
              "note": ("predicted = trainplan estimate of the plan fitted to one GPU of " + NODE +
                       "; measured medians exclude the first step; peak_mem_gib = max reserved"),
              "machine": args.machine, "rows": rows}
    name = "gpu_check.json" if cuda else "gpu_check_cpu.json"
    _stamp.write(results_dir / name, result, __file__, indent=2)
    print(f"wrote {results_dir / name}")
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    sys.exit(main())
