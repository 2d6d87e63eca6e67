"""`--from FILE` on fit, plan and compare (issue #22 item 3): a framework's own config as the job and
layout. `fit --from` reports the file's layout; `plan --from` keeps the file's model, sequence and
batch for the search and puts the team's layout beside the chosen plan, term by term; `compare --from`
adds the team's layout as a row. A flag that would say what the file says is a one-line error."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "export"))
from tt_plans import plan_of

# a layout a team might run with torchtitan on one p5 node: bf16, full checkpointing, fsdp over 8
MINE = "bf16 ac=full mb=1 ga=4 dp=1x8(fsdp) stack=torchtitan"


@pytest.fixture
def config(cli, tmp_path) -> str:
    plan = tmp_path / "plan.json"
    plan.write_text(plan_of(MINE).to_json())
    code, _, err = cli("export", "--plan", str(plan), "--to", "torchtitan", "--out", str(tmp_path / "job"))
    assert code == 0, err
    return str(tmp_path / "job" / "trainplan_job.py")


def test_fit_from_reports_the_files_layout(cli, config):
    code, out, err = cli("fit", "--from", config, "--instance", "ml.p5.48xlarge", "--json")
    assert code == 0, err
    got = json.loads(out)
    assert (got["model"], got["seq_len"], got["global_batch"], got["gpus"]) == ("llama-3.1-8b", 8192, 32, 8)
    assert got["layout"]["ac"] == "full" and got["fits"] and got["from"][0].endswith("as torchtitan 0.3.0")
    plain = json.loads(cli("fit", "--model", "llama-3.1-8b", "--instance", "ml.p5.48xlarge", "--layout", MINE,
                           "--json")[1])
    assert got["total_gib"] == plain["total_gib"]


def test_plan_from_searches_the_files_job_and_shows_the_team_layout_beside_the_plan(cli, config):
    code, out, err = cli("plan", "--from", config, "--instance", "ml.p5.48xlarge", "--json")
    assert code == 0, err
    d = json.loads(out)
    plan, yours = d["plan"], d["yours"]
    assert plan["model"]["name"] == "llama-3.1-8b"
    assert (plan["workload"]["seq_len"], plan["workload"]["global_batch"]) == (8192, 32)
    assert plan["cluster"]["nodes"] == 1 and plan["layout"]["stack"] == "torchtitan"  # the file's stack and GPUs
    assert yours["layout"]["ac"] == "full" and yours["nodes"] == 1 and yours["fits"]
    rows = {r["what"]: r for r in yours["rows"]}
    assert rows["tokens/s"]["plan"] == pytest.approx(plan["estimate"]["tokens_per_s"])
    # the search cannot do worse than the team's own layout on its own job: the layout is in its space
    assert rows["tokens/s"]["plan"] >= rows["tokens/s"]["yours"]
    assert all(c.count(" -> ") == 1 for c in yours["changes"]) and yours["changes"]
    assert {"step time: compute", "memory: activations", "USD per million tokens"} <= set(rows)
    code, text, err = cli("plan", "--from", config, "--instance", "ml.p5.48xlarge")
    assert code == 0, err
    assert "yours (read " in text and "the plan vs yours: " in text and "the plan changes: " in text


def test_compare_from_adds_the_team_layout_as_a_row(cli, config):
    code, out, err = cli("compare", "--from", config, "--instances", "ml.p5.48xlarge", "--max-nodes", "2", "--json")
    assert code == 0, err
    rows = json.loads(out)["instances"]
    assert rows[0]["choice"] == "yours" and rows[0]["layout"].startswith("bf16 ac=full") and rows[0]["nodes"] == 1
    assert json.loads(out)["seq_len"] == 8192


@pytest.mark.parametrize("command,flag", [("fit", ["--model", "qwen3-8b"]), ("plan", ["--seq-len", "4096"]),
                                          ("compare", ["--global-batch", "64"]), ("fit", ["--tp", "2"])])
def test_a_flag_that_says_what_the_file_says_is_a_one_line_error(cli, config, command, flag):
    code, out, err = cli(command, "--from", config, *flag)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "holds the model, batch and layout; leave out --" in err


def test_an_unreadable_from_file_is_one_line(cli, tmp_path):
    bad = tmp_path / "job.toml"
    bad.write_text("model = 'x'\n")
    code, _, err = cli("plan", "--from", str(bad))
    assert code == 2 and err.count("\n") == 1 and "cannot tell which framework" in err
