"""Uniform models keep their exact numbers with the per-layer description (issue 24, Done when):
the estimates of the 19 catalog models on fixed layouts equal, to the last bit, those the cost model
gave before models/layers.py described each layer (tests/models/uniform_golden.py wrote
tests/models/data/uniform_estimates.json from the code before the merge, main @ 395cf1d).

Models whose layers differ (DeepSeek-V3's dense first layers, Gemma 2's and gpt-oss's local and
global layers) keep their single-stage numbers; with pipeline stages each stage now costs the sum
of its own layers instead of its share of the model's (tests/costs/test_stage_layers.py)."""

import json
from pathlib import Path

import pytest
from uniform_golden import MODELS, rows

from trainplan.models import resolve
from trainplan.models.layers import kind_counts

GOLDEN = json.loads((Path(__file__).parent / "data" / "uniform_estimates.json").read_text())
_now = {}


def _rows():
    if not _now:
        _now.update(json.loads(json.dumps(rows())))
    return _now


def test_the_golden_covers_every_model_it_names():
    assert sorted(GOLDEN) == sorted(MODELS)


@pytest.mark.parametrize("name", MODELS)
def test_estimates_are_unchanged(name):
    now, then = _rows()[name], GOLDEN[name]
    if len(kind_counts(resolve(name))) == 1:
        assert now == then
    else:  # one pipeline stage: the whole model, as before
        assert (now["params"], now["1n"]) == (then["params"], then["1n"])


def test_the_models_whose_layers_differ_are_the_known_four():
    assert {n for n in MODELS if len(kind_counts(resolve(n))) > 1} == {
        "deepseek-v3", "gemma-2-9b", "gemma-2-27b", "gpt-oss-120b"}
