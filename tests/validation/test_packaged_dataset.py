"""The packaged dev dataset: the shared file plus annotated execution settings, each with its source;
records carry train.execution and a key they leave out comes from their framework's stack preset."""

import copy
import json
from pathlib import Path

import pytest

from trainplan.stacks import SETTINGS, stack
from trainplan.validation.dataset import ANNOTATIONS, DEV_DATASET, annotate, to_case

# The original beside the checkout (tests/conftest.py makes its absence an error in CI). Not imported
# from conftest: with several conftest.py files, `import conftest` resolves to whichever loaded first.
SHARED_DEV_DATASET = Path(__file__).resolve().parents[3] / "shared" / "validation" / "published_dev.json"


@pytest.fixture(scope="module")
def packaged():
    return json.loads(DEV_DATASET.read_text())


@pytest.fixture(scope="module")
def annotations():
    return json.loads(ANNOTATIONS.read_text())


@pytest.mark.skipif(not SHARED_DEV_DATASET.is_file(), reason="no ../shared beside the checkout")
def test_packaged_copy_is_the_shared_file_plus_the_annotations(packaged, annotations):
    shared = json.loads(SHARED_DEV_DATASET.read_text())
    assert annotate(shared, annotations) == packaged


def test_every_annotation_names_its_source_and_valid_settings(packaged, annotations):
    ids = {r["id"] for r in packaged["records"]}
    for a in annotations["annotations"]:
        assert a["id"] in ids and len(a["note"]) > 30
        assert set(a["execution"]) <= set(SETTINGS)
        assert next(r for r in packaged["records"] if r["id"] == a["id"])["train"]["execution"] == a["execution"]


@pytest.fixture(scope="module")
def records(packaged):
    return {r["id"]: r for r in packaged["records"]}


def test_a_record_runs_on_its_frameworks_preset_with_its_own_settings(records):
    c = to_case(records["M073"])  # torchtitan, async TP row
    assert c.layout.stack == "torchtitan"
    assert c.layout.execution == stack("torchtitan").execution.with_(tp_comm_overlap=True, power_limit_w=500.0)
    plain = to_case(records["M072"])  # the vanilla-TP row of the same table: the preset
    assert plain.layout.execution.tp_comm_overlap is False


def test_framework_aliases_and_unknown_frameworks(records):
    assert to_case(records["M112"]).layout.stack == "fms"  # fms_fsdp
    c = to_case(records["M212"])  # framework 'other'
    assert c.layout.stack == "trainplan"
    assert any("'other' has no stack preset" in a for a in c.assumptions)


def test_a_bad_execution_setting_in_a_record_skips_it_with_the_reason(records):
    r = copy.deepcopy(records["M072"])
    r["train"]["execution"] = {"tp_comm_overlap": "sometimes"}
    c = to_case(r)
    assert c.layout is None and "tp_comm_overlap must be true or false" in c.skipped_reason
    r["train"]["execution"] = {"overlap_everything": True}
    assert "unknown key 'overlap_everything'" in to_case(r).skipped_reason


def test_every_dev_layout_round_trips_through_its_one_line_form(packaged):
    # stacks and annotated settings (async TP, DeepEP, power caps) survive Layout.short() -> parse_layout
    from trainplan.layout import parse_layout

    cases = [to_case(r) for r in packaged["records"]]
    layouts = [c.layout for c in cases if c.layout is not None]
    assert {L.stack for L in layouts} >= {"megatron", "nemo", "megatron_bridge", "torchtitan", "composer", "fms"}
    for L in layouts:
        assert parse_layout(L.short()) == L, L.short()


def test_a_correction_replaces_a_stated_field_only_while_the_record_still_states_it(annotations):
    data = {"schema": "x", "records": [{"id": "R1", "train": {"ep": 8, "dp": 64}}]}
    fix = {"annotations": [{"id": "R1", "execution": {}, "note": "n",
                            "corrections": [{"field": "ep", "stated": 8, "value": 64, "source": "recipe.py @v1"}]}]}
    (r,) = annotate(data, fix)["records"]
    assert r["train"] == {"ep": 64, "dp": 64, "execution": {}}
    assert r["corrected_fields"] == ["train.ep = 64, not the stated 8: recipe.py @v1"]
    data["records"][0]["train"]["ep"] = 16  # the record changed: the correction no longer applies
    with pytest.raises(AssertionError):
        annotate(data, fix)


def test_corrected_records_say_so_in_their_assumptions(packaged, annotations):
    corrected = [a for a in annotations["annotations"] if a.get("corrections")]
    assert corrected  # M189: the 25.11 table's EP 8 against its recipe's EP 64; M216: TP 2 against its command's 1
    as_layout = {"fsdp_shard_degree": "dp_shard"}  # record field -> Layout field, where the names differ
    for a in corrected:
        c = to_case(next(r for r in packaged["records"] if r["id"] == a["id"]))
        for fix in a["corrections"]:
            assert getattr(c.layout, as_layout.get(fix["field"], fix["field"])) == fix["value"]
            assert any(s.startswith(f"train.{fix['field']} = {fix['value']}, not the stated") for s in c.assumptions)
