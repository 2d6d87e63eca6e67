"""Uniform models keep their exact numbers with the per-layer description (issue 24, Done when):
the estimates of the 19 catalog models on fixed layouts equal, to the last bit, those the cost model
gave before models/layers.py described each layer (tests/models/uniform_golden.py wrote
tests/models/data/uniform_estimates.json from the code at 59c0424)."""

import json
from pathlib import Path

import pytest

from uniform_golden import MODELS, rows

GOLDEN = json.loads((Path(__file__).parent / "data" / "uniform_estimates.json").read_text())


def test_the_golden_covers_every_model_it_names():
    assert sorted(GOLDEN) == sorted(MODELS)


@pytest.mark.parametrize("name", MODELS)
def test_estimates_are_unchanged(name):
    assert rows_for(name) == GOLDEN[name]


def rows_for(name):
    return _all()[name]


_cache = {}


def _all():
    if not _cache:
        _cache.update(json.loads(json.dumps(rows())))
    return _cache
