"""Predicted vs measured tokens/s/GPU for published MoE training runs outside the dev set.

    .venv/bin/python bench/moe_out_of_sample.py [--json | --write]

Rows: the Megatron-Bridge 26.04.01 MoE pre-training rows that the dev set (validation/data/
published_dev.json, source_key mb260401) does not hold, and the Megatron-MoE-ModelZoo Qwen3-235B
H100 rows other than the dev set's Megatron-FSDP row (M216, source_key moezoo). Each row's `source`
quotes its table row verbatim, with the file, revision and line; a ModelZoo row's tokens/s/GPU is
global_batch * seq_len / (num_gpus * step_s). A row whose layout, batch and system equal a dev record
of the same source stops the run (dev_twins).

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
Nothing here is fitted: the rows never enter a profile, so the error is out-of-sample by construction.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

from trainplan.profile import default_profile
from trainplan.validation.dataset import DEV_DATASET, to_case
from trainplan.validation.errors import rel_error, stats
from trainplan.validation.run import predict_case

OUT = Path(__file__).resolve().parent / "results" / "moe_out_of_sample.json"
SEQ = 4096  # every row's sequence length (the tables' 'Sequence Length' / 'SEQ LEN' column)
SOURCES = ("mb260401", "moezoo")
VARIANTS = ("as_held_out", "with_recipe")

MB_TABLE = ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md @067f987 (same rows at "
            "v0.4.2 docs/performance-summary.md), '26.04.01 NeMo Container' > Pre-Training Performance")
MB_CONFIGS = "NVIDIA-NeMo/Megatron-Bridge @17a381f95 (= v0.4.2 for this row) scripts/performance/configs/"
# The table's precision column -> the dataset's names; 'FP8' is fp8_cs (TE current scaling) in the
# H100 recipes, which the dataset calls fp8_tensorwise.
MB_PRECISION = {"BF16": "bf16", "MXFP8": "mxfp8", "FP8": "fp8_tensorwise"}
MB_NOTE = "26.04.01 footnote: forced-balanced routing, token-dropless (moe_imbalance 1 = the preset)"
HYBRIDEP = "hybridep: not priced, left at the preset's dispatcher (moe_flex_dispatcher_backend='hybridep')"
WGRAD = "delay_wgrad_compute=True (comes with the EP overlap)"
CUDA_GRAPHS = "CUDA graphs scoped to [{}] (trainplan's cuda_graphs is whole-step capture, and not priced)"
NO_AC = {"mode": "none", "detail": "set_qwen3_common_configs: recompute_granularity None"}
LN_ACT = {"mode": "selective", "detail": "recompute_modules [layernorm, moe_act]"}
LN_ACT_NOTE = ("recompute_modules [layernorm, moe_act]: ac=selective (the dataset's mode for module lists), "
               "which trainplan prices as Megatron's default selective recompute (core_attn)")

ZOO_TABLE = "yanring/Megatron-MoE-ModelZoo best_practice/qwen3/readme.md @e865051 (H100 table)"
ZOO_RUN = "yanring/Megatron-MoE-ModelZoo @8017e11 examples/qwen3/run_235b.sh"
ZOO_YAML = ("model_configs/benchmarking/Qwen3-235B-A22B.yaml @8017e11: --overlap-grad-reduce, "
            "--overlap-param-gather, --sequence-parallel, --expert-tensor-parallel-size 1; no "
            "--tp-comm-overlap and no --cross-entropy-loss-fusion (sbatch_benchmarking.sh adds "
            "--tp-comm-overlap for bf16 only from b09773a, 2025-12-16, after these runs)")
ZOO_EXECUTION = {"grad_reduce_overlap": True, "param_gather_overlap": True}
ZOO_SP = ("sequence_parallel true in as_held_out too: implied by TP > 1 on a Megatron MoE run (Megatron-LM "
          "megatron/training/arguments.py validate_args: 'When using MoE and tensor parallelism, sequence "
          "parallelism must be used.'), as dev record M216 of the same table infers it")


def mb_row(*, key, name, system, line, model_from, system_from, gpus, precision, gbs, mbs, tp, pp, vp, ep,
           tps, tflops, recipe, execution, train, not_represented=(), notes=()):
    """A Megatron-Bridge 26.04.01 row: the table's columns, then what its recipe states."""
    cells = (system, gpus, precision, gbs, mbs, SEQ, 0, tp, pp, 1, vp or "n/a", ep, tps, tflops)
    return {
        "id": f"mb260401/{key}", "name": name, "source_key": "mb260401",
        "source": f"{MB_TABLE}, line {line}: '| {' | '.join(map(str, cells))} |'",
        "model_from": model_from, "system_from": system_from, "framework": "megatron_bridge",
        "table": {"num_gpus": gpus, "precision": MB_PRECISION[precision], "global_batch": gbs,
                  "micro_batch": mbs, "tp": tp, "pp": pp, "vp": vp, "ep": ep,
                  "activation_checkpointing": {"mode": "unknown", "detail": "not in the table"}},
        "measured": {"tokens_per_s_per_gpu": tps, "step_time_s": None, "tflops_per_gpu": tflops},
        "recipe": {"source": MB_CONFIGS + recipe, "execution": execution, "train": train,
                   "not_represented": list(not_represented)},
        "notes": [MB_NOTE, *notes],
    }


def zoo_row(*, line, name, dispatcher, tp, ep, pp, vp, edp, dp, ga, recompute, step_s, tflops, table_notes,
            code, command, execution, notes=()):
    """A Megatron-MoE-ModelZoo Qwen3-235B H100 row (BF16, 256 GPUs, CP 1, ETP 1, MBS 1, GBS 2048, no
    FSDP): the table's columns, then the row's run_235b.sh command and its config."""
    gpus, gbs = 256, 2048
    assert dp == gpus // (tp * pp) and ga == gbs // dp and ep * edp * pp == gpus, line  # transcription
    cells = ("235B", dispatcher, "H100", "BF16", gpus, SEQ, tp, 1, ep, pp, edp, 1, vp, dp, "/", 1, gbs, ga,
             recompute, step_s, tflops, "", "", table_notes, code)
    return {
        "id": f"moezoo/qwen3-235b-h100-line{line}", "name": name, "source_key": "moezoo",
        "source": f"{ZOO_TABLE}, line {line}: '| {' | '.join(map(str, cells))} |'",
        "model_from": "M216", "system_from": "M216", "framework": "megatron",
        "table": {"num_gpus": gpus, "precision": "bf16", "global_batch": gbs, "micro_batch": 1,
                  "tp": tp, "pp": pp, "vp": vp if vp > 1 else None, "ep": ep, "etp": 1,
                  "sequence_parallel": True,
                  "activation_checkpointing": ({"mode": "selective", "detail": recompute} if recompute
                                               else {"mode": "none", "detail": "recompute cell blank"})},
        # tokens/s/GPU from the step time: the global batch's tokens over all GPUs and the step
        "measured": {"tokens_per_s_per_gpu": gbs * SEQ / (gpus * step_s), "step_time_s": step_s,
                     "tflops_per_gpu": tflops},
        "recipe": {"source": f"{ZOO_RUN}: '{command}'; {ZOO_YAML}",
                   "execution": {**execution, **ZOO_EXECUTION}, "train": {}, "not_represented": []},
        "notes": [f"tokens/s/GPU = {gbs} * {SEQ} / ({gpus} * {step_s} s)", ZOO_SP,
                  "--moe-router-force-load-balancing in the command (moe_imbalance 1 = the preset)", *notes],
    }


ROWS = (
    mb_row(key="gpt-oss-120b/b200", name="GPT-OSS 120B B200 x64 BF16", system="DGX-B200", line=237,
           model_from="M205", system_from="M207", gpus=64, precision="BF16", gbs=1280, mbs=4,
           tp=1, pp=1, vp=None, ep=8, tps=13568, tflops=369,
           recipe="gpt_oss/gpt_oss_llm_pretrain.py gpt_oss_120b_pretrain_config_b200(precision='bf16', "
                  "config_variant='v2'), gpt_oss_workload_base_configs.py GPT_OSS_120B_PRETRAIN_CONFIG_B200_BF16_V2",
           execution={"moe_dispatcher": "alltoall", "ep_comm_overlap": False},
           train={"etp": 1, "activation_checkpointing": LN_ACT}, not_represented=[LN_ACT_NOTE],
           notes=[("no flex backend: set_workload_base_configs sets moe_token_dispatcher_type 'alltoall' "
                   "(#3614, 2026-05-05, switched B200 V2 from hybridep)")]),
    mb_row(key="gpt-oss-120b/gb200", name="GPT-OSS 120B GB200 x64 BF16", system="DGX-GB200", line=235,
           model_from="M205", system_from="M198", gpus=64, precision="BF16", gbs=1280, mbs=4,
           tp=1, pp=1, vp=None, ep=64, tps=16640, tflops=452,
           recipe="gpt_oss/gpt_oss_llm_pretrain.py gpt_oss_120b_pretrain_config_gb200(precision='bf16', "
                  "config_variant='v2'), GPT_OSS_120B_PRETRAIN_CONFIG_GB200_BF16_V2 (moe_a2a_overlap=True)",
           execution={"moe_dispatcher": "alltoall", "ep_comm_overlap": True},
           train={"etp": 1, "activation_checkpointing": LN_ACT}, not_represented=[LN_ACT_NOTE, WGRAD],
           notes=[("no flex backend: moe_token_dispatcher_type 'alltoall' (#3561, 2026-04-29, switched GB200 "
                   "V2 from hybridep)")]),
    mb_row(key="qwen3-30b-a3b/gb200", name="Qwen3 30B-A3B GB200 x8 MXFP8", system="DGX-GB200", line=245,
           model_from="M207", system_from="M198", gpus=8, precision="MXFP8", gbs=512, mbs=4,
           tp=1, pp=1, vp=None, ep=8, tps=26112, tflops=599,
           recipe="qwen/qwen3_llm_pretrain.py qwen3_30b_a3b_pretrain_config_gb200(precision='fp8_mx'), "
                  "qwen3_workload_base_configs.py QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_MX_V1",
           execution={"ep_comm_overlap": False}, train={"etp": 1, "activation_checkpointing": NO_AC},
           not_represented=[HYBRIDEP, CUDA_GRAPHS.format("moe_router, moe_preprocess")]),
    mb_row(key="qwen3-30b-a3b/h100", name="Qwen3 30B-A3B H100 x16 FP8", system="DGX-H100", line=248,
           model_from="M207", system_from="M205", gpus=16, precision="FP8", gbs=1024, mbs=1,
           tp=1, pp=1, vp=None, ep=16, tps=8960, tflops=206,
           recipe="qwen/qwen3_llm_pretrain.py qwen3_30b_a3b_pretrain_config_h100(precision='fp8_cs'), "
                  "QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1 (moe_a2a_overlap=False)",
           execution={"ep_comm_overlap": False}, train={"etp": 1, "activation_checkpointing": NO_AC},
           not_represented=[HYBRIDEP],
           notes=[("the EP overlap of @067f987 perf_recipes/qwen/h100/qwen3_moe.py is its BF16 recipe's; "
                   "this row is FP8 and both revisions' FP8 recipes leave it off")]),
    mb_row(key="qwen3-235b-a22b/b200", name="Qwen3 235B-A22B B200 x256 MXFP8", system="DGX-B200", line=257,
           model_from="M216", system_from="M207", gpus=256, precision="MXFP8", gbs=8192, mbs=1,
           tp=1, pp=8, vp=None, ep=8, tps=3776, tflops=560,
           recipe="qwen/qwen3_llm_pretrain.py qwen3_235b_a22b_pretrain_config_b200(precision='fp8_mx', "
                  "config_variant='v2'), QWEN3_235B_A22B_PRETRAIN_CONFIG_B200_FP8_MX_V2 (= FP8_CS_V2)",
           execution={"moe_dispatcher": "alltoall", "ep_comm_overlap": False},
           train={"etp": 1, "activation_checkpointing": NO_AC}),
    mb_row(key="qwen3-235b-a22b/gb200", name="Qwen3 235B-A22B GB200 x256 MXFP8", system="DGX-GB200", line=255,
           model_from="M216", system_from="M198", gpus=256, precision="MXFP8", gbs=8192, mbs=1,
           tp=1, pp=8, vp=3, ep=32, tps=5680, tflops=840,
           recipe="qwen/qwen3_llm_pretrain.py qwen3_235b_a22b_pretrain_config_gb200(precision='fp8_mx', "
                  "config_variant='v2'), QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_FP8_MX_V2",
           execution={"ep_comm_overlap": False}, train={"etp": 1, "activation_checkpointing": NO_AC},
           not_represented=[HYBRIDEP, CUDA_GRAPHS.format("attn, moe_router, moe_preprocess")]),
    mb_row(key="qwen3-235b-a22b/h100", name="Qwen3 235B-A22B H100 x256 FP8", system="DGX-H100", line=258,
           model_from="M216", system_from="M205", gpus=256, precision="FP8", gbs=8192, mbs=1,
           tp=2, pp=8, vp=4, ep=32, tps=1712, tflops=253,
           recipe="qwen/qwen3_llm_pretrain.py qwen3_235b_a22b_pretrain_config_h100(precision='fp8_cs', "
                  "config_variant='v2'), QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_FP8_CS_V2 (moe_a2a_overlap=True)",
           execution={"moe_dispatcher": "alltoall", "ep_comm_overlap": True, "tp_comm_overlap": False},
           train={"etp": 1, "activation_checkpointing": NO_AC}, not_represented=[WGRAD],
           notes=["qwen3_235b_a22b_pretrain_config_h100 sets CommOverlapConfig(tp_comm_overlap=False)",
                  ("as_held_out skipped: with Megatron's default etp = tp = 2 the table's EP 32 needs "
                   "etp * ep = 64 ranks per pipeline stage, which has 256 / 8 = 32; the recipe's etp 1 fits")]),
    zoo_row(line=14, name="Qwen3 235B-A22B H100 x256 BF16 EP32 DeepEP", dispatcher="DeepEP",
            tp=2, ep=32, pp=8, vp=4, edp=1, dp=16, ga=128, recompute="norm, act", step_s=19.7, tflops=245,
            table_notes="", code="moe_dev(f3e6c5)",
            command="TP=2 PP=8 VPP=4 EP=32 NNODES=32 GBS=2048 bash ./sbatch_benchmarking.sh "
                    "--recompute-granularity selective --recompute-modules moe_act layernorm "
                    "--moe-router-force-load-balancing",
            execution={"moe_dispatcher": "deepep", "ep_comm_overlap": False}),
    zoo_row(line=15, name="Qwen3 235B-A22B H100 x256 BF16 EP32 DeepEP +1f1b overlap", dispatcher="DeepEP",
            tp=2, ep=32, pp=8, vp=4, edp=1, dp=16, ga=128, recompute="norm, act", step_s=17.6, tflops=276,
            table_notes="+1f1b overlap", code="moe_dev(f3e6c5)",
            command="TP=2 PP=8 VPP=4 EP=32 NNODES=32 GBS=2048 bash ./sbatch_benchmarking.sh "
                    "--recompute-granularity selective --recompute-modules moe_act layernorm --combined-1f1b "
                    "--combined-1f1b-recipe ep_a2a --moe-router-force-load-balancing",
            execution={"moe_dispatcher": "deepep", "ep_comm_overlap": True},
            notes=[("'+1f1b overlap' = --combined-1f1b-recipe ep_a2a: the EP all-to-alls hidden behind the "
                    "other micro-batch's compute (ep_comm_overlap)")]),
    zoo_row(line=18, name="Qwen3 235B-A22B H100 x256 BF16 PP32 A2A", dispatcher="A2A",
            tp=2, ep=8, pp=32, vp=3, edp=1, dp=4, ga=512, recompute="norm, act", step_s=24.2, tflops=200,
            table_notes="", code="main(1e057005)",
            command="TP=2 PP=32 VPP=3 EP=8 NNODES=32 GBS=2048 bash ./sbatch_benchmarking.sh "
                    "--recompute-granularity selective --recompute-modules moe_act layernorm "
                    "--moe-router-force-load-balancing",
            execution={"moe_dispatcher": "alltoall", "ep_comm_overlap": False},
            notes=[("dispatcher: the table's 'A2A'; the yaml @8017e11 sets --moe-token-dispatcher-type flex "
                    "--moe-enable-deepep and the row's command does not override it")]),
    zoo_row(line=19, name="Qwen3 235B-A22B H100 x256 BF16 TP4 DeepEP", dispatcher="DeepEP",
            tp=4, ep=8, pp=8, vp=4, edp=4, dp=8, ga=256, recompute="", step_s=29.0, tflops=167,
            table_notes="", code="main(1e057005)",
            command="TP=4 PP=8 VPP=4 EP=8 NNODES=32 GBS=2048 bash ./sbatch_benchmarking.sh "
                    "--moe-router-force-load-balancing --moe-router-aux-loss-fusion",
            execution={"moe_dispatcher": "deepep", "ep_comm_overlap": False},
            notes=["recompute cell blank and no --recompute-* flag in the row's command: ac=none"]),
)


def dev_records() -> dict[str, dict]:
    return {r["id"]: r for r in json.loads(DEV_DATASET.read_text())["records"]}


def record(row: dict, dev: dict[str, dict], with_recipe: bool) -> dict:
    """The row as a trainplan-validation/1 record: the table's fields, plus the recipe's."""
    t = row["table"]
    train = {"seq_len": SEQ, "micro_batch": t["micro_batch"], "global_batch": t["global_batch"],
             "tp": t["tp"], "pp": t["pp"], "vp": t["vp"], "cp": 1, "ep": t["ep"], "etp": t.get("etp"),
             "dp": t["num_gpus"] // (t["tp"] * t["pp"]), "sequence_parallel": t.get("sequence_parallel"),
             "sharding": "dist_optimizer", "fsdp_shard_degree": None, "precision": t["precision"],
             "activation_checkpointing": t["activation_checkpointing"], "framework": row["framework"],
             "torch_compile": None, "cuda_graphs": None, "cpu_offload": None, "fp8_all_gather": None}
    if with_recipe:
        train |= row["recipe"]["train"]
        train["execution"] = dict(row["recipe"]["execution"])
    train["activation_checkpointing"] = {"num_layers": None, **train["activation_checkpointing"]}
    return {"id": row["id"], "quality": "layout", "source": row["source"], "source_key": row["source_key"],
            "hardware": {**copy.deepcopy(dev[row["system_from"]]["hardware"]), "num_gpus": t["num_gpus"]},
            "model": copy.deepcopy(dev[row["model_from"]]["model"]), "train": train,
            "measured": {k: row["measured"][k] for k in ("tokens_per_s_per_gpu", "step_time_s")}}


_TWIN_KEYS = ("tp", "pp", "vp", "ep", "micro_batch", "global_batch", "precision")


def dev_twins(rec: dict, dev: dict[str, dict]) -> list[str]:
    """Dev records of the same source, model and system with the same layout and batch."""
    def key(r):
        return (r["source_key"], r["model"]["name"], r["hardware"]["gpu"], r["hardware"]["num_gpus"],
                *(r["train"].get(k) for k in _TWIN_KEYS))
    return [i for i, r in dev.items() if key(r) == key(rec)]


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
    out = []
    for row in ROWS:
        held_out = record(row, dev, with_recipe=False)
        twins = dev_twins(held_out, dev)
        if twins:
            raise SystemExit(f"{row['id']} duplicates dev record(s) {', '.join(twins)}: not out-of-sample")
        out.append({"id": row["id"], "name": row["name"], "source": row["source"],
                    "model_from": row["model_from"], "system_from": row["system_from"],
                    "measured_tokens_per_s_per_gpu": round(row["measured"]["tokens_per_s_per_gpu"], 1),
                    "measured_step_time_s": row["measured"]["step_time_s"],
                    "measured_tflops_per_gpu": row["measured"]["tflops_per_gpu"],
                    "as_held_out": predict(held_out, prof),
                    "with_recipe": predict(record(row, dev, with_recipe=True), prof),
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
        OUT.write_text(json.dumps(result, indent=1) + "\n")
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
