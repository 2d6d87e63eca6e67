"""Predicted vs measured tokens/s/GPU for published MoE training runs outside the dev set.

    .venv/bin/python bench/moe_out_of_sample.py [--json | --write]

Rows (trainplan/validation/data/published_holdout.json, read by validation/holdout.py): the
Megatron-Bridge 26.04.01 MoE pre-training rows that the dev set (validation/data/published_dev.json,
source_key mb260401) does not hold, and the Megatron-MoE-ModelZoo Qwen3-235B H100 rows other than the
dev set's Megatron-FSDP row (M216, source_key moezoo). Each row's `source`
quotes its table row verbatim, with the file, revision and line; a ModelZoo row's tokens/s/GPU is
global_batch * seq_len / (num_gpus * step_s). A row whose layout, batch and system equal a dev record
of the same source stops the run (holdout.table_records).

Each row becomes a `trainplan-validation/1` record (model and system blocks copied from the dev record
of the same architecture / system, named in `model_from` / `system_from`) and is predicted twice, as
`trainplan validate` predicts a record (validation.run.predict_case: the profile fitted without the
record's source, Profile.fold):
  as_held_out  only what the published table states; every other field and every execution setting
               is the stack preset's (stacks.toml), with the loader's defaults (AC unknown -> selective).
               A ModelZoo row's sequence_parallel is inferred from its TP > 1, as dev record M216's is.
  with_recipe  plus what the run's recipe states that trainplan represents: train.execution keys
               (stacks.SETTINGS) and the layout fields the table leaves out (etp, activation
               checkpointing). What trainplan does not represent (HybridEP, CUDA graphs scoped to some
               modules, delayed wgrad, recompute of listed modules) stays at the preset or the nearest
               mode and is listed in the row's `recipe.not_represented`.
Recipes: Megatron-Bridge @17a381f95, the commit that published the 26.04.01 table (tag v0.4.2, whose
docs/performance-summary.md lists 26.04.01 as its container, holds the same values for these rows),
scripts/performance/configs. The src/megatron/bridge/perf_recipes of @067f987 are the 26.06 recipes
(Qwen3-235B B200 MXFP8 has VP 3 and HybridEP there; the 26.04.01 row has no VP) and are not used.
ModelZoo: @8017e11, the commit that added these rows: examples/qwen3/run_235b.sh (one command per
row) and model_configs/benchmarking/Qwen3-235B-A22B.yaml.
Nothing here is fitted: the rows never enter a fit, so the error is out-of-sample by construction (the
profile only reports the as_held_out error, cv_error holdout, and widens MoE bands by it).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import _stamp

from trainplan.profile import default_profile
from trainplan.validation.dataset import to_case
from trainplan.validation.errors import rel_error, stats
from trainplan.validation.holdout import dev_records, load_rows, record, table_records
from trainplan.validation.run import predict_case

OUT = Path(__file__).resolve().parent / "results" / "moe_out_of_sample.json"
SOURCES = ("mb260401", "moezoo")
VARIANTS = ("as_held_out", "with_recipe")


def predict(rec: dict, prof) -> dict:
    case = to_case(rec)
    if case.skipped_reason:
        return {"skipped_reason": case.skipped_reason, "assumptions": list(case.assumptions)}
    p = predict_case(case, prof)
    return {"layout": case.layout.short(), "profile": p["_profile"],
            "predicted_tokens_per_s_per_gpu": round(p["tokens_per_s_per_gpu"], 1),
            "error": round(rel_error(p["tokens_per_s_per_gpu"], rec["measured"]["tokens_per_s_per_gpu"]), 4),
            "assumptions": list(case.assumptions)}


def rows() -> list[dict]:
    dev, prof = dev_records(), default_profile()
    seq, table = load_rows()
    out = []
    # table_records refuses a row equal to a dev record of its source (not out of sample)
    for row, held_out in zip(table, table_records(), strict=True):
        out.append({"id": row["id"], "name": row["name"], "source": row["source"],
                    "model_from": row["model_from"], "system_from": row["system_from"],
                    "measured_tokens_per_s_per_gpu": round(row["measured"]["tokens_per_s_per_gpu"], 1),
                    "measured_step_time_s": row["measured"]["step_time_s"],
                    "measured_tflops_per_gpu": row["measured"]["tflops_per_gpu"],
                    "as_held_out": predict(held_out, prof),
                    "with_recipe": predict(record(row, dev, seq, with_recipe=True), prof),
                    "recipe": row["recipe"], "notes": row["notes"]})
    return out


def _stats(errs: list[float]) -> dict:
    """validation.errors.stats (count, median / p90 / max |error|, mean signed error), rounded."""
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in stats(errs).items()}


def summary(rs: list[dict]) -> dict:
    """Per variant: all its predicted rows, and by source; then both variants on the rows both predict."""
    def errs(variant: str, ids: set[str]) -> list[float]:
        return [r[variant]["error"] for r in rs if "error" in r[variant] and r["id"] in ids]

    every = {r["id"] for r in rs}
    out = {"n": len(rs), "profile": default_profile().name, "cross_validated": True}
    for v in VARIANTS:
        by_source = {s: _stats(errs(v, {i for i in every if i.startswith(s + "/")})) for s in SOURCES}
        out[v] = {**_stats(errs(v, every)), "skipped": sum(1 for r in rs if "skipped_reason" in r[v]),
                  "by_source": by_source}
    both = {r["id"] for r in rs if all("error" in r[v] for v in VARIANTS)}
    out["both_predicted"] = {"n": len(both), **{v: _stats(errs(v, both)) for v in VARIANTS}}
    return out


def _cell(p: dict) -> str:
    if "error" not in p:
        return "skipped".rjust(16)
    return f"{p['predicted_tokens_per_s_per_gpu']:8.0f} {p['error']:+7.1%}"


def main(argv: list[str]) -> int:
    rs = rows()
    result = {"benchmark": "moe_out_of_sample", "rows": rs, "summary": summary(rs)}
    if "--json" in argv:
        print(json.dumps(result, indent=2))
        return 0
    if "--write" in argv:  # bench/results/moe_out_of_sample.json, committed as data
        _stamp.write(OUT, result, __file__)
    print(f"{'row':56} {'measured':>8} {'as_held_out':>16} {'with_recipe':>16}")
    for r in rs:
        print(f"{r['name'][:56]:56} {r['measured_tokens_per_s_per_gpu']:8.0f} {_cell(r['as_held_out'])} "
              f"{_cell(r['with_recipe'])}")
        for v in VARIANTS:
            print(f"    {v:11} {r[v].get('layout') or 'skipped: ' + r[v]['skipped_reason']}")
    s = result["summary"]
    for v in VARIANTS:
        print(f"{v}: n={s[v]['count']} (skipped {s[v]['skipped']}) median |error| {s[v]['median_abs']:.1%} "
              f"p90 {s[v]['p90_abs']:.1%} max {s[v]['max_abs']:.1%} mean signed {s[v]['mean_signed']:+.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
