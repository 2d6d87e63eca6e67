"""`trainplan compare`: one row per instance type, 80 columns, JSON."""

import json


def test_compare_rows_per_instance(cli):
    code, out, err = cli("compare", "--model", "llama-3.1-8b", "--instances",
                         "ml.p6-b200.48xlarge,ml.p4d.24xlarge", "--tokens", "100B")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[3].startswith("p6-b200.48xlarge") and lines[4].startswith("p4d.24xlarge")
    assert max(len(line) for line in lines) <= 80


def test_compare_json_blackwell_beats_ampere_per_gpu(cli):
    code, out, _ = cli("compare", "--model", "llama-3.1-8b", "--instances",
                       "ml.p6-b200.48xlarge,ml.p4d.24xlarge", "--tokens", "100B", "--json")
    rows = json.loads(out)["instances"]
    assert code == 0 and all(r["fits"] for r in rows)
    b200, a100 = rows
    assert b200["tokens_per_s_per_gpu"] > a100["tokens_per_s_per_gpu"]
    for k in ("nodes", "micro_batch", "longest_seq_len", "usd_per_million_tokens", "hours_to_tokens"):
        assert b200[k] is not None


def test_compare_reports_an_instance_that_does_not_fit(cli):
    code, out, _ = cli("compare", "--model", "llama-3.1-405b", "--instances", "ml.g6e.48xlarge",
                       "--max-nodes", "2", "--json")
    assert code == 0
    assert json.loads(out)["instances"][0]["fits"] is False
