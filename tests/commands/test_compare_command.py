"""`trainplan compare`: one row per instance type, 80 columns, JSON."""

import json


def test_compare_rows_per_instance(cli):
    code, out, err = cli("compare", "--model", "llama-3.1-8b", "--instances",
                         "ml.p6-b200.48xlarge,ml.p4d.24xlarge", "--tokens", "100B", "--max-nodes", "8")
    assert code == 0, err
    lines = out.splitlines()
    rows = [line for line in lines if line.startswith(("p6-b200.48xlarge", "p4d.24xlarge"))]
    # without --days or --budget: the cheapest plan of each, then the fastest near its cost
    assert rows[0].startswith("p6-b200.48xlarge  cheapest") and rows[-1].startswith("p4d.24xlarge")
    assert max(len(line) for line in lines) <= 80


def test_compare_json_blackwell_beats_ampere_per_gpu(cli):
    code, out, _ = cli("compare", "--model", "llama-3.1-8b", "--instances",
                       "ml.p6-b200.48xlarge,ml.p4d.24xlarge", "--tokens", "100B", "--max-nodes", "4", "--json")
    rows = json.loads(out)["instances"]
    assert code == 0 and all(r["fits"] for r in rows)
    b200, a100 = (next(r for r in rows if r["instance"] == i and r["choice"] == "cheapest")
                  for i in ("ml.p6-b200.48xlarge", "ml.p4d.24xlarge"))
    assert b200["tokens_per_s_per_gpu"] > a100["tokens_per_s_per_gpu"]
    for k in ("nodes", "micro_batch", "longest_seq_len", "usd_per_million_tokens", "hours_to_tokens"):
        assert b200[k] is not None


def test_compare_reports_an_instance_that_does_not_fit(cli):
    code, out, _ = cli("compare", "--model", "llama-3.1-405b", "--instances", "ml.g6e.48xlarge",
                       "--max-nodes", "2", "--json")
    assert code == 0
    assert json.loads(out)["instances"][0]["fits"] is False


def test_a_deadline_needs_tokens(cli):
    code, _, err = cli("compare", "--days", "60")
    assert code == 2
    assert err.strip() == ("trainplan compare: error: --days needs --tokens: the deadline is for training that many "
                           "tokens (e.g. --tokens 1T)")


def test_compare_with_a_deadline_gives_a_node_count_per_instance_and_agrees_with_plan(cli):
    # One rule (search/sizing.py): compare's row for an instance is plan's answer on that instance.
    goal = ("--model", "llama-3.1-8b", "--tokens", "1T", "--days", "30", "--max-nodes", "8")
    code, out, err = cli("compare", *goal, "--instances", "ml.p5.48xlarge,ml.p4d.24xlarge", "--json")
    assert code == 0, err
    rows = json.loads(out)["instances"]
    assert [r["instance"] for r in rows] == ["ml.p5.48xlarge", "ml.p4d.24xlarge"]
    for r in rows:
        assert r["choice"] == "chosen" and isinstance(r["nodes"], int) and isinstance(r["meets"], bool)
        code, out, err = cli("plan", *goal, "--instance", r["instance"], "--json")
        assert code == 0, err
        p = json.loads(out)
        assert (p["chosen"]["nodes"], p["chosen"]["layout_short"]) == (r["nodes"], r["layout"])
        assert p["sizing"]["meets"] == r["meets"]
