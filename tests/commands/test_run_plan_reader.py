"""A run directory's plan.json is read by the one plan reader (plan.plan_from_dict, with the run's
world size): compare-run and calibrate refuse a malformed one with the very line `train --plan`
gives for the same file, and read back exactly the plan a run wrote, fitted to part of a node
included. Runs are built in tests/commands/run_dirs.py (no torch, no process)."""

import json

import pytest
from run_dirs import SHAPES, write_run

from trainplan.commands._common import read_run
from trainplan.hardware import cluster
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.models import resolve
from trainplan.plan import Plan
from trainplan.runtime.demo import demo_plan
from trainplan.runtime.world import fit_to_world


def _edit(run, change):
    f = run / "plan.json"
    d = json.loads(f.read_text())
    change(d)
    f.write_text(json.dumps(d))
    return f


# Each of these plan_from_run took without a word (a layout for another model or GPU count, an
# unknown key) or answered with a KeyError / AttributeError of its own.
EDITS = {
    "unknown layout key": lambda d: d["layout"].update(bogus=1),
    "tp that does not divide the heads": lambda d: d["layout"].update(tp=3),
    "layout not an object": lambda d: d.update(layout=[]),
    "no workload": lambda d: d.pop("workload"),
    "unknown precision": lambda d: d["layout"].update(precision="fp9"),
    "workload key of no Workload": lambda d: d["workload"].update(tokens_per_step=1),
}


@pytest.mark.parametrize("edit", list(EDITS))
@pytest.mark.parametrize("command", ["compare-run", "calibrate"])
def test_a_malformed_run_plan_gets_the_readers_line(cli, tmp_path, edit, command):
    run = write_run(tmp_path / "r", SHAPES[0])
    f = _edit(run, EDITS[edit])
    code, out, err = cli("train", "--plan", str(f), "--dry-run")
    assert code == 2 and out == "" and err.count("\n") == 1
    reader_line = err.removeprefix("trainplan train: error: ")
    assert reader_line.startswith(str(f))
    argv = [str(run)] if command == "compare-run" else ["--runs", str(run), "--out", str(tmp_path / "p.json")]
    code, out, err = cli(command, *argv)
    assert code == 2 and out == ""
    assert err == f"trainplan {command}: error: {reader_line}"
    assert not (tmp_path / "p.json").exists()


def test_a_run_plan_for_more_gpus_than_the_run_had_is_refused(cli, tmp_path):
    run = write_run(tmp_path / "r", SHAPES[0])  # a plan for 8 GPUs
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "world_size": 4}))
    code, _, err = cli("compare-run", str(run))
    assert code == 2 and err.count("\n") == 1
    assert str(run / "plan.json") in err and "= 8 GPUs but the cluster has 4" in err


def _run_dir(tmp_path, plan: Plan, world: int):
    """What the trainer writes: the plan it ran, and a summary with its world size."""
    d = tmp_path / "run"
    d.mkdir()
    (d / "plan.json").write_text(plan.to_json())
    (d / "summary.json").write_text(json.dumps({"world_size": world}))
    return d


@pytest.mark.parametrize("world", [1, 2, 8])
def test_the_demo_run_reads_back_as_it_ran(tmp_path, world):
    plan = demo_plan(world)  # `world` GPUs of a nominal 8-GPU node
    _, back = read_run(_run_dir(tmp_path, plan, world))
    assert back == plan


def test_a_plan_fitted_to_part_of_a_node_reads_back_as_fitted(tmp_path):
    job = Job(resolve("llama-3.2-1b"), cluster("ml.p5e.48xlarge", 1), Workload(seq_len=4096, global_batch=16))
    fitted = fit_to_world(Plan(job, Layout(dp_shard=8, micro_batch=2, ac="full")), 2)
    assert fitted.job.cluster.num_gpus == 2 and fitted.layout.dp_shard == 2
    _, back = read_run(_run_dir(tmp_path, fitted, 2))
    assert back == fitted


def test_a_run_on_every_gpu_of_its_nodes_keeps_its_cluster(tmp_path):
    # two full nodes ran as planned: the cluster is the plan's, not one 16-GPU node
    job = Job(resolve("llama-3.1-8b"), cluster("ml.p5e.48xlarge", 2), Workload(seq_len=4096, global_batch=16))
    plan = Plan(job, Layout(dp_shard=16, micro_batch=1, ac="full"))
    _, back = read_run(_run_dir(tmp_path, plan, 16))
    assert back == plan and back.job.cluster.nodes == 2
