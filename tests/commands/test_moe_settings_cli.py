"""The MoE capacity settings and ep_comm_overlap's rules from the command line: `--set` reaches the
estimate, plan.json and the layout line; what a model or Megatron-Core refuses is one line, exit 2."""

import json

import pytest

from trainplan.layout import parse_layout

QWEN = ("--model", "qwen3-30b-a3b", "--instance", "ml.p6-b200.48xlarge", "--seq-len", "4096")
MEGATRON_EP8 = (*QWEN, "--ep", "8", "--ac", "none", "--stack", "megatron", "--set", "moe_dispatcher=alltoall")


def _estimate(cli, *extra):
    code, out, err = cli("estimate", *MEGATRON_EP8, "--json", *extra)
    assert code == 0, err
    return json.loads(out)


def test_estimate_prices_padding_to_capacity_and_prints_it_in_the_layout(cli):
    dropless = _estimate(cli)
    padded = _estimate(cli, "--set", "moe_capacity_factor=1.5", "--set", "moe_pad_to_capacity=true")
    assert dropless["execution"]["moe_capacity_factor"] is None
    assert padded["execution"]["moe_capacity_factor"] == 1.5 and padded["execution"]["moe_pad_to_capacity"] is True
    assert padded["estimate"]["time_s"]["ep"] > dropless["estimate"]["time_s"]["ep"]
    assert padded["estimate"]["step_time_s"] > dropless["estimate"]["step_time_s"]
    # the text output's layout line reads back with both settings
    code, out, _ = cli("estimate", *MEGATRON_EP8, "--set", "moe_capacity_factor=1.5", "--set",
                       "moe_pad_to_capacity=true")
    (line,) = [x for x in out.splitlines() if x.startswith("layout: ")]
    L = parse_layout(line[len("layout: "):])
    assert code == 0 and L.execution.moe_capacity_factor == 1.5 and L.execution.moe_pad_to_capacity


def test_fit_counts_fewer_dispatched_copies_when_a_capacity_below_one_drops_them(cli):
    def total(*extra):
        code, out, err = cli("fit", *MEGATRON_EP8, "--json", *extra)
        assert code == 0, err
        return json.loads(out)["total_gib"]

    assert total("--set", "moe_capacity_factor=0.5") < total()


def test_plan_writes_the_capacity_factor_into_plan_json(cli, tmp_path):
    out = tmp_path / "plan.json"
    code, _, err = cli("plan", *QWEN, "--nodes", "1", "--set", "moe_capacity_factor=1.25", "--out", str(out))
    assert code == 0, err
    assert json.loads(out.read_text())["layout"]["execution"]["moe_capacity_factor"] == 1.25


@pytest.mark.parametrize("command,argv,message", [
    ("estimate", ("--model", "llama-3.1-8b", "--set", "moe_capacity_factor=1.25"),
     "moe_capacity_factor applies to mixture-of-experts models only"),
    ("plan", ("--model", "llama-3.1-8b", "--set", "moe_capacity_factor=1.25"),
     "moe_capacity_factor applies to mixture-of-experts models only"),
    ("fit", ("--model", "llama-3.1-8b", "--set", "moe_pad_to_capacity=true"),
     "moe_pad_to_capacity applies to mixture-of-experts models only"),
    ("estimate", (*QWEN, "--set", "moe_capacity_factor=0"), "moe_capacity_factor must be a finite number > 0"),
    ("estimate", (*QWEN, "--set", "moe_capacity_factor=inf"), "moe_capacity_factor must be a finite number > 0"),
    ("estimate", (*QWEN, "--ep", "8", "--stack", "megatron", "--set", "ep_comm_overlap=true"),
     "ep_comm_overlap=true needs the alltoall or deepep dispatcher"),  # megatron's default is allgather
    ("estimate", (*MEGATRON_EP8[:-2], "--set", "moe_dispatcher=alltoall", "--ac", "full", "--set",
                  "ep_comm_overlap=true"), "ep_comm_overlap=true needs no full-layer recompute"),
    ("estimate", (*MEGATRON_EP8, "--set", "moe_pad_to_capacity=true"),
     "moe_pad_to_capacity=true needs a capacity factor"),
])
def test_refusals_are_one_line_exit_2(cli, command, argv, message):
    code, _out, err = cli(command, *argv)
    assert code == 2 and message in err and err.strip().count("\n") == 0 and "Traceback" not in err


def test_plan_with_ep_overlap_asked_keeps_it_only_where_megatron_accepts_it(cli, tmp_path):
    out = tmp_path / "plan.json"
    code, _, err = cli("plan", *QWEN, "--nodes", "1", "--stack", "megatron", "--set", "moe_dispatcher=alltoall",
                       "--set", "ep_comm_overlap=true", "--json", "--out", str(out))
    assert code == 0, err
    plan = json.loads(out.read_text())  # it loads: the chosen layout passes check_layout
    L = plan["layout"]
    assert L["execution"]["ep_comm_overlap"] == (L["ep"] > 1 and L["ac"] in ("none", "selective")
                                                 and (L["pp"] == 1 or L["vp"] > 1))
