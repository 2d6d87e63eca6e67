"""bench/closed_loop.py's core (closed_loop) on records built here: their measured tokens/s and step time
are the model's prediction under a "truth" profile whose GEMM efficiency is off from the start profile's,
so calibrating on k of them must bring the others closer, and what calibrate refuses (one run) must
leave them where they were. The records are validation Cases (validation/dataset.Case) as
`trainplan validate` reads them; calibration goes through calibration/runs.from_record."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import replace
from itertools import combinations
from pathlib import Path

import pytest

from trainplan.calibration.fitting import predicted_tps
from trainplan.calibration.runs import RunCase, from_record
from trainplan.errors import TrainplanError
from trainplan.hardware import Cluster, find_node
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.models import resolve
from trainplan.profile import Profile
from trainplan.validation.dataset import Case

BENCH = Path(__file__).resolve().parents[2] / "bench"
START = Profile()  # the priors: gemm_eff 0.9
TRUTH = replace(START, gemm_eff=0.72)  # the team's machine: GEMMs 20% slower than the start assumes
# (model, micro-batch, activation checkpointing, sequence): layouts whose shares of the step differ
SHAPES = [("llama-3.2-1b", 1, "none", 4096), ("llama-3.2-1b", 2, "full", 2048), ("llama-3.2-1b", 1, "selective", 8192),
          ("llama-3.1-8b", 1, "full", 8192), ("llama-3.1-8b", 2, "none", 2048), ("llama-3.1-8b", 1, "selective", 4096)]


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCH))  # closed_loop imports its sibling _stamp
    try:
        spec = importlib.util.spec_from_file_location("closed_loop", BENCH / "closed_loop.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH))
    return module


def record_case(i: int, shape, source: str = "synth", instance: str = "ml.p5e.48xlarge") -> Case:
    model, mb, ac, seq = shape
    job = Job(resolve(model), Cluster(find_node(instance), 1), Workload(seq, 8 * mb))
    layout = Layout(micro_batch=mb, ac=ac, dp_shard=8, precision="bf16")
    tps = predicted_tps(RunCase("x", job, layout, {}), TRUTH)
    measured = {"tokens_per_s_per_gpu": tps, "step_time_s": job.workload.tokens_per_step / (tps * 8)}
    return Case(f"S{i:02d}", {"source_key": source, "measured": measured}, job, layout, "trainplan", (), None)


@pytest.fixture(scope="module")
def result(bench):
    cases = [record_case(i, s) for i, s in enumerate(SHAPES)] + [record_case(9, SHAPES[0], source="alone")]
    return bench.closed_loop(cases, lambda source: START, ks=(1, 3), cap=6)


def test_calibrating_on_three_runs_brings_the_other_records_closer(result):
    tps = result["by_k"]["3"]["groups"]["synth/h200-sxm-141gb"]["table"]["tokens_per_s_per_gpu"]
    assert tps["before"]["median_abs"] > 0.1  # the start is off by the GEMM residual
    assert tps["after"]["median_abs"] < tps["before"]["median_abs"] / 3
    assert result["by_k"]["3"]["outcomes"].get("calibrated", 0) > 0
    step = result["by_k"]["3"]["pooled"]["step_time_s"]
    assert step["after"]["median_abs"] < step["before"]["median_abs"] / 3


def test_one_run_is_refused_and_leaves_the_predictions_as_they_were(result):
    k1 = result["by_k"]["1"]
    assert k1["outcomes"] == {"no coefficient has the evidence": len(SHAPES)}
    row = k1["pooled"]["tokens_per_s_per_gpu"]
    assert row["after"] == row["before"]


def test_a_group_with_k_or_fewer_records_is_skipped_and_named(result):
    assert "alone/h200-sxm-141gb" in result["by_k"]["1"]["skipped"]
    assert "alone/h200-sxm-141gb" not in result["by_k"]["1"]["groups"]
    assert result["same_groups"]["groups"] == ["synth/h200-sxm-141gb"]


def test_the_choices_of_k_runs_are_all_of_them_up_to_the_cap_then_seeded(bench):
    assert bench.choices(6, 3, cap=20) == list(combinations(range(6), 3))
    drawn = bench.choices(11, 5, cap=7, seed=1)
    assert len(set(drawn)) == 7 and drawn == bench.choices(11, 5, cap=7, seed=1) != bench.choices(11, 5, cap=7, seed=2)


def test_a_record_without_tokens_per_s_cannot_stand_for_a_run():
    c = record_case(0, SHAPES[0])
    assert from_record(c).measured["tokens_per_s_per_gpu"] == c.measured["tokens_per_s_per_gpu"]
    assert from_record(c).gpu == "h200-sxm-141gb" and from_record(c).source_key == "S00"
    with pytest.raises(TrainplanError, match="S00 has no measured tokens_per_s_per_gpu"):
        from_record(replace(c, record={"source_key": "synth", "measured": {"step_time_s": 1.0}}))
