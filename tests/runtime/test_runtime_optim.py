"""Warmup + cosine schedule."""

import pytest

from trainplan.runtime.optim import lr_factor


def test_linear_warmup_then_cosine_to_min_ratio():
    assert lr_factor(0, warmup=4, total=20, min_ratio=0.1) == pytest.approx(0.25)
    assert lr_factor(3, 4, 20, 0.1) == pytest.approx(1.0)
    assert lr_factor(4, 4, 20, 0.1) == pytest.approx(1.0)
    assert lr_factor(12, 4, 20, 0.1) == pytest.approx(0.55)  # half way: (1 + 0.1) / 2
    assert lr_factor(20, 4, 20, 0.1) == pytest.approx(0.1)
    assert lr_factor(50, 4, 20, 0.1) == pytest.approx(0.1)
    vals = [lr_factor(s, 4, 20, 0.1) for s in range(4, 21)]
    assert vals == sorted(vals, reverse=True)
