"""Against NVIDIA's hand tuning (issue 5): for the Megatron-Bridge / NeMo records of the shared
validation set, search on the same model, GPU count, sequence length, global batch and precision,
and compare the planner's predicted tokens/s for its own pick with its prediction for the
published (hand-tuned) layout. A ratio above 1 means the planner believes its pick is faster;
below 1, the published layout wins, and `why` says what kept the search from finding it.

The precision is held at the published recipe: it changes the numerics of training, so it is a
decision of the team, not a layout choice to be tuned away.

    .venv/bin/python bench/hand_tuning.py [--dataset ../shared/validation/published_dev.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import _stamp

from trainplan.errors import TrainplanError
from trainplan.search import BatchSpec, Counting, Query, model_evaluator, search, space
from trainplan.validation.dataset import load_dataset

FRAMEWORKS = ("megatron_bridge", "nemo")
DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "validation" / "published_dev.json"


def why_published_wins(case, ev: Counting) -> str:
    """What kept the search from the published layout: outside the space, or an OOM risk."""
    job, L = case.job, case.layout
    mesh = space.Mesh(L.tp, L.pp, L.cp, L.ep, L.dp_replicate, L.dp_shard, L.sharding)
    meshes = set(space.meshes(job.model, job.cluster.node, job.cluster.nodes, job.workload.seq_len))
    if mesh not in meshes:
        return f"mesh outside the search space (tp={L.tp} pp={L.pp} cp={L.cp} ep={L.ep} " \
               f"dp={L.dp_replicate}x{L.dp_shard} {L.sharding})"
    if L.vp > 1 and L.vp not in space.vp_options(job.model.num_layers, L.pp):
        return f"virtual pipeline stages vp={L.vp} (not among {space.vp_options(job.model.num_layers, L.pp)})"
    if not ev.fits(job, L):
        mem, cap = ev.memory(job, L), job.cluster.gpu.memory_bytes
        return (f"predicted memory {mem / 2**30:.1f} GiB (+{ev.memory_band(job).error:.0%} band) "
                f"exceeds {cap / 2**30:.0f} GiB: an OOM risk the search sets aside")
    if L.ac == "partial" or L.micro_batch not in BatchSpec(job.workload.global_batch,
                                                          job.workload.global_batch).micro_batches(L.dp, job.workload.seq_len):
        return "a checkpointing level or micro-batch the bisection does not stop at"
    return "pruned by the screen: its mesh was not among the best few at the screening precision"


def one(case, ev: Counting) -> dict:
    job, L = case.job, case.layout
    w = job.workload
    row = {"id": case.id, "source": case.source_key, "model": case.record["model"]["name"],
           "gpu": job.cluster.gpu.name, "gpus": job.cluster.num_gpus, "seq_len": w.seq_len,
           "global_batch": w.global_batch, "precision": L.precision, "published_layout": L.short(),
           "measured_tokens_per_s_per_gpu": case.measured.get("tokens_per_s_per_gpu")}
    pub = ev.evaluate(job, L)
    row["published_predicted_tokens_per_s_per_gpu"] = pub.tokens_per_s / job.cluster.num_gpus
    q = Query(job.model, (job.cluster.node,), nodes=job.cluster.nodes, seq_len=w.seq_len,
              batch=BatchSpec(w.global_batch, w.global_batch), precision=L.precision)
    try:
        r = search(q, ev)
    except TrainplanError as e:
        row.update(pick=None, ratio=None, why=f"search found no plan: {e}")
        return row
    c = r.chosen
    row["pick_layout"] = c.layout.short()
    row["pick_predicted_tokens_per_s_per_gpu"] = c.tokens_per_s_per_gpu
    row["ratio"] = c.tokens_per_s / pub.tokens_per_s
    row["published_wins"] = row["ratio"] < 1.0
    row["why"] = why_published_wins(case, ev) if row["published_wins"] else None
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default=str(DEFAULT))
    ap.add_argument("--out", default="bench/results/hand_tuning.json")
    args = ap.parse_args(argv)
    _, cases = load_dataset(args.dataset)
    chosen = [c for c in cases if c.framework in FRAMEWORKS]
    rows, skipped = [], []
    for case in chosen:
        if case.job is None:
            skipped.append({"id": case.id, "reason": case.skipped_reason})
            continue
        ev = Counting(model_evaluator())
        rows.append(one(case, ev))
        r = rows[-1]
        ratio = "-" if r.get("ratio") is None else f"{r['ratio']:.2f}"
        print(f"{r['id']:<6}{r['model'][:22]:<23}{r['gpus']:>5}{ratio:>6}  {r.get('why') or ''}"[:160],
              file=sys.stderr)
    ratios = [r["ratio"] for r in rows if r.get("ratio")]
    summary = {
        "records": len(chosen), "compared": len(ratios), "skipped": skipped,
        "median_ratio": statistics.median(ratios) if ratios else None,
        "min_ratio": min(ratios) if ratios else None, "max_ratio": max(ratios) if ratios else None,
        "published_wins": sum(1 for r in rows if r.get("published_wins")),
    }
    out = {"benchmark": "hand_tuning", "dataset": Path(args.dataset).name,
           "frameworks": list(FRAMEWORKS), "summary": summary, "rows": rows}
    _stamp.write(args.out, out, __file__, indent=2)
    print(json.dumps(summary, indent=2), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
