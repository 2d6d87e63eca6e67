"""Published runs kept out of every fit (data/published_holdout.json): MoE pre-training rows of the dev
set's own sources that the dev set does not hold. Each becomes a `trainplan-validation/1` record in
one of two ways:

  table   only what the published table states; every other field and every execution setting is
          its stack preset's, with the loader's defaults (validation/dataset.py), exactly as a record
          nobody annotated would be predicted;
  recipe  plus what the run's recipe states that trainplan represents (train.execution keys and the
          layout fields the table leaves out).

calibration/build.py reports the error of the `table` records in a profile's cv_error (`holdout`),
and adds them to the out-of-sample pool a plan's band is drawn from (band.py); bench/moe_out_of_sample.py
prints both. The rows are never fitted on: their error is out of sample by construction.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from trainplan.errors import TrainplanError
from trainplan.validation.dataset import DEV_DATASET

HOLDOUT_DATASET = Path(__file__).parent / "data" / "published_holdout.json"
SCHEMA = "trainplan-holdout/1"
# A row equal to a dev record of its source on these fields (and model, system) is no holdout.
_TWIN_KEYS = ("tp", "pp", "vp", "ep", "micro_batch", "global_batch", "precision")


def load_rows(path: Path = HOLDOUT_DATASET) -> tuple[int, list[dict]]:
    """(sequence length, rows) of a holdout file."""
    data = json.loads(Path(path).read_text())
    if data.get("schema") != SCHEMA or not isinstance(data.get("rows"), list):
        raise TrainplanError(f"{path}: not a {SCHEMA} file (expected an object with schema {SCHEMA!r} and a rows list)")
    return data["seq_len"], data["rows"]


def dev_records(path: Path = DEV_DATASET) -> dict[str, dict]:
    return {r["id"]: r for r in json.loads(Path(path).read_text())["records"]}


def record(row: dict, dev: dict[str, dict], seq_len: int, with_recipe: bool) -> dict:
    """The row as a trainplan-validation/1 record: the table's fields, plus the recipe's if asked;
    model and system blocks are those of the dev records the row names."""
    t = row["table"]
    train = {"seq_len": seq_len, "micro_batch": t["micro_batch"], "global_batch": t["global_batch"],
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


def dev_twins(rec: dict, dev: dict[str, dict]) -> list[str]:
    """Dev records of the same source, model and system with the same layout and batch."""
    def key(r):
        return (r["source_key"], r["model"]["name"], r["hardware"]["gpu"], r["hardware"]["num_gpus"],
                *(r["train"].get(k) for k in _TWIN_KEYS))
    return [i for i, r in dev.items() if key(r) == key(rec)]


def table_records(path: Path = HOLDOUT_DATASET) -> list[dict]:
    """Every row as a table-only record; a row that duplicates a dev record is an error in the data."""
    seq, rows = load_rows(path)
    dev = dev_records()
    out = []
    for row in rows:
        rec = record(row, dev, seq, with_recipe=False)
        twins = dev_twins(rec, dev)
        if twins:
            raise TrainplanError(f"{row['id']} duplicates dev record(s) {', '.join(twins)}: not a holdout")
        out.append(rec)
    return out


def holdout_cases(path: Path = HOLDOUT_DATASET) -> list:
    """The table-only records as validation cases (validate's out-of-sample pool, calibration/build.py)."""
    from trainplan.validation.dataset import to_case

    return [to_case(r) for r in table_records(path)]
