"""trainplan-machine/1: the loader's one-line errors, log-space interpolation with its outside-grid
flag, and the packaged profiles (every table cites its source)."""

import copy
import json
import math

import pytest

from trainplan.errors import TrainplanError
from trainplan.machine.interp import Grid
from trainplan.machine.profile import machine_from_dict, packaged

GOOD = {
    "schema": "trainplan-machine/1", "name": "t", "gpu": "h100-sxm-80gb",
    "provenance": {"kind": "published", "source": "a paper"},
    "tables": [
        {"kind": "gemm", "dtype": "bf16", "axes": ["m", "n", "k"], "source": "table 1",
         "points": [[1024, 1024, 1024, 400.0], [4096, 4096, 4096, 700.0]]},
        {"kind": "collective", "op": "all_reduce", "tier": "efa", "axes": ["bytes", "ranks"], "source": "fig 2",
         "instances": ["ml.p5.48xlarge"], "points": [[1e6, 16, 10.0], [1e9, 16, 300.0]]},
    ],
}


def _bad(**change):
    d = copy.deepcopy(GOOD)
    for path, value in change.items():
        target = d
        *head, last = path.split(".")
        for key in head:
            target = target[int(key)] if key.isdigit() else target[key]
        if value is None:
            del target[last]
        else:
            target[last] = value
    return d


def test_a_good_profile_loads_and_finds_its_tables():
    m = machine_from_dict(GOOD, "x")
    assert m.find("gemm", dtype="bf16").lookup(m=1024, n=1024, k=1024).value == 400.0
    assert m.find("gemm", dtype="fp8") is None  # no table: the model falls back
    # a network table holds only for the instance it was measured on
    assert m.find("collective", instance="ml.p5.48xlarge", op="all_reduce", tier="efa") is not None
    assert m.find("collective", instance="ml.p5en.48xlarge", op="all_reduce", tier="efa") is None


@pytest.mark.parametrize("change,msg", [
    ({"extra": 1}, "unknown key 'extra'"),
    ({"schema": "trainplan-machine/0"}, "unknown schema"),
    ({"tables.0.kind": "conv"}, "unknown kind 'conv'; known kinds: gemm"),
    ({"tables.0.dtype": "BF 16"}, "dtype 'BF 16' must be a lower-case dtype name"),
    ({"tables.0.pass": "fwd"}, "unknown key 'pass'"),
    ({"tables.1.tier": "infiniband"}, "tier 'infiniband' unknown; allowed: nvlink, efa, host"),
    ({"tables.0.axes": ["m", "q"]}, "axes ['m', 'q'] must be distinct names among m, n, k"),
    ({"tables.0.source": None}, "missing required key 'source'"),
    ({"tables.0.points": [[1, 2, 3]]}, "point 0 must be 4 positive numbers [m, n, k, tflops]"),
    ({"tables.0.points": [[1, 2, 3, -5]]}, "point 0 must be 4 positive numbers"),
    ({"tables.0.flavour": "x"}, "unknown key 'flavour'; allowed keys:"),
    ({"tables.1.instances": None}, "an efa collective table must name the instances"),
    ({"provenance.kind": "probe"}, "a probed profile names its machine, date and software"),
    ({"tables.0.kind": "gemm_ratio", "tables.0.over": "bf16"}, "dtype and over are both 'bf16'"),
    ({"tables.0.kind": "gemm_ratio", "tables.0.over": "BF16"}, "over 'BF16' must be a lower-case dtype name"),
    ({"tables.0.kind": "gemm_ratio"}, "missing required key 'over'"),
])
def test_bad_profiles_are_one_line_errors(change, msg):
    with pytest.raises(TrainplanError) as e:
        machine_from_dict(_bad(**change), "m.json")
    assert msg in str(e.value) and "\n" not in str(e.value)


def test_interpolation_is_geometric_between_points_and_exact_on_them():
    g = Grid(("bytes",), ((1.0,), (4.0,)), (10.0, 40.0))
    assert g.lookup({"bytes": 4}).value == 40.0
    # the midpoint in log space weighs both ends equally: the geometric mean
    assert g.lookup({"bytes": 2}).value == pytest.approx(math.sqrt(10 * 40))
    assert g.lookup({"bytes": 2}).outside == ()


def test_a_lookup_outside_the_grid_is_clamped_and_flagged():
    g = Grid(("m", "n"), ((256.0, 256.0), (4096.0, 4096.0)), (100.0, 700.0))
    lk = g.lookup({"m": 65536, "n": 4096})
    assert lk.value == 700.0
    assert lk.outside == ("m=65536 > 4096",)
    assert g.lookup({"m": 16, "n": 256}).outside == ("m=16 < 256",)


def test_leave_one_out_error_is_how_far_the_rule_reads_a_point_from_the_others():
    # two points: each is read as the other, |2/1 - 1| = 1 and |1/2 - 1| = 0.5; the p90 of two is the larger
    assert Grid(("m",), ((1.0,), (4.0,)), (1.0, 2.0)).loo_error == pytest.approx(1.0)
    assert Grid(("m",), ((1.0,), (4.0,), (16.0,)), (3.0, 3.0, 3.0)).loo_error == pytest.approx(0.0, abs=1e-12)  # flat
    assert Grid((), ((),), (3.0,)).loo_error == 0.0  # one point: nothing to leave out


def test_a_gemm_ratio_table_loads_with_its_two_dtypes():
    d = _bad(**{"tables.0.kind": "gemm_ratio", "tables.0.dtype": "fp8", "tables.0.over": "bf16"})
    t = machine_from_dict(d, "m.json").find("gemm_ratio", dtype="fp8", over="bf16")
    assert t is not None and t.lookup(m=1024, n=1024, k=1024).value == 400.0


def test_a_table_without_axes_is_one_rate_everywhere():
    g = Grid((), ((),), (606.0,))
    assert g.lookup({"bytes": 1e3}).value == g.lookup({"bytes": 1e12}).value == 606.0


def test_packaged_profiles_cite_a_source_per_table_and_name_catalog_gpus():
    from trainplan.hardware import gpus

    profs = packaged()
    assert {p.gpu for p in profs} >= {"b200-180gb", "h200-sxm-141gb"}
    for p in profs:
        assert p.gpu in gpus()
        assert p.provenance["kind"] == "published" and p.provenance["source"]
        for t in p.tables:
            assert len(t.source) > 20, (p.name, t.kind)


def test_the_b200_profile_holds_simumax_measured_gemms_at_their_stated_efficiency():
    # SimuMax configs/system/b200_bf16_ceperm.json: "b=1, m=4096, k=8192, n=10240, layout=TN" 0.6451614 of
    # 2250 TFLOP/s (the NN and NT entries of the same shape are other shapes: dgrad and wgrad)
    b200 = next(p for p in packaged() if p.gpu == "b200-180gb")
    v = b200.find("gemm", dtype="bf16").lookup(m=4096, n=10240, k=8192).value
    assert v == pytest.approx(0.6451614 * 2250, rel=1e-3)


def test_to_dict_round_trips():
    m = machine_from_dict(GOOD, "x")
    again = machine_from_dict(json.loads(json.dumps(m.to_dict())), "y")
    assert again.to_dict() == m.to_dict()


def test_two_packaged_profiles_for_one_gpu_are_refused(tmp_path, monkeypatch):
    from trainplan.machine import profile as mp

    for name in ("a", "b"):
        (tmp_path / f"{name}.json").write_text(json.dumps({**GOOD, "name": name}))
    monkeypatch.setattr(mp, "PACKAGED", tmp_path)
    mp.packaged.cache_clear()
    try:
        with pytest.raises(TrainplanError, match="'a' and 'b' are both for 'h100-sxm-80gb'"):
            mp.packaged()
    finally:
        monkeypatch.undo()
        mp.packaged.cache_clear()


def test_the_gb200_profile_holds_the_full_nvl72_all_reduce():
    # coreweave/nccl-tests PR #43 (2025-02-20): all_reduce_perf over 72 GB200 GPUs of one NVL72 rack,
    # out-of-place busbw 839.16 GB/s at 4 GiB; 72-rank groups of a GB200 plan read it, a group of another
    # GPU type never does
    gb200 = next(p for p in packaged() if p.gpu == "gb200-186gb")
    t = gb200.find("collective", op="all_reduce", tier="nvlink")
    assert t.lookup(bytes=4294967296, ranks=72).value == pytest.approx(839.16)
    assert not t.lookup(bytes=4294967296, ranks=72).outside
    assert t.lookup(bytes=2**36, ranks=72).outside  # beyond the largest size measured: its edge, reported
    assert gb200.find("collective", op="all_gather", tier="nvlink") is None  # not measured: the formula prices it


def test_the_gb300_profile_prices_a4x_max_only():
    # The A4X Max nccl-tests note (machine/profiles/gb300-288gb.json sources, 2026-07-12): all_reduce over multi-node
    # NVLink, 2 instances of one domain, 838.08 GB/s at 8 GiB; across domains over RoCE, 316.20 GB/s at 1 GiB.
    # Measured on Google's instances only: AWS p6e-gb300 and Azure ND GB300 v6 keep the formulas.
    gb300 = next(p for p in packaged() if p.gpu == "gb300-288gb")
    nv = gb300.find("collective", instance="a4x-maxgpu-4g-metal", op="all_reduce", tier="nvlink")
    assert nv.lookup(bytes=8 * 2**30, ranks=8).value == pytest.approx(838.08)
    net = gb300.find("collective", instance="a4x-maxgpu-4g-metal", op="all_reduce", tier="efa")
    assert net.lookup(bytes=2**30, ranks=8).value == pytest.approx(316.20)
    for other in ("ml.p6e-gb300.36xlarge", "Standard_ND128isr_GB300_v6", "gb300-nvl72"):
        assert gb300.find("collective", instance=other, op="all_reduce", tier="nvlink") is None, other
