"""The validation loader maps a record's train.etp into the layout; null is the record's stack's
default (stacks.toml expert_tp), and a source that states it fills a null (data/annotations.json)."""

import copy
import json

import pytest

from trainplan.layout import expert_groups
from trainplan.validation.dataset import ANNOTATED_TRAIN, ANNOTATIONS, DEV_DATASET, to_case


@pytest.fixture(scope="module")
def m216():
    # the table's row as printed (TP 2, EP 8, EDP 32, ETP 1 on 256 GPUs), before data/annotations.json
    # corrects its TP to the launch command's 1: a tp > 1 MoE record to map etp on
    r = next(r for r in json.loads(DEV_DATASET.read_text())["records"] if r["id"] == "M216")
    r = {k: v for k, v in r.items() if k != "corrected_fields"}
    return {**r, "train": {**r["train"], "tp": 2, "dp": 128, "fsdp_shard_degree": 128}}


def _with(record, **train):
    r = copy.deepcopy(record)
    r["train"].update(train)
    return to_case(r)


def test_the_source_states_etp_one_for_the_qwen3_row(m216):
    # Megatron-MoE-ModelZoo's table: TP 2, EP 8, EDP 32, ETP 1 on 256 GPUs (2 * 128 / (8 * 1) = 32)
    c = to_case(m216)
    assert c.skipped_reason is None and c.layout.etp == 1
    assert expert_groups(c.layout).edp_shard == 32


def test_a_null_etp_is_the_stacks_default(m216):
    assert expert_groups(_with(m216, etp=None).layout).etp == 2  # Megatron: = tp
    # torchtitan: 1 with ep, on the sequence-split tokens torchtitan's tp always runs (its record
    # default), even where the record leaves sequence parallel unstated
    tt = _with(m216, etp=None, framework="torchtitan", sequence_parallel=None)
    assert tt.skipped_reason is None and expert_groups(tt.layout).etp == 1 and tt.layout.sequence_parallel


@pytest.mark.parametrize("etp, message", [(3, "etp=3 with tp=2"), (0, "train.etp must be a positive integer"),
                                          ("2", "train.etp must be a positive integer")])
def test_an_etp_trainplan_cannot_model_skips_the_record_with_the_reason(m216, etp, message):
    assert message in _with(m216, etp=etp).skipped_reason


def test_annotations_fill_only_the_train_fields_a_source_can_state():
    for a in json.loads(ANNOTATIONS.read_text())["annotations"]:
        assert set(a.get("train", {})) <= set(ANNOTATED_TRAIN)
