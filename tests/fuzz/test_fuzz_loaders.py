"""The other loaders under fuzzing: HF config.json, TRAINPLAN_PRICES, layout dicts and the
validation dataset. Each returns a checked value or raises a one-line TrainplanError; what they
accept is usable (positive parameter counts, finite prices)."""

import json
import math
from pathlib import Path

import pytest
from fuzz_helpers import (
    EXTREME,
    EXTREME_TEXT,
    check_answer,
    fuzz_settings,
    json_leaf,
    json_value,
    mutate,
    run_cli,
)
from hypothesis import event, given
from hypothesis import strategies as st

from trainplan.errors import TrainplanError
from trainplan.estimate import estimate
from trainplan.hardware import cluster, nodes
from trainplan.hardware.catalog import _apply_price_overrides
from trainplan.job import Job, Workload
from trainplan.layout import Layout, check_layout, layout_from_dict
from trainplan.models import count_params, hf_config, names, resolve, spec_from_config

# frozen as JSON text: mutate() draws from the shape of its base, which nothing may change mid-run
# (a FlakyStrategyDefinition in CI once: the same draws met a base with two more paths)
_CATALOG_TEXT = {n: json.dumps(hf_config(n)) for n in names()}
DEV_DATASET = Path(__file__).resolve().parents[3] / "shared" / "validation" / "published_dev.json"


def _one_line(e: TrainplanError) -> None:
    assert "\n" not in str(e) and str(e)


@fuzz_settings(200)
@given(data=st.data(), name=st.sampled_from(sorted(_CATALOG_TEXT)))
def test_mutated_hf_config(data, name):
    cfg = mutate(data, json.loads(_CATALOG_TEXT[name]))
    try:
        spec = spec_from_config(cfg, name=name, where="config.json")
    except TrainplanError as e:
        _one_line(e)
        return
    p = count_params(spec)  # an accepted architecture has a size ...
    assert p.total > 0 and p.active > 0 and p.total >= p.active
    # ... and an estimate in finite, positive numbers (a negative hidden size once gave negative tokens/s)
    job = Job(spec, cluster("ml.p5.48xlarge", 1), Workload(seq_len=min(2048, spec.max_position_embeddings or 2048),
                                                            global_batch=8))
    layout = Layout(dp_shard=8, ac="full")
    try:
        check_layout(job, layout)
    except TrainplanError:
        return
    e = estimate(job, layout)
    event("estimated")
    json.dumps(e.to_dict(), allow_nan=False)
    assert e.tokens_per_s > 0 and e.memory.total > 0


PRICE_SPECS = st.one_of(
    st.text(max_size=30),
    st.lists(st.tuples(st.sampled_from(["p5", "ml.p5.48xlarge", "p6-b200", "x", ""]),
                       st.sampled_from(EXTREME_TEXT)), max_size=3)
    .map(lambda kv: ",".join(f"{k}={v}" for k, v in kv)),
    st.dictionaries(st.sampled_from(["ml.p5.48xlarge", "p4d", "nope"]), json_leaf, max_size=2).map(json.dumps),
    st.sampled_from(["abc", "/tmp", "/tmp/", "prices.json", "{", "{}", "[1]", '{"p5": NaN}', "p5=1e400", "=", ",,"]),
)


@fuzz_settings(150)
@given(spec=PRICE_SPECS)
def test_trainplan_prices(spec):
    try:
        table = _apply_price_overrides(nodes(), spec)
    except TrainplanError as e:
        _one_line(e)
        return
    for node in table.values():
        assert node.price_per_hour is None or (math.isfinite(node.price_per_hour) and node.price_per_hour > 0)


LAYOUT_KEYS = ["precision", "ac", "ac_layers", "micro_batch", "grad_accum", "dp_replicate", "dp_shard", "sharding",
               "tp", "pp", "pp_schedule", "vp", "cp", "ep", "sequence_parallel", "fp8_allgather", "stack",
               "execution", "chunked_loss", "bogus"]
LAYOUT_VALUES = st.one_of(st.sampled_from(EXTREME), st.integers(0, 16), st.sampled_from(
    ["bf16", "fp8_tensorwise", "mxfp8", "full", "selective", "partial", "fsdp", "zero1", "none", "1f1b",
     "interleaved", "trainplan", "megatron"]), st.dictionaries(st.sampled_from(["tp_comm_overlap", "x"]), json_leaf,
                                                              max_size=2))
MOE_JOB = Job(resolve("mixtral-8x7b"), cluster("ml.p5.48xlarge", 2), Workload(seq_len=4096, global_batch=64))


@fuzz_settings(150)
@given(d=st.dictionaries(st.sampled_from(LAYOUT_KEYS), LAYOUT_VALUES, max_size=6))
def test_layout_dicts(d):
    try:
        check_layout(MOE_JOB, layout_from_dict(d, "layout"))
    except TrainplanError as e:
        _one_line(e)


@pytest.fixture(scope="module")
def dev_records():
    if not DEV_DATASET.is_file():
        pytest.skip(f"{DEV_DATASET} is absent (CI fails on its absence in tests/conftest.py)")
    data = json.loads(DEV_DATASET.read_text())
    return data["schema"], data["records"][:12]


@fuzz_settings(120)
@given(data=st.data())
def test_mutated_validation_records(dev_records, tmp_path_factory, data):
    from trainplan.validation.dataset import load_dataset

    schema, records = dev_records
    record = mutate(data, data.draw(st.sampled_from(records), label="record"))
    f = tmp_path_factory.getbasetemp() / "dataset.json"
    f.write_text(json.dumps({"schema": schema, "records": [record]}))
    try:
        _, cases = load_dataset(f)
    except TrainplanError as e:
        _one_line(e)
        return
    (case,) = cases
    assert (case.job is None) == (case.skipped_reason is not None)
    if case.skipped_reason:
        assert "\n" not in case.skipped_reason


@fuzz_settings(60)
@given(data=st.data())
def test_validate_a_mutated_record(dev_records, tmp_path_factory, data):
    schema, records = dev_records
    record = mutate(data, data.draw(st.sampled_from(records), label="record"))
    f = tmp_path_factory.getbasetemp() / "validate.json"
    f.write_text(json.dumps({"schema": schema, "records": [record]}))
    argv = ["validate", "--dataset", str(f), "--json"]
    check_answer(argv, *run_cli(argv))


@fuzz_settings(60)
@given(d=st.dictionaries(st.sampled_from(["records", "instances", "rows", "results", "layout", "model", "plan",
                                          "schema", "summary", "chosen"]), json_value, max_size=4),
       as_json=st.booleans())
def test_report_of_any_json(tmp_path_factory, d, as_json):
    f = tmp_path_factory.getbasetemp() / "report-input.json"
    f.write_text(json.dumps(d))
    argv = ["report", str(f), *(["--json"] if as_json else [])]
    check_answer(argv, *run_cli(argv))
