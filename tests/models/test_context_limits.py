"""A model's context: learned positions are a hard limit; RoPE past max_position_embeddings needs
--allow-long-context and the plan says so (models/checks.py, the search's sequence bound)."""

import json

import pytest

from trainplan.errors import TrainplanError
from trainplan.models import resolve
from trainplan.models.checks import beyond_context, check_context, context_limit
from trainplan.plan import load_plan


def test_learned_positions_are_a_hard_limit():
    gpt3 = resolve("gpt3-175b")
    assert (gpt3.position_embedding, gpt3.max_position_embeddings) == ("learned", 2048)
    check_context(gpt3, 2048)
    for allow in (False, True):
        assert context_limit(gpt3, allow) == 2048
        with pytest.raises(TrainplanError, match="past the 2,048 positions of gpt3-175b's learned position table"):
            check_context(gpt3, 8192, allow)


def test_rope_past_its_positions_needs_the_flag():
    m = resolve("llama-3.1-8b")
    assert context_limit(m) == 131072 and context_limit(m, allow_long_context=True) is None
    with pytest.raises(TrainplanError, match="pass --allow-long-context"):
        check_context(m, 262144)
    check_context(m, 262144, allow_long_context=True)
    assert beyond_context(m, 262144) and not beyond_context(m, 131072)


def test_gpt3_is_not_planned_at_8192(cli):
    code, out, err = cli("plan", "--model", "gpt3-175b", "--instance", "ml.p5.48xlarge", "--nodes", "8",
                         "--seq-len", "8192", "--allow-long-context")
    assert code == 2 and out == "" and "learned position table (a hard limit)" in err


def test_context_priority_stops_at_the_models_positions(cli):
    code, out, _ = cli("plan", "--model", "llama-3.1-8b", "--priority", "context", "--nodes", "4", "--json")
    plan = json.loads(out)["plan"]
    assert code == 0 and plan["workload"]["seq_len"] == 131072  # not 1M: the model has 131072 positions
    assert "long_context" not in plan["workload"]
    code, out, _ = cli("plan", "--model", "gpt3-175b", "--instance", "ml.p5.48xlarge", "--nodes", "8",
                       "--priority", "context", "--json")
    assert code == 0 and json.loads(out)["plan"]["workload"]["seq_len"] <= 2048


def test_a_long_context_plan_is_marked_and_loads(cli, tmp_path):
    f = tmp_path / "long.json"
    code, _, _ = cli("plan", "--model", "llama-3.1-8b", "--nodes", "4", "--seq-len", "262144",
                     "--allow-long-context", "--out", str(f))
    d = json.loads(f.read_text())
    assert code == 0 and d["workload"]["long_context"] is True
    assert any(r.startswith("long context: sequence 262144") for r in d["reasons"])
    assert load_plan(f).job.workload.long_context
    del d["workload"]["long_context"]  # unmarked, the same plan is refused
    f.write_text(json.dumps(d))
    with pytest.raises(TrainplanError, match="past llama-3.1-8b's max_position_embeddings"):
        load_plan(f)


@pytest.mark.parametrize("command", ["estimate", "fit"])
def test_explicit_layouts_check_the_context_too(cli, command):
    code, _, err = cli(command, "--model", "gpt3-175b", "--instance", "ml.p5.48xlarge", "--nodes", "8",
                       "--seq-len", "4096")
    assert code == 2 and "learned position table" in err
    code, _, err = cli(command, "--model", "llama-3.2-1b", "--instance", "ml.p5.48xlarge", "--seq-len", "262144")
    assert code == 2 and "--allow-long-context" in err


def test_plan_without_seq_len_takes_the_models_context_when_shorter(cli):
    code, out, err = cli("plan", "--model", "gpt3-175b", "--instance", "ml.p5.48xlarge", "--nodes", "8", "--json")
    assert code == 0, err
    assert json.loads(out)["plan"]["workload"]["seq_len"] == 2048


def test_compare_checks_the_context_and_takes_the_flag(cli):
    code, _, err = cli("compare", "--model", "llama-3.2-1b", "--instances", "ml.p5.48xlarge", "--seq-len", "262144")
    assert code == 2 and "--allow-long-context" in err
    code, _, err = cli("compare", "--model", "llama-3.2-1b", "--instances", "ml.p5.48xlarge", "--seq-len", "262144",
                         "--allow-long-context", "--json")
    assert code == 0, err
