"""Trainer overhead: `trainplan.runtime` step time vs a bare PyTorch loop, same model, same data.

Both run on CPU in one process: the trainer through its whole loop (a 1-rank gloo group, on
which, as torchtitan, FSDP is not applied; the plan's AdamW + schedule, gradient clipping over
meshes, the per-step loss/stop all-reduce, the JSONL record), the bare loop as the plain module with torch's AdamW, clip_grad_norm_ and
loss.item(). Same model (runtime.model.Decoder), same init, same batches, bf16 mixed precision in
both: the recipe registry has no fp32 recipe, and on one process the trainer's bf16 comes from
torch.autocast (parallel.forward_context), which the bare loop enters the same way, so a CPU that
emulates bf16 pays that cost on both sides and the difference is still the trainer's. Runs alternate (trainer, bare, trainer, ...) so drift in the
machine's speed hits both. Each run yields its median per-step wall time over steps 2..N (the
trainer's own step_time_s: data, forward, backward, clip, optimizer, the loss/stop all-reduce;
the bare loop timed the same way). Headline: the best run of each (interference from other
processes only ever adds time, so the minimum is the least noisy estimate); medians too.

    .venv/bin/python bench/trainer_overhead.py [--steps 40] [--repeats 3] [--out bench/results/trainer_overhead.json]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import _stamp
import torch

from trainplan.runtime.data import make_batches
from trainplan.runtime.demo import DEMO_MODEL, demo_plan
from trainplan.runtime.model import Decoder
from trainplan.runtime.optim import make_optimizer
from trainplan.runtime.trainer import RunOptions, train

SPEC = replace(DEMO_MODEL, name="overhead-llama", num_layers=4, hidden_size=192, num_heads=6, num_kv_heads=2,
               head_dim=32, ffn_size=512)
SEQ, MB = 128, 4
PRECISION = "bf16"  # a recipe of recipes.toml; on one process autocast supplies it


def plan(steps: int):
    p = demo_plan(1, steps=steps, seq_len=SEQ, micro_batch=MB, model=SPEC, precision=PRECISION)
    return replace(p, train=replace(p.train, log_every=1))


def run_trainer(steps: int) -> float:
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        os.environ.pop(k, None)
    with tempfile.TemporaryDirectory() as d:
        s = train(plan(steps), RunOptions(out=Path(d), progress=False))
    return s["step_time_s"]  # median over steps 2..N of the trainer's own per-step wall time


def run_bare(steps: int) -> float:
    p = plan(steps)
    model = Decoder(SPEC, SEQ)
    model.init_weights(p.train.seed)
    opt, sched = make_optimizer(model, p.train, steps)
    data = make_batches("", None, SPEC.vocab_size, SEQ, MB, 1, 1, 0, steps)
    times = []
    for step in range(steps):
        t0 = time.perf_counter()
        x, y = data.micro(step, 0)
        with torch.autocast("cpu", dtype=torch.bfloat16):  # what forward_context enters on one process
            loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), p.train.grad_clip)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        loss.item()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:])  # as the trainer's summary: the first step excluded


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="bench/results/trainer_overhead.json")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1: least noise)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    trainer, bare = [], []
    for _ in range(args.repeats):
        trainer.append(run_trainer(args.steps))
        bare.append(run_bare(args.steps))
    t, b = min(trainer), min(bare)
    tm, bm = statistics.median(trainer), statistics.median(bare)
    result = {
        "what": "median per-step wall time (s) over steps 2..N per run; trainer (1 process: no FSDP, as torchtitan) vs bare loop",
        "model": SPEC.name, "layers": SPEC.num_layers, "hidden": SPEC.hidden_size, "seq_len": SEQ,
        "micro_batch": MB, "precision": PRECISION, "steps": args.steps, "repeats": args.repeats,
        "trainer_step_s": trainer, "bare_step_s": bare,
        "trainer_best_s": t, "bare_best_s": b, "overhead": t / b - 1,
        "trainer_median_s": tm, "bare_median_s": bm, "overhead_median": tm / bm - 1,
        "load_average": os.getloadavg(),
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "torch": torch.__version__, "threads": torch.get_num_threads()},
    }
    _stamp.write(args.out, result, __file__, indent=2)
    print(f"best of {args.repeats}: trainer {t * 1e3:.1f} ms/step, bare loop {b * 1e3:.1f} ms/step: overhead "
          f"{t / b - 1:+.1%} (medians: {tm / bm - 1:+.1%}) -> {args.out}")


if __name__ == "__main__":
    main()
