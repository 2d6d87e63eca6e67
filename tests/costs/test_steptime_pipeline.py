"""Step time with a pipeline: the gather semantics of each sharding (steptime.shard_calls) and the
slowest stage under an uneven split (models/stages.py)."""

import pytest

from trainplan.costs.steptime import step_time
from trainplan.hardware import Cluster, find_node
from trainplan.job import Job, Workload
from trainplan.layout import Layout, check_layout
from trainplan.models import resolve
from trainplan.profile import Profile

PRIOR = Profile()


def _calls(r, collective, dim="fsdp"):
    return sum(c.count for c in r.comm if c.collective == collective and c.dimension == dim)


def test_each_sharding_gathers_and_reduces_as_its_framework_does():
    j = Job(resolve("llama-3.1-70b"), Cluster(find_node("ml.p5.48xlarge"), 4), Workload(4096, 64))
    base = Layout(tp=8, pp=2, dp_shard=2, grad_accum=32, micro_batch=1, stack="megatron")
    counts = {}
    for sharding in ("zero1", "zero2", "fsdp"):
        lay = base.with_(sharding=sharding)
        check_layout(j, lay)
        r = step_time(j, lay, PRIOR)
        counts[sharding] = (_calls(r, "all_gather"), _calls(r, "reduce_scatter"))
    # Megatron's distributed optimizer: once each per step; ZeRO-2: weights gathered once after the
    # optimizer, every micro-batch's gradients reduce-scattered; FSDP2 under pipelining: one gather,
    # one reduce-scatter (resharding and gradient sync deferred to the last micro-batch)
    assert counts == {"zero1": (1, 1), "zero2": (1, 32), "fsdp": (1, 1)}
    # without a pipeline FSDP2 gathers in forward and backward of every micro-batch
    flat = Job(j.model, Cluster(find_node("ml.p5.48xlarge"), 4), Workload(4096, 64))
    r = step_time(flat, Layout(tp=8, dp_shard=4, grad_accum=16, micro_batch=1), PRIOR)
    assert (_calls(r, "all_gather"), _calls(r, "reduce_scatter")) == (32, 16)
    # trainplan's trainer runs zero2 as FSDP2 without resharding after forward: one gather and one
    # reduce-scatter per micro-batch; under pipelining as its fsdp, once each per step
    tz = step_time(flat, Layout(tp=8, dp_shard=4, grad_accum=16, micro_batch=1, sharding="zero2"), PRIOR)
    assert (_calls(tz, "all_gather"), _calls(tz, "reduce_scatter")) == (16, 16)
    tzp = step_time(j, base.with_stack("trainplan").with_(sharding="zero2"), PRIOR)
    assert (_calls(tzp, "all_gather"), _calls(tzp, "reduce_scatter")) == (1, 1)
    synced = step_time(flat, Layout(tp=8, dp_shard=4, grad_accum=16, micro_batch=1, fsdp_sync_last_microbatch=True),
                       PRIOR)
    assert _calls(synced, "reduce_scatter") == 1 and synced.time.dp < r.time.dp


def test_slowest_stage_under_an_uneven_split():
    # 405B, 126 layers on 16 stages: the even split puts 8 layers on rank 0 and 7 + the head on the
    # last rank; counting embedding and loss in the split (vp=8: 1 layer per chunk) leaves the last
    # rank 7 layers + head too, and 8 on the middle ones: the same slowest stage as the even split
    # at vp=1, while the even split cannot run vp=8 at all (128 chunks > 126 layers).
    j = Job(resolve("llama-3.1-405b"), Cluster(find_node("dgx-h100"), 256), Workload(8192, 256))
    lay = Layout(tp=8, pp=16, vp=8, pp_schedule="interleaved", dp_shard=16, sharding="zero1", grad_accum=16,
                 pp_embedding_in_split=True, pp_loss_in_split=True, ac="selective")
    check_layout(j, lay)
    r = step_time(j, lay, PRIOR)
    even = step_time(j, lay.with_(vp=1, pp_schedule="1f1b", pp_embedding_in_split=False, pp_loss_in_split=False),
                     PRIOR)
    assert r.microbatch.total == pytest.approx(even.microbatch.total, rel=1e-9)
    assert r.time.bubble == pytest.approx(even.time.bubble / 8, rel=0.05)
    # Megatron's first/last counts: 7 / 8 x 14 / 7 has the same slowest stage (8 layers) as the even split
    lay77 = lay.with_(vp=1, pp_schedule="1f1b", pp_embedding_in_split=False, pp_loss_in_split=False,
                      pp_first_stage_layers=7, pp_last_stage_layers=7)
    check_layout(j, lay77)
    assert step_time(j, lay77, PRIOR).microbatch.total == pytest.approx(even.microbatch.total, rel=1e-9)
    # two stages: the last stage holds the head (2.1B parameters, 2/3 of a 3.2B layer), so a layer
    # moved onto it costs more than one moved onto the first stage, and the even split is fastest
    two = Layout(tp=8, pp=2, dp_shard=128, sharding="zero1", grad_accum=2, ac="selective")
    back = two.with_(pp_first_stage_layers=62, pp_last_stage_layers=64)
    front = two.with_(pp_first_stage_layers=64, pp_last_stage_layers=62)
    t = {name: step_time(j, x, PRIOR).microbatch.total for name, x in (("even", two), ("back", back),
                                                                       ("front", front))}
    assert t["back"] > t["front"] > t["even"]
