"""The published runs kept out of every fit (validation/data/published_holdout.json,
validation/holdout.py): each quotes its source, none duplicates a dev record, each becomes a record
the loader reads, and the packaged profile reports their error (cv_error.holdout)."""

import copy
import json

import pytest

from trainplan.errors import TrainplanError
from trainplan.validation.dataset import to_case
from trainplan.validation.holdout import (
    HOLDOUT_DATASET,
    dev_records,
    dev_twins,
    load_rows,
    record,
    table_records,
)


def test_every_row_quotes_its_source_and_is_not_a_dev_record():
    seq, rows = load_rows()
    dev = dev_records()
    assert seq == 4096 and len(rows) == len({r["id"] for r in rows}) >= 10
    for row in rows:
        assert row["source_key"] in {r["source_key"] for r in dev.values()}  # a dev source: a fold leaves it out
        assert "line" in row["source"] and "|" in row["source"]  # the table row, verbatim
        assert not dev_twins(record(row, dev, seq, with_recipe=False), dev), row["id"]


def test_table_records_are_the_tables_fields_only_and_load():
    recs = table_records()
    assert all("execution" not in r["train"] for r in recs)  # the stack preset decides, as for a new record
    cases = [to_case(r) for r in recs]
    skipped = [c for c in cases if c.skipped_reason]
    # Qwen3-235B H100's EP 32 needs etp = 1, which its table does not state (its recipe does)
    assert [c.id for c in skipped] == ["mb260401/qwen3-235b-a22b/h100"]
    assert "must divide" in skipped[0].skipped_reason


def test_a_row_equal_to_a_dev_record_is_refused(tmp_path):
    seq, rows = load_rows()
    dev = dev_records()
    twin = copy.deepcopy(rows[0])
    m207 = dev["M207"]
    twin.update(source_key=m207["source_key"], model_from="M207", system_from="M207")
    t = m207["train"]
    twin["table"].update(num_gpus=m207["hardware"]["num_gpus"], precision=t["precision"], tp=t["tp"], pp=t["pp"],
                         vp=t["vp"], ep=t["ep"], micro_batch=t["micro_batch"], global_batch=t["global_batch"])
    path = tmp_path / "h.json"
    path.write_text(json.dumps({"schema": "trainplan-holdout/1", "seq_len": seq, "rows": [twin]}))
    with pytest.raises(TrainplanError, match="duplicates dev record"):
        table_records(path)
    path.write_text("{}")
    with pytest.raises(TrainplanError, match="not a trainplan-holdout/1 file"):
        table_records(path)


def test_the_packaged_profile_reports_the_holdout_error():
    from trainplan.profile import default_profile

    h = default_profile().cv_error["holdout"]
    assert h["dataset"].endswith(HOLDOUT_DATASET.name)
    assert h["records"] == len(load_rows()[1]) and h["skipped"] == 1
    assert h["tokens_per_s_per_gpu"]["model=moe"]["count"] == h["records"] - h["skipped"]
