"""Benchmark: how long `trainplan trace` takes on this machine (not a test; timings are data).

Issue 3's target: a 2-layer slice of a 70B-class model at sequence 8192 traced in under 20 s on a
2-core machine. Each case runs in a fresh process (imports included, as a user pays them) and in
the same process again (warm). Results: bench/results/trace_speed.json.

    .venv/bin/python bench/trace_speed.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import _stamp

CASES = [
    # (model, seq_len, ac, precision)
    ("llama-3.1-70b", 8192, "none", "bf16"),
    ("llama-3.1-70b", 8192, "full", "bf16"),
    ("llama-3.1-70b", 8192, "selective", "bf16"),
    ("llama-3.1-8b", 8192, "none", "bf16"),
    ("llama-3.1-70b", 8192, "none", "fp8_tensorwise"),
    ("qwen3-30b-a3b", 8192, "none", "bf16"),
    ("deepseek-v3", 4096, "full", "bf16"),
]

CHILD = """
import json, sys, time
t0 = time.perf_counter()
from trainplan.trace import TraceSettings, trace_config
from trainplan.trace.config import load_config
model, seq, ac, prec = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
cfg = load_config(model)
t1 = time.perf_counter()
r = trace_config(cfg, TraceSettings(seq_len=seq, ac=ac, precision=prec))
t2 = time.perf_counter()
r2 = trace_config(cfg, TraceSettings(seq_len=seq, ac=ac, precision=prec))
t3 = time.perf_counter()
full = r.full()
print(json.dumps({"import_s": round(t1 - t0, 2), "trace_s": round(t2 - t1, 2), "warm_trace_s": round(t3 - t2, 2),
                  "activation_bytes_per_layer": full["activation_bytes_per_layer"],
                  "peak_bytes": full["peak_bytes"], "flops_per_step": full["flops_per_step"]}))
"""


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true", help="only the 70B target case")
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "trace_speed.json"))
    a = p.parse_args()
    rows = []
    for model, seq, ac, prec in CASES[:1] if a.quick else CASES:
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", CHILD, model, str(seq), ac, prec], check=False,
                              capture_output=True, text=True)
        wall = time.perf_counter() - t0
        row = {"model": model, "seq_len": seq, "ac": ac, "precision": prec, "layers_traced": 2,
               "process_wall_s": round(wall, 2)}
        if proc.returncode == 0:
            row.update(json.loads(proc.stdout.strip().splitlines()[-1]))
        else:
            row["error"] = proc.stderr.strip().splitlines()[-1][:300]
        print(json.dumps(row), flush=True)
        rows.append(row)
    import torch
    import transformers

    out = {"what": "trainplan trace wall time, 2 traced layers, micro-batch 1, 2 training steps",
           "target": "70B-class 2-layer slice at seq 8192 under 20 s on a 2-core machine (issue 3)",
           "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                       "python": platform.python_version(), "torch": torch.__version__,
                       "transformers": transformers.__version__,
                       "load_avg_at_end": os.getloadavg()},
           "results": rows}
    _stamp.write(a.out, out, __file__)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
