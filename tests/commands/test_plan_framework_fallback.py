"""A plan for a model the default stack's framework cannot run goes to the stack that runs it (issue 24:
`plan` works for Llama 4 Maverick on p6-b200), saying so; a stack the user chose is kept and the
refusal names the stack that would plan it."""

import json


def test_maverick_is_planned_on_the_stack_whose_framework_runs_chunked_and_nope_attention(cli):
    # trainplan's trainer refuses chunked / NoPE attention (names megatron); the megatron exporter
    # refuses them too (models/layers.py kinds it cannot write): Megatron-Bridge plans it
    code, out, err = cli("plan", "--model", "llama-4-maverick", "--instance", "ml.p6-b200.48xlarge", "--json")
    assert code == 0, err
    plan = json.loads(out)["plan"]
    assert plan["layout"]["stack"] == "megatron_bridge"
    reasons = json.loads(out)["reasons"]
    assert reasons[0].startswith("stack megatron: trainplan's trainer runs none of the layouts")
    assert reasons[1].startswith("stack megatron_bridge: the framework of --stack megatron runs none")


def test_a_chosen_stack_is_kept_and_its_refusal_names_the_stack_that_plans_it(cli):
    code, _out, err = cli("plan", "--model", "llama-4-maverick", "--instance", "ml.p6-b200.48xlarge",
                         "--stack", "megatron")
    assert code != 0 and len(err.strip().splitlines()) == 1
    assert "can be run by the framework of --stack megatron" in err and "--stack megatron_bridge plans it" in err


def test_a_mamba_hybrid_plan_names_megatron_bridge_not_megatron_as_the_faster_stack(cli):
    # the megatron exporter refuses Mamba-2, so the stack compared is the one that builds it
    code, out, err = cli("plan", "--model", "nemotron-h-56b", "--instance", "ml.p6-b200.48xlarge", "--json")
    assert code == 0, err
    reasons = json.loads(out)["reasons"]
    assert any(r.startswith("--stack megatron_bridge: ") for r in reasons)
    assert not any(r.startswith("--stack megatron: ") for r in reasons)
