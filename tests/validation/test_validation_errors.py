"""Error statistics (validation/errors.py)."""

import pytest

from trainplan.validation.errors import percentile, rel_error, stats, summarize


def test_relative_error_and_missing_values():
    assert rel_error(110, 100) == pytest.approx(0.10)
    assert rel_error(None, 100) is None and rel_error(1, None) is None and rel_error(1, 0) is None


def test_stats_match_numpy_definitions():
    s = stats([0.1, -0.2, 0.3, -0.4, 0.5])
    assert s["count"] == 5
    assert s["median_abs"] == pytest.approx(0.3)
    assert s["p90_abs"] == pytest.approx(percentile([0.1, 0.2, 0.3, 0.4, 0.5], 0.9)) == pytest.approx(0.46)
    assert s["max_abs"] == 0.5 and s["mean_signed"] == pytest.approx(0.06)
    assert stats([]) == {"count": 0}


def test_summary_groups():
    rows = [{"quality": "full", "gpu": "a", "precision": "bf16", "framework": "x",
             "error": {"tokens_per_s_per_gpu": 0.1, "mfu": None, "step_time_s": None, "peak_mem_gib": None}},
            {"quality": "layout", "gpu": "a", "precision": "bf16", "framework": "x",
             "error": {"tokens_per_s_per_gpu": -0.3, "mfu": None, "step_time_s": None, "peak_mem_gib": None}}]
    s = summarize(rows)
    assert s["tokens_per_s_per_gpu"]["all"]["count"] == 2
    assert s["tokens_per_s_per_gpu"]["by_quality"]["full"]["median_abs"] == pytest.approx(0.1)
    assert s["mfu"]["all"] == {"count": 0}
