"""`trainplan plan`: defaults, JSON, plan.json out, 80 columns, one-line errors."""

import json

import pytest

from trainplan.plan import load_plan


def test_default_plans_llama_70b_on_p6_b200(cli):
    code, out, err = cli("plan")
    assert code == 0, err
    # the node count is the throughput rule's (search/sizing.py), said first among the reasons when it is not 1
    assert out.startswith("llama-3.1-70b on ") and " x ml.p6-b200.48xlarge, " in out.splitlines()[0]
    if not out.startswith("llama-3.1-70b on 1 x"):
        assert "not the fewest that fit (1)" in out
    assert "why:" in out and "Pareto set" in out
    # every line in 80 columns but the chosen layout, printed whole for `estimate --layout` (summary.fit_lines)
    assert max(len(line) for line in out.splitlines() if not line.startswith("chosen: ")) <= 80


def test_json_has_plan_reasons_runners_up_and_pareto(cli):
    code, out, _ = cli("plan", "--json", "--model", "llama-3.1-8b")
    d = json.loads(out)
    assert code == 0
    for k in ("chosen", "binding", "reasons", "runners_up", "pareto", "search", "plan"):
        assert k in d
    assert d["plan"]["schema"] == "trainplan-plan/1"
    assert d["chosen"]["nodes"] == 1


def test_out_writes_a_plan_that_loads(cli, tmp_path):
    out_file = tmp_path / "plan.json"
    code, out, _ = cli("plan", "--model", "llama-3.1-8b", "--out", str(out_file))
    assert code == 0 and f"plan written to {out_file}" in out
    plan = load_plan(out_file)
    assert plan.job.model.name == "llama-3.1-8b"
    assert plan.estimate.tokens_per_s > 0 and plan.reasons
    assert plan.runners_up and plan.pareto and all(a.estimate for a in (*plan.runners_up, *plan.pareto))


@pytest.mark.parametrize("argv, message", [
    (["--seq-len", "long"], "--seq-len must be a positive integer or 'max', got 'long'"),
    (["--global-batch", "0"], "--global-batch must be N or LO:HI positive sequences, got '0'"),
    (["--nodes", "2", "--max-nodes", "4"], "give --nodes (a fixed count) or --max-nodes (a range), not both"),
    (["--model", "llama-3.1-8b", "--budget", "10"],
     "--budget needs --tokens: the budget is for training that many tokens (e.g. --tokens 1T)"),
    (["--model", "llama-3.1-8b", "--days", "30"],
     "--days needs --tokens: the deadline is for training that many tokens (e.g. --tokens 1T)"),
    (["--days", "30", "--tokens", "1T", "--priority", "context"],
     ("--days and --budget choose the plan by cost and time; they do not combine with --priority context "
      "(use one of throughput, cost, time, or drop them)")),
    (["--tolerance", "1.5"], "argument --tolerance: expected a fraction in [0, 1), got '1.5' (see --help)"),
    (["--instance", "ml.p4d.24xlarge", "--precision", "fp8"],
     ("precision 'fp8_tensorwise' needs fp8 tensor cores, which a100-sxm-40gb (ampere) does not have; "
      "use one of: bf16, bf16_pure, fp16")),
])
def test_bad_input_is_one_line_exit_2_nothing_written(cli, tmp_path, argv, message):
    out_file = tmp_path / "plan.json"
    code, _, err = cli("plan", *argv, "--out", str(out_file))
    assert code == 2
    assert err.strip() == f"trainplan plan: error: {message}"
    assert not out_file.exists()


def test_405b_over_a_node_range_with_each_priority(cli):
    for prio in ("throughput", "communication", "cost"):
        code, out, err = cli("plan", "--model", "llama-3.1-405b", "--max-nodes", "8", "--priority", prio,
                             "--instance", "ml.p6-b200.48xlarge", "--tokens", "1T", "--json")
        assert code == 0, err
        assert json.loads(out)["chosen"]["nodes"] > 1


def test_verify_without_torch_names_the_extra(cli, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "trainplan.trace", None)
    code, _, err = cli("plan", "--model", "llama-3.1-8b", "--verify")
    assert code == 2
    assert err.strip() == "trainplan plan: error: --verify needs torch: pip install 'trainplan[torch]'"


def test_plan_runs_with_torch_made_unimportable():
    import subprocess
    import sys

    code = ("import sys; sys.modules['torch'] = None\n"
            "from trainplan.cli import main\n"
            "assert main(['plan', '--model', 'llama-3.1-8b', '--json']) == 0\n"
            "assert main(['compare', '--model', 'llama-3.1-8b', '--instances', 'ml.p5.48xlarge']) == 0\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr[-2000:]


def test_verify_is_rendered_as_one_line_per_difference():
    from trainplan.commands.plan import render_verify

    text = render_verify({"relative_difference": {"params": 0.0, "flops_per_step": -0.048, "x": None},
                          "notes": ["traced 2 layers"]})
    assert text.splitlines() == [
        "verify (traced model code vs the analytic model):",
        "  params                               +0.0%",
        "  flops_per_step                       -4.8%",
        "  note: traced 2 layers",
    ]


def _chosen(cli, *argv):
    import json

    code, out, err = cli("plan", "--json", *argv)
    assert code == 0, err
    return json.loads(out)["chosen"]


def test_context_priority_takes_the_given_seq_len_as_the_shortest_acceptable(cli):
    # It once ignored --seq-len 8192 (the default's value) and kept any other value fixed.
    base = ("--model", "llama-3.1-8b", "--instance", "ml.p5.48xlarge", "--nodes", "1", "--priority", "context")
    longest = _chosen(cli, *base)["seq_len"]
    assert _chosen(cli, *base, "--seq-len", "8192")["seq_len"] == longest
    assert longest <= 131072  # the model's max_position_embeddings, without --allow-long-context
    floor = 400_000
    got = _chosen(cli, *base, "--seq-len", str(floor), "--allow-long-context")["seq_len"]
    assert got > floor and got % 1024 == 0  # searched upward from the floor, not kept at it
    code, _, err = cli("plan", *base, "--seq-len", str(2**21), "--allow-long-context")
    assert code == 2 and "does not fit" in err and "shorten --seq-len" in err


def test_default_global_batch_stays_about_4mi_tokens_on_1024_gpus(cli):
    # dp=1024 at micro-batch 1 would be 8 Mi tokens a step: the default batch no longer grows
    # with the GPU count; the search keeps dp x micro-batch within the step instead.
    c = _chosen(cli, "--model", "llama-3.1-8b", "--instance", "ml.p5.48xlarge", "--nodes", "128")
    assert c["gpus"] == 1024
    assert c["global_batch"] * c["seq_len"] <= 2**22
    assert c["global_batch"] % (c["layout"]["dp_replicate"] * c["layout"]["dp_shard"]) == 0


def test_the_printed_chosen_layout_is_whole_and_parses_to_the_plan(cli):
    # The text output cut lines at 80 columns, and with them the layout's last options.
    from trainplan.layout import layout_from_dict, parse_layout

    argv = ("--model", "llama-3.1-8b", "--priority", "context", "--seq-len", "32768")
    code, out, _ = cli("plan", *argv)
    assert code == 0
    text = next(line for line in out.splitlines() if line.startswith("chosen: "))[len("chosen: "):]
    assert parse_layout(text) == layout_from_dict(_chosen(cli, *argv)["layout"])


def test_plan_checkpoints_at_the_goodput_interval(cli, tmp_path):
    # the trainer reads train.checkpoint_every from plan.json: the interval that maximises goodput
    out_file = tmp_path / "plan.json"
    code, _, err = cli("plan", "--model", "llama-3.1-8b", "--out", str(out_file))
    assert code == 0, err
    plan = load_plan(out_file)
    g = plan.estimate.goodput
    assert g is not None and plan.train.checkpoint_every == g.checkpoint_interval_steps
    assert any(r.startswith(f"checkpoint every {g.checkpoint_interval_steps} steps") for r in plan.reasons)
    assert plan.to_dict()["estimate"]["goodput"]["checkpoint_interval_steps"] == g.checkpoint_interval_steps
    code, out, err = cli("plan", "--model", "llama-3.1-8b", "--json")
    chosen = json.loads(out)["chosen"]  # plan --json's summary carries them too
    assert chosen["checkpoint_interval_steps"] == g.checkpoint_interval_steps
    assert chosen["goodput"] == pytest.approx(g.goodput)


def test_without_a_stack_a_model_the_trainer_cannot_run_is_planned_for_the_stack_that_runs_it(cli, tmp_path):
    # the case: MLA runs in trainplan's trainer only through the HF model (data parallel only),
    # so no layout that fits DeepSeek-V3 on 32 nodes is one it runs; the plan is Megatron's, said first
    out_file = tmp_path / "plan.json"
    code, out, err = cli("plan", "--model", "deepseek-v3", "--max-nodes", "32", "--set", "moe_imbalance=1.1",
                         "--out", str(out_file))
    assert code == 0, err
    assert "stack=megatron" in out.splitlines()[1]
    d_reasons = load_plan(out_file).reasons
    assert d_reasons[0].startswith("stack megatron: trainplan's trainer runs none of the layouts that fit")
    assert "multi-head latent attention" in d_reasons[0]
    plan = load_plan(out_file)
    assert plan.layout.stack == "megatron" and plan.layout.execution.moe_imbalance == 1.1  # --set kept


def test_a_stack_the_user_chose_is_kept_and_the_refusal_is_the_answer(cli):
    code, out, err = cli("plan", "--model", "deepseek-v3", "--max-nodes", "32", "--stack", "trainplan")
    assert code == 2 and out == ""
    assert "can be run by trainplan's trainer" in err and "--stack megatron" in err and len(err.splitlines()) == 1


def test_the_plan_states_its_throughput_band_from_runs_like_it(cli):
    # issue 23: the band is the p90 out-of-sample error of measured runs like the plan's (band.py),
    # named in words beside it, and the one the plan holds
    bands = {}
    for model in ("llama-3.1-8b", "mixtral-8x7b"):
        code, out, err = cli("plan", "--model", model)
        assert code == 0, err
        text = " ".join(x.strip() for x in out.splitlines())  # the band's line wraps
        line = text.split(" tokens/s at ", 1)[1][: text.split(" tokens/s at ", 1)[1].index("(x/") + 10]
        assert line.startswith("the p90 error (over ") and "out-of-sample runs" in line
        # an fp8 plan priced from bf16 rows x a cited ratio says so, and its band carries the ratio's error
        ratio = next((x for x in out.splitlines() if "GEMMs priced as bf16 measured x cited" in x), None)
        widen = float(ratio.split("band +")[1].split("%")[0]) / 100 if ratio else 0.0
        ratio_printed = float(line.rsplit("(x/", 1)[1].split(")")[0])
        bands[model] = ratio_printed - 1 - widen
        d = json.loads(cli("plan", "--model", model, "--json")[1])
        e = d["plan"]["estimate"]
        assert e["band_basis"].split(" (")[0] in line and e["band"][1] / e["tokens_per_s_per_gpu"] == pytest.approx(ratio_printed, abs=0.006)
    assert bands["mixtral-8x7b"] != bands["llama-3.1-8b"]  # each from its own kind's runs


def test_context_and_seq_len_max_never_answer_below_the_workloads_sequence(cli):
    # They once stopped at the fewest nodes holding any sequence: 1,024 for 70B on p5en, 2,048 on B200.
    from trainplan.search.query import DEFAULT_SEQ_LEN

    for argv in (("--instance", "ml.p5en.48xlarge", "--priority", "context"),
                 ("--instance", "ml.p6-b200.48xlarge", "--seq-len", "max")):
        assert _chosen(cli, "--model", "llama-3.1-70b", *argv)["seq_len"] >= DEFAULT_SEQ_LEN


def test_context_that_cannot_reach_the_workloads_sequence_says_so_in_one_line(cli):
    code, _, err = cli("plan", "--model", "llama-3.1-405b", "--instance", "ml.p5en.48xlarge", "--nodes", "1",
                       "--priority", "context")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "does not fit the workload's sequence 8192 (the shortest acceptable) on 1 x ml.p5en.48xlarge" in err
    assert "add nodes (--nodes/--max-nodes), shorten --seq-len" in err


def test_deepseek_v3_throughput_on_p5en_is_not_starved_or_says_why_in_numbers(cli):
    # The check: the fewest nodes that fit (10) gave 1.1% MFU without a word.
    code, out, err = cli("plan", "--model", "deepseek-v3", "--instance", "ml.p5en.48xlarge", "--priority",
                         "throughput", "--json")
    assert code == 0, err
    d = json.loads(out)
    why = [r for r in d["reasons"] if r.startswith(f"{d['chosen']['nodes']} nodes, not the fewest that fit")]
    assert d["chosen"]["mfu"] >= 0.10 or why
    assert why and "MFU" in why[0] and "tokens/s per GPU" in why[0]


def test_a_deadline_picks_the_cheapest_count_that_meets_it_and_says_so(cli):
    base = ("--model", "llama-3.1-8b", "--instance", "ml.p5.48xlarge", "--max-nodes", "8", "--tokens", "1T")
    loose, tight = _plan(cli, *base, "--days", "10000"), _plan(cli, *base, "--days", "25")
    assert loose["sizing"]["meets"] and loose["reasons"][0].endswith(
        "the cheapest plan that trains 1T tokens within 10000 days")
    assert tight["chosen"]["hours_to_tokens"] <= 25 * 24 < loose["chosen"]["hours_to_tokens"]
    assert tight["chosen"]["usd_per_million_tokens"] >= loose["chosen"]["usd_per_million_tokens"]


def _plan(cli, *argv):
    code, out, err = cli("plan", "--json", *argv)
    assert code == 0, err
    return json.loads(out)
