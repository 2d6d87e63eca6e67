"""hardware/evidence.py: a GPU whose matmul ceiling nobody measured widens the plan's band, by the spread of
the ceilings measured on its siblings, and the plan says so."""

from dataclasses import replace

import pytest

from trainplan.estimate import estimate
from trainplan.hardware import Cluster, find_gpu, find_node, gpus
from trainplan.hardware.evidence import ceiling_widening
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.models import resolve


def test_a_measured_ceiling_widens_nothing():
    for g in gpus().values():
        if "matmul_ceiling" not in g.estimated:
            assert ceiling_widening(g).error == 0 and ceiling_widening(g).lines == (), g.name


def test_gb300_widens_by_the_spread_of_the_measured_blackwell_ceilings():
    # stas00/ml-engineering MAMF table (HARDWARE_FACTS.md 1.2): BF16 of dense peak B200 77.6%, GB200 72.9%,
    # B300 78.6%; FP8 76.3%, 72.3%, 74.5%: the widest spread is bf16's, 0.786 / 0.729 - 1 = 7.8%
    w = ceiling_widening(find_gpu("gb300"))
    assert w.error == pytest.approx(0.786 / 0.729 - 1)
    assert len(w.lines) == 1 and "gb300-288gb: matmul ceiling is an estimate" in w.lines[0] and "7.8%" in w.lines[0]


def test_the_widening_follows_the_flag_and_the_catalog():
    # a GB300 whose ceiling was measured widens nothing; the pool is the catalog's measured GPUs of the arch,
    # so any Blackwell GPU marked estimated gets the same spread
    gb300 = find_gpu("gb300")
    assert ceiling_widening(replace(gb300, estimated=("memory_gib",))).error == 0
    b200 = replace(find_gpu("b200"), estimated=("matmul_ceiling",))
    assert ceiling_widening(b200).error == pytest.approx(ceiling_widening(gb300).error)


def test_an_architecture_without_two_measured_gpus_uses_every_measured_gpu():
    # L40S (ada): no measured sibling; A100 86.9% and GB200 72.9% bf16 are the extremes of all measured GPUs
    w = ceiling_widening(find_gpu("l40s"))
    assert w.error == pytest.approx(0.869 / 0.729 - 1) and "all GPUs" in w.lines[0]


def test_the_estimate_band_carries_the_widening_and_says_so():
    job = Job(resolve("llama-3.1-8b"), Cluster(find_node("ml.p6e-gb300.36xlarge"), 2), Workload(8192, 8, 10**12))
    layout = Layout(dp_shard=8, ac="full")
    e = estimate(job, layout)
    node = job.cluster.node
    measured = replace(node, gpu=replace(node.gpu, estimated=()))
    m = estimate(replace(job, cluster=Cluster(measured, 2)), layout)
    assert e.tokens_per_s_per_gpu == m.tokens_per_s_per_gpu  # the point estimate does not move
    wide = ceiling_widening(node.gpu).error
    assert e.band[1] / e.tokens_per_s_per_gpu == pytest.approx(m.band[1] / m.tokens_per_s_per_gpu + wide)
    assert ceiling_widening(node.gpu).lines[0] in e.derived and not m.derived
    assert e.to_dict()["machine"]["derived"] == list(e.derived)
