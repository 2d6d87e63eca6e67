"""Predicted vs measured peak memory for the published runs that print one.

    .venv/bin/python bench/memory_vs_published.py [DATASET] [--json | --write]

Records come through trainplan.validation.dataset (the shared record -> Job/Layout converter).
The measured kind decides what is compared: 'reserved' (torchtitan's max reserved GiB) against
MemoryBreakdown.total_reserved, 'allocated' against total_allocated, 'unknown' (a 'GB' column)
against what the framework's logger prints when the source code says it (dataset.peak_mem_kind:
KempnerForge prints max_memory_allocated in GiB), else the device total (with the CUDA context and
NCCL buffers), as `trainplan validate` does.
Nothing here is fitted: the error is out-of-sample by construction.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import _stamp

from trainplan.costs.memory import memory_breakdown
from trainplan.units import GiB
from trainplan.validation.dataset import load_dataset, peak_mem_kind

DEFAULT = Path(__file__).resolve().parents[1] / ".." / "shared" / "validation" / "published_dev.json"


def rows(path):
    _, cases = load_dataset(path)
    out = []
    for c in cases:
        meas = c.measured.get("peak_mem_gib")
        if meas is None:
            continue
        row = {"id": c.id, "source": c.source_key, "quality": c.quality, "kind": peak_mem_kind(c),
               "measured_gib": meas}
        if c.skipped_reason:
            row["skipped"] = c.skipped_reason
        else:
            b = memory_breakdown(c.job, c.layout)
            pred = {"reserved": b.total_reserved, "allocated": b.total_allocated}.get(row["kind"], b.total)
            row |= {"predicted_gib": round(pred / GiB, 2), "error": round(pred / GiB / meas - 1, 4),
                    "layout": c.layout.short(), "model": c.job.model.name,
                    "assumptions": list(c.assumptions)}
        out.append(row)
    return out


def summary(rs):
    errs = [abs(r["error"]) for r in rs if "error" in r]
    by_src = {}
    for r in rs:
        if "error" in r:
            by_src.setdefault(r["source"], []).append(abs(r["error"]))
    full = [abs(r["error"]) for r in rs if "error" in r and r.get("quality") == "full"]
    return {"n": len(errs), "skipped": sum(1 for r in rs if "skipped" in r),
            "median_abs_error": round(statistics.median(errs), 4) if errs else None,
            "max_abs_error": round(max(errs), 4) if errs else None,
            "n_full": len(full),
            "median_abs_error_full": round(statistics.median(full), 4) if full else None,
            "median_abs_error_by_source": {k: round(statistics.median(v), 4) for k, v in by_src.items()}}


def main(argv):
    path = next((a for a in argv if not a.startswith("--")), DEFAULT)
    rs = rows(path)
    if "--json" in argv:
        print(json.dumps({"rows": rs, "summary": summary(rs)}, indent=2))
        return 0
    if "--write" in argv:  # bench/results/memory_vs_published.json, committed as data
        _stamp.write(Path(__file__).resolve().parent / "results" / "memory_vs_published.json",
                     {"benchmark": "memory_vs_published", "rows": rs, "summary": summary(rs)}, __file__)
    for r in rs:
        if "skipped" in r:
            print(f"{r['id']:5} {r['source']:10} skipped: {r['skipped']}")
            continue
        print(f"{r['id']:5} {r['source']:10} {r['model'][:16]:16} {r['layout'][:58]:58} "
              f"meas {r['measured_gib']:7.2f} pred {r['predicted_gib']:7.2f} ({r['kind']}) err {r['error']:+.1%}")
    print(json.dumps(summary(rs)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
