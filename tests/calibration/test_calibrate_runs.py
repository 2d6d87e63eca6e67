"""calibrate() on runs: the residuals a machine's runs show are recovered, and the reported error
is leave-one-run-out (a run is predicted by the fit made without it)."""

from dataclasses import replace

import pytest

from trainplan.calibration.fitting import predicted_tps
from trainplan.calibration.runs import RUN_PARAMS, RunCase, calibrate
from trainplan.hardware import Cluster, find_node
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.machine.profile import machine_from_dict
from trainplan.models import resolve
from trainplan.profile import Profile

MACHINE = machine_from_dict({
    "schema": "trainplan-machine/1", "name": "synthetic", "gpu": "h200-sxm-141gb",
    "provenance": {"kind": "published", "source": "test"},
    "tables": [{"kind": "gemm", "dtype": "bf16", "axes": ["m"], "source": "a synthetic test grid",
                "points": [[1024, 300.0], [16384, 700.0]]}]}, "t")


def runs(truth: Profile) -> list[RunCase]:
    node = find_node("ml.p5e.48xlarge")
    out = []
    for i, (mb, ac, seq) in enumerate([(1, "none", 4096), (2, "full", 2048), (1, "selective", 8192)]):
        job = Job(resolve("llama-3.2-1b"), Cluster(node, 1), Workload(seq, 8 * mb))
        lay = Layout(micro_batch=mb, ac=ac, dp_shard=8, precision="bf16")
        c = RunCase(f"run{i}", job, lay, {})
        out.append(replace(c, measured={"tokens_per_s_per_gpu": predicted_tps(c, truth)}))
    return out


def test_a_residual_inside_its_bounds_is_recovered_and_cross_validated():
    start = Profile(machines=(MACHINE,))
    truth = replace(start, machine_compute=0.88)
    prof = calibrate(runs(truth), start)
    assert prof.machine_compute == pytest.approx(0.88, rel=0.03)
    cv = prof.cv_error["tokens_per_s_per_gpu"]
    assert cv["before"]["median_abs"] > 0.05  # the start profile is off by the residual
    assert cv["all"]["median_abs"] < cv["before"]["median_abs"] / 3
    assert set(prof.folds) == {"run0", "run1", "run2"} and set(prof.folds["run0"]) == set(RUN_PARAMS)
    assert prof.cv_error["method"] == "leave one run out"


def test_one_run_is_fitted_but_not_cross_validated():
    start = Profile(machines=(MACHINE,))
    prof = calibrate(runs(replace(start, machine_compute=0.9))[:1], start)
    assert prof.folds == {} and prof.cv_error["tokens_per_s_per_gpu"]["all"]["median_abs"] is None
