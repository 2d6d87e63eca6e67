"""Collective times (costs/comm.py) against the nccl-tests bus-bandwidth definitions and measurements."""

import pytest

from trainplan.costs import comm
from trainplan.costs.comm import (
    EFF_NVLINK5_A2A,
    EFF_NVLINK_AG_RS,
    EFF_NVLINK_AR,
    collective_time,
    span,
)
from trainplan.hardware import find_node

B200 = find_node("ml.p6-b200.48xlarge")
P4D = find_node("ml.p4d.24xlarge")
NVL72 = find_node("gb200-nvl72")
S = 4 * 1024**3


# nccl-tests doc/PERFORMANCE.md: busbw = algbw x 2(n-1)/n for all-reduce and (n-1)/n for all-gather,
# reduce-scatter and all-to-all; at large sizes busbw approaches the per-GPU link bandwidth.
@pytest.mark.parametrize("op,factor,eff", [("all_reduce", 2 * 7 / 8, EFF_NVLINK_AR),
                                           ("all_gather", 7 / 8, EFF_NVLINK_AG_RS),
                                           ("reduce_scatter", 7 / 8, EFF_NVLINK_AG_RS),
                                           ("all_to_all", 7 / 8, EFF_NVLINK5_A2A)])
def test_large_messages_inside_a_node_run_at_busbw(op, factor, eff):
    t = collective_time(op, S, span(8, 1, B200), B200)
    busbw = S / t * factor
    assert busbw == pytest.approx(B200.gpu.nvlink_bandwidth * eff, rel=0.01)


def test_an_nvlink5_all_to_all_runs_at_its_measured_busbw_and_nvlink4_at_the_ring_efficiency():
    # 8x B200 all-to-all: 537.1 of 900 GB/s (SimuMax b200_bf16_ceperm.json all2all), the same
    # switches in a GB200 NVL72; NVLink 4 has no public all-to-all measurement (the ring's 0.80)
    assert EFF_NVLINK5_A2A * 900 == pytest.approx(537.1)
    for node, eff in ((NVL72, EFF_NVLINK5_A2A), (find_node("ml.p5.48xlarge"), EFF_NVLINK_AG_RS)):
        t = collective_time("all_to_all", S, span(8, 1, node), node)
        assert S / t * 7 / 8 == pytest.approx(node.gpu.nvlink_bandwidth * eff, rel=0.01), node.name


def test_hierarchical_all_reduce_matches_the_measured_4_node_p6_b200():
    # HARDWARE_FACTS.md 5.3 (MLE-net): 4x p6-b200 (32 GPUs) all-reduce of 4 GiB took 22.05 ms.
    t = collective_time("all_reduce", S, span(32, 1, B200), B200)
    assert t == pytest.approx(22.05e-3, rel=0.10)


def test_small_messages_pay_latency():
    one_node = collective_time("all_reduce", 8, span(8, 1, B200), B200)
    two_nodes = collective_time("all_reduce", 8, span(16, 1, B200), B200)
    assert 10e-6 < one_node < 60e-6  # NCCL base + per-step latencies
    assert two_nodes > one_node  # network steps cost more (2x p6-b200 measured ~50 us)


def test_a_group_with_one_gpu_per_node_uses_that_gpus_share_of_the_network():
    sp = span(4, 8, P4D)  # dp ranks 8 apart: one per node
    assert (sp.per_domain, sp.domains) == (1, 4)
    t = collective_time("all_gather", S, sp, P4D) - collective_time("all_gather", 0.0, sp, P4D)
    assert t == pytest.approx(S * 3 / 4 / (P4D.inter_node_bandwidth_per_gpu * comm.EFF_NET), rel=0.01)


def test_spans_follow_rank_order_and_nvlink_domains():
    assert span(8, 1, B200).tier == "nvlink"
    assert (span(4, 2, B200).per_domain, span(4, 2, B200).domains) == (4, 1)
    assert (span(8, 4, B200).per_domain, span(8, 4, B200).domains) == (2, 4)
    # a GB200 NVL72 keeps a 16-GPU group on NVLink across four 4-GPU trays
    assert span(16, 4, NVL72).tier == "nvlink"
    assert comm.tier_name(span(16, 1, B200), B200) == "efa"


def test_single_rank_and_empty_messages_cost_nothing():
    assert collective_time("all_reduce", S, span(1, 1, B200), B200) == 0.0
    assert collective_time("all_gather", 0, span(8, 1, B200), B200) == 0.0


# nccl-tests doc/PERFORMANCE.md (NVIDIA/nccl-tests): for alltoall, S is each rank's own send buffer,
# 1/n of it for each peer, and busbw = algbw x (n-1)/n. Across k nodes of g GPUs the (n-g)/n share
# for the other nodes leaves through this GPU's NIC share; nothing is combined on the way.
def test_cross_node_all_to_all_sends_its_own_off_node_share_over_the_network():
    sp = span(16, 1, B200)  # 2 nodes x 8
    assert comm.network_bytes("all_to_all", S, sp) == pytest.approx(S * 8 / 16)
    # an all-gather's network share is the same fraction of S divided over the g members; an
    # all-to-all's is not: g = 8 times as many bytes
    assert comm.network_bytes("all_to_all", S, sp) == pytest.approx(8 * comm.network_bytes("all_gather", S, sp))
    four = span(32, 1, B200)
    assert comm.network_bytes("all_to_all", S, four) == pytest.approx(S * 24 / 32)


def test_cross_node_all_to_all_busbw_by_the_nccl_tests_definition():
    # Network-bound: t = S (n-g)/n / (NIC share x eff), so algbw = S / t and busbw = algbw (n-1)/n
    # = NIC share x eff x (n-1)/(n-g): 2 nodes of 8 report 1.875 x the per-GPU network bandwidth,
    # the NVLink half of the traffic riding along.
    n, g = 16, 8
    t = collective_time("all_to_all", S, span(n, 1, B200), B200)
    busbw = S / t * (n - 1) / n
    assert busbw == pytest.approx(B200.inter_node_bandwidth_per_gpu * comm.EFF_NET * (n - 1) / (n - g), rel=0.01)
