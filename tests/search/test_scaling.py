"""The chosen layout's family at other node counts (search/scaling.py)."""

from trainplan.estimate import estimate
from trainplan.hardware import Cluster, find_node
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.models import resolve
from trainplan.search.scaling import family_at, scaling_series


def _job(nodes=4, gb=64, model="llama-3.1-8b"):
    return Job(resolve(model), Cluster(find_node("ml.p5.48xlarge"), nodes), Workload(4096, gb))


def test_more_nodes_more_replicas_less_accumulation_same_batch():
    j, lay = _job(), Layout(tp=2, dp_shard=16, grad_accum=4, micro_batch=1)
    j8, l8 = family_at(j, lay, 8)
    assert (l8.dp_shard, l8.grad_accum, l8.tp, j8.cluster.nodes) == (32, 2, 2, 8)
    assert l8.micro_batch * l8.grad_accum * l8.dp == j.workload.global_batch
    # HSDP keeps its shard group and scales the replicas
    _, h = family_at(j, Layout(dp_replicate=4, dp_shard=8, grad_accum=2), 2)
    assert (h.dp_replicate, h.dp_shard, h.grad_accum) == (2, 8, 4)
    # 128 nodes would need dp 1024 > batch 64: no such member
    assert family_at(j, lay, 128) is None


def test_interleaved_rounds_and_memory_leave_counts_out():
    j = _job(nodes=4, gb=32, model="llama-3.1-70b")
    lay = Layout(tp=8, pp=2, vp=2, pp_schedule="interleaved", dp_shard=2, grad_accum=16, ac="full")
    assert family_at(j, lay, 32)[1].grad_accum == 2  # dp 16: two micro-batches, one round of pp 2
    assert family_at(j, lay, 64) is None  # dp 32 leaves one micro-batch: the interleaved rounds break
    series = scaling_series(j, lay, estimate)
    nodes = [s[0].cluster.nodes for s in series]
    assert nodes == sorted(nodes) and 4 in nodes and 64 not in nodes
    assert all(e.fits for _, _, e in series)
    # one node cannot hold tp 8 x pp 2; on two (dp 1) the unsharded 70B states do not fit 80 GiB
    assert family_at(j, lay, 1) is None
    assert not estimate(*family_at(j, lay, 2)).fits and 2 not in nodes
