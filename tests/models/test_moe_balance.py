"""Routing and load balancing read from the HF config (models/adapters.py): what the trainer's MoE
layer (runtime/moe.py) follows."""

import json

import pytest

from trainplan.errors import TrainplanError
from trainplan.models import resolve, spec_from_config


def test_deepseek_v3_balances_without_aux_loss_on_sigmoid_scores():
    m = resolve("deepseek-v3").moe
    assert (m.router_score, m.load_balance, m.num_groups, m.topk_groups) == ("sigmoid", "aux_free", 8, 4)


@pytest.mark.parametrize(("name", "coef"), [("mixtral-8x7b", 0.02), ("qwen3-30b-a3b", 0.001), ("gpt-oss-120b", 0.9)])
def test_aux_loss_coefficient_comes_from_router_aux_loss_coef(name, coef):
    m = resolve(name).moe
    assert (m.router_score, m.load_balance, m.aux_loss_coef) == ("softmax", "aux_loss", coef)


def test_unknown_topk_method_is_refused():
    from trainplan.models.library import hf_config

    cfg = dict(hf_config("deepseek-v3"), topk_method="mystery")
    with pytest.raises(TrainplanError, match="topk_method 'mystery' is not supported"):
        spec_from_config(json.loads(json.dumps(cfg)), name="x", where="x")
