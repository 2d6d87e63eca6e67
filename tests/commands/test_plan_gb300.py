"""`trainplan plan` on a GB300 NVL72 UltraServer (issue 23 item 2): the catalog plans it, tensor and expert
parallel groups stay inside the 72-GPU NVLink domain, and the band says the ceiling is an estimate."""

import json

from trainplan.hardware import find_node

DOMAIN = find_node("ml.p6e-gb300.36xlarge").nvlink_domain_gpus


def _layouts(d):
    return [d["chosen"]["layout"], *(r["layout"] for r in d["runners_up"])]


def test_405b_on_one_gb300_ultraserver_stays_inside_nvlink(cli):
    code, out, err = cli("plan", "--model", "llama-3.1-405b", "--instance", "ml.p6e-gb300.36xlarge",
                         "--max-nodes", "18", "--json")
    assert code == 0, err
    d = json.loads(out)
    c = d["chosen"]
    assert c["instance"] == "ml.p6e-gb300.36xlarge" and c["nodes"] <= 18 and c["gpus"] == 4 * c["nodes"]
    for lay in _layouts(d):
        assert lay.get("tp", 1) * lay.get("cp", 1) <= DOMAIN and lay.get("ep", 1) <= DOMAIN, lay
    # up to 18 instances are one UltraServer: nothing of the chosen plan crosses EFA
    assert c["inter_node_bytes_per_token"] == 0
    derived = d["plan"]["estimate"]["machine"]["derived"]
    assert any(line.startswith("gb300-288gb: matmul ceiling is an estimate") for line in derived)


def test_moe_expert_all_to_all_across_trays_runs_on_nvlink(cli):
    # 4 instances of 4 GPUs: an expert group spans trays, and the NVLink switches of the UltraServer carry it
    code, out, err = cli("plan", "--model", "mixtral-8x7b", "--instance", "p6e-gb300", "--nodes", "4", "--json")
    assert code == 0, err
    comm = json.loads(out)["plan"]["estimate"]["comm"]
    assert any(e["dimension"] == "ep" for e in comm)
    assert {e["tier"] for e in comm} == {"nvlink"} and sum(e["network_bytes"] for e in comm) == 0


def test_estimate_says_the_gb300_ceiling_is_an_estimate_without_a_machine_profile(cli):
    code, out, err = cli("estimate", "--model", "llama-3.1-8b", "--instance", "p6e-gb300", "--nodes", "2",
                         "--dp-shard", "8")
    assert code == 0, err
    # the GB300 machine profile holds A4X Max's measured collectives only: GEMM rates stay formulas
    rates = next(x for x in out.splitlines() if x.startswith("rates: "))
    assert "formulas" in rates and "gb300-288gb: matmul ceiling is an estimate" in out
    code, out, err = cli("estimate", "--model", "llama-3.1-8b", "--instance", "p6-b300", "--dp-shard", "8")
    assert code == 0, err
    assert "matmul ceiling is an estimate" not in out  # B300's was measured (MAMF table)
