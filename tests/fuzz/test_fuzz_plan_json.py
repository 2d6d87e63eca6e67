"""plan.json under fuzzing: a valid plan with 1-3 values changed, keys removed or added, and
arbitrary text as a plan file, loaded directly and through `launch`, `train` and `report`.
Every outcome is a Plan or a one-line TrainplanError; an accepted plan renders strict JSON."""

import json

import pytest
from fuzz_helpers import check_answer, fuzz_settings, mutate, planned, run_cli
from hypothesis import given
from hypothesis import strategies as st

from trainplan.errors import TrainplanError
from trainplan.plan import load_plan, plan_from_dict


@pytest.fixture(scope="module")
def base_plan(tmp_path_factory) -> dict:
    return planned(tmp_path_factory.mktemp("plan"), "--model", "llama-3.2-1b", "--instance", "ml.p5.48xlarge",
                   "--nodes", "1")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz-plan")


@fuzz_settings(250)
@given(data=st.data())
def test_mutated_plan_loads_or_is_refused_in_one_line(base_plan, data):
    d = mutate(data, base_plan)
    try:
        plan = plan_from_dict(d, where="plan.json")
    except TrainplanError as e:
        assert "\n" not in str(e)
        return
    # accepted: it must round-trip to strict JSON and load again as the same plan
    text = plan.to_json()
    assert "NaN" not in text and "Infinity" not in text
    assert plan_from_dict(json.loads(text)).job == plan.job


@fuzz_settings(80)
@given(data=st.data(), command=st.sampled_from([
    ["launch", "local", "--dry-run", "--json"], ["launch", "slurm", "--dry-run", "--json"],
    ["launch", "k8s", "--dry-run", "--json", "--image", "img:1"], ["train", "--dry-run"], ["report"]]))
def test_mutated_plan_through_the_cli(base_plan, workdir, data, command):
    f = workdir / "plan.json"
    f.write_text(json.dumps(mutate(data, base_plan)))
    argv = [*command, str(f)] if command == ["report"] else [*command, "--plan", str(f)]
    check_answer(argv, *run_cli(argv))


@fuzz_settings(60)
@given(text=st.one_of(st.text(max_size=40), st.binary(max_size=40).map(lambda b: b.decode("latin-1")),
                      st.integers(1, 3000).map(lambda n: "[" * n + "]" * n),
                      st.integers(1, 3000).map(lambda n: '{"a":' * n + "1" + "}" * n),
                      st.sampled_from(["NaN", "[Infinity]", '{"schema": "trainplan-plan/1"}', "1e400", "null"])))
def test_any_text_as_a_plan_file_is_one_line(workdir, text):
    f = workdir / "any.json"
    f.write_bytes(text.encode("utf-8", "surrogatepass"))
    with pytest.raises(TrainplanError) as e:
        load_plan(f)
    assert "\n" not in str(e.value)


@fuzz_settings(40)
@given(data=st.data())
def test_run_directory_with_a_mutated_summary_or_plan(base_plan, workdir, data):
    summary = {"world_size": 8, "model": "llama-3.2-1b", "layout": "bf16", "device": "cuda", "steps": 3,
               "tokens_per_s": 8000.0, "tokens_per_s_per_gpu": 1000.0, "mfu": None, "peak_mem_gib": None,
               "step_time_s": 0.5}
    run = workdir / "run"
    run.mkdir(exist_ok=True)
    (run / "summary.json").write_text(json.dumps(mutate(data, summary)))
    (run / "plan.json").write_text(json.dumps(mutate(data, base_plan) if data.draw(st.booleans()) else base_plan))
    for argv in (["compare-run", str(run), "--json"],
                 ["calibrate", "--runs", str(run), str(run), "--out", str(workdir / "profile.json"), "--json"]):
        check_answer(argv, *run_cli(argv))
