"""Context-parallel exchange buffers in memory: what each cp_comm keeps alive in one layer's attention
(costs/context_parallel.py, read from TransformerEngine's context_parallel.py)."""

import pytest

from trainplan.costs.context_parallel import kv_qo_bytes
from trainplan.costs.memory import memory_breakdown
from trainplan.hardware import cluster
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.models import resolve

M = resolve("llama-3.1-8b")  # 32 heads, 8 kv heads: K/V are a quarter of Q/O
J = Job(M, cluster("ml.p5.48xlarge", 1), Workload(131072, 1))


def buffers(kind, cp=8):
    L = Layout(cp=cp, dp_shard=8 // cp, ac="full").with_stack("trainplan", cp_comm=kind)
    return memory_breakdown(J, L).cp_buffers


def test_each_exchange_keeps_its_own_buffers():
    kv, qo = kv_qo_bytes(M, 131072 / 8, 1)
    assert qo == pytest.approx(4 * kv)
    assert buffers("p2p") == pytest.approx(4 * kv)  # K/V receive blocks + dK/dV double buffers
    assert buffers("a2a") == pytest.approx(kv + qo)  # one exchanged copy of q, k, v, out
    assert buffers("allgather") == pytest.approx(2 * 8 * kv)  # gathered K/V and dK/dV
    assert buffers("allgather") > buffers("a2a") > buffers("p2p")


def test_no_context_parallelism_no_buffers():
    assert memory_breakdown(J.__class__(M, cluster("ml.p5.48xlarge", 1), Workload(8192, 8)),
                            Layout(dp_shard=8)).cp_buffers == 0.0


def test_buffers_count_in_the_allocated_total():
    a = memory_breakdown(J, Layout(cp=8, dp_shard=1, ac="full").with_stack("trainplan", cp_comm="p2p"))
    b = memory_breakdown(J, Layout(cp=8, dp_shard=1, ac="full").with_stack("trainplan", cp_comm="allgather"))
    assert b.total_allocated - a.total_allocated == pytest.approx(b.cp_buffers - a.cp_buffers)
