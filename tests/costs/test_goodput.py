"""Goodput and the checkpoint interval (costs/goodput.py) from the catalog's failure rate and storage."""

import math

import pytest

from trainplan.costs.goodput import goodput, goodput_at, young_interval
from trainplan.costs.states import checkpoint_bytes_per_param
from trainplan.hardware.reliability import failure_rates, reliability
from trainplan.precision import recipe


def test_the_published_rate_gives_back_the_published_run():
    # Llama 3 (arXiv:2407.21783 sec. 3.3.4): 419 unexpected interruptions in 54 days on 16,384 GPUs.
    rate = failure_rates()["llama3-h100"]
    mtbf_h = 1 / (rate.per_gpu_hour * 16384)
    assert mtbf_h == pytest.approx(54 * 24 / 419)  # one interruption every ~3.1 hours
    # the same rate on 1024 GPUs fails 16x less often
    g_big = goodput(5.0, 16384, 5e12, reliability())
    g_small = goodput(5.0, 1024, 5e12, reliability())
    assert g_small.mtbf_s == pytest.approx(16 * g_big.mtbf_s) and g_small.goodput > g_big.goodput


def test_young_interval_maximises_goodput_and_scales_with_the_square_root_of_the_save():
    save, mtbf, restart = 60.0, 11000.0, 600.0
    tau = young_interval(save, mtbf)
    assert tau == pytest.approx(math.sqrt(2 * 60 * 11000))
    best = goodput_at(tau, save, restart, mtbf)
    assert best > goodput_at(tau * 0.7, save, restart, mtbf) and best > goodput_at(tau * 1.4, save, restart, mtbf)
    # a storage 4x slower saves 4x longer: the interval doubles and goodput falls
    fast = goodput(2.0, 16384, 6e12, reliability(capacity_tib=400))
    slow = goodput(2.0, 16384, 6e12, reliability(capacity_tib=100))
    assert slow.save_s == pytest.approx(4 * fast.save_s)
    assert slow.checkpoint_interval_steps == pytest.approx(2 * fast.checkpoint_interval_steps, rel=0.02)
    assert slow.goodput < fast.goodput
    # the interval is whole steps, within a hair of the best whole number of steps
    at = lambda k: goodput_at(k * 2.0, slow.save_s, slow.restart_s, slow.mtbf_s)
    assert at(slow.checkpoint_interval_steps) > max(at(k) for k in range(1, 5000)) - 1e-3
    assert slow.lost_to_saves + slow.lost_to_failures == pytest.approx(1 - slow.goodput, abs=0.01)


def test_checkpoint_holds_the_persistent_states_without_gradients():
    bf16 = recipe("bf16")
    assert checkpoint_bytes_per_param(bf16, "fsdp") == 12  # fp32 shards (master) + AdamW m, v
    assert checkpoint_bytes_per_param(bf16, "zero1") == 14  # + Megatron's bf16 model weights
    assert checkpoint_bytes_per_param(recipe("bf16_pure"), "fsdp") == 6


def test_unknown_storage_is_a_one_line_error():
    from trainplan.errors import TrainplanError

    with pytest.raises(TrainplanError, match="fsx-lustre-1000"):
        reliability("tape")
