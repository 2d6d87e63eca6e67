"""`trainplan ingest` writes the run directory `trainplan train` writes (runtime/metrics.py records,
summary.json, plan.json), read unchanged by compare-run and calibrate: a plan exported to the
framework (`trainplan export`) and the log of its run (a fixture in that release's format) give
predicted vs measured; the device the log names is what calibrate and compare-run check; bad input
is a one-line error and leaves nothing written."""

from __future__ import annotations

import dataclasses
import json
import re
import statistics
from pathlib import Path

import pytest

from trainplan.estimate import estimate
from trainplan.export import exporter, exporters
from trainplan.hardware import Cluster, find_node
from trainplan.job import Job, Workload
from trainplan.layout import check_layout, parse_layout
from trainplan.models import resolve
from trainplan.plan import Plan, TrainSettings
from trainplan.runtime.metrics import StepRecord

FIXTURES = Path(__file__).with_name("fixtures")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
TT_LOG, MG_LOG = FIXTURES / "torchtitan-0.3.0.log", FIXTURES / "megatron-core_v0.16.1.log"
TT = exporter(next(n for n, m in exporters().items() if m.endswith(".torchtitan")))
MG = exporter(next(n for n, m in exporters().items() if m.endswith(".megatron")))
# Layouts of llama-3.1-8b on one p5 node (8 H100) that each framework exports; the Megatron one's
# world size, sequence length and global batch are those of its fixture's `arguments` block.
LAYOUTS = {TT.FRAMEWORK: f"bf16 ac=full mb=1 ga=4 dp=1x8(fsdp) stack={TT.STACK}",
           MG.FRAMEWORK: f"bf16 ac=selective mb=1 ga=8 dp=1x4(zero1) tp=2 stack={MG.STACK}"}
LOGS = {TT.FRAMEWORK: TT_LOG, MG.FRAMEWORK: MG_LOG}


def plan_file(folder: Path, fmt: str, instance: str = "ml.p5.48xlarge", nodes: int = 1, layout: str | None = None) -> Path:
    L = parse_layout(layout or LAYOUTS[fmt])
    job = Job(resolve("llama-3.1-8b"), Cluster(find_node(instance), nodes), Workload(seq_len=8192, global_batch=L.global_batch))
    check_layout(job, L)
    path = folder / f"{fmt}-{instance}-{nodes}.json"
    path.write_text(Plan(job=job, layout=L, train=TrainSettings(), estimate=estimate(job, L)).to_json())
    return path


@pytest.mark.parametrize("fmt", [TT.FRAMEWORK, MG.FRAMEWORK])
def test_export_then_ingest_then_compare_run(cli, tmp_path, fmt):
    plan = plan_file(tmp_path, fmt)
    code, _, err = cli("export", "--plan", str(plan), "--to", fmt, "--out", str(tmp_path / "job"))
    assert code == 0, err
    run = tmp_path / "run"
    code, out, err = cli("ingest", str(LOGS[fmt]), "--format", fmt, "--plan", str(plan), "--out", str(run))
    assert code == 0, err
    assert sorted(p.name for p in run.iterdir()) == ["measurements.jsonl", "plan.json", "summary.json"]
    assert (run / "plan.json").read_text() == plan.read_text()  # the plan as the trainer writes it
    records = [json.loads(x) for x in (run / "measurements.jsonl").read_text().splitlines()]
    assert all(list(r) == [f.name for f in dataclasses.fields(StepRecord)] for r in records)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["gpu"] == "h100-sxm-80gb" and summary["world_size"] == 8 and summary["device"] == "cuda"

    code, out, err = cli("compare-run", str(run), "--json")
    assert code == 0, err
    rows = {r["field"]: r for r in json.loads(out)["rows"]}
    for field, row in rows.items():  # every quantity the estimate predicts, both sides
        assert isinstance(row["predicted"], float) and isinstance(row["measured"], float), field
        assert 0.5 < row["measured_over_predicted"] < 2, field
    # the measured tokens/s per GPU is the median after the warm-up step of what the log states
    steady = [r["tokens_per_s_per_gpu"] for r in records[1:]]
    assert rows["tokens_per_s_per_gpu"]["measured"] == statistics.median(steady)
    code, text, _ = cli("compare-run", str(run))
    table = [x.split() for x in text.splitlines()[2:6]]  # the four rows: label, predicted, measured, ratio
    assert code == 0 and len(table) == 4 and all(row[-3:].count("-") == 0 for row in table), text


def test_torchtitan_tokens_per_s_is_the_logs_and_the_step_time_follows_from_the_plan(cli, tmp_path):
    plan = plan_file(tmp_path, TT.FRAMEWORK)
    run = tmp_path / "run"
    assert cli("ingest", str(TT_LOG), "--format", TT.FRAMEWORK, "--plan", str(plan), "--out", str(run))[0] == 0
    summary = json.loads((run / "summary.json").read_text())
    first = json.loads((run / "measurements.jsonl").read_text().splitlines()[0])
    tps = float(re.search(r"tps: ([\d,]+)", TT_LOG.read_text())[1].replace(",", ""))
    assert first["tokens_per_s_per_gpu"] == tps
    assert first["step_time_s"] == pytest.approx(first["tokens"] / (tps * 8))
    assert summary["ingested"]["not_stated"] == ["lr", "peak_allocated_gib"]  # torchtitan's line states neither
    assert set(summary["ingested"]["derived"]) >= {"step_time_s", "tflops_per_gpu", "mfu"}


def test_without_a_plan_the_summary_says_what_the_log_did_not_state(cli, tmp_path):
    run = tmp_path / "run"
    code, out, _ = cli("ingest", str(TT_LOG), "--format", TT.FRAMEWORK, "--out", str(run))
    assert code == 0 and "--plan" in out
    summary = json.loads((run / "summary.json").read_text())
    assert {"step_time_s", "tokens_per_s", "tflops_per_gpu", "mfu"} <= set(summary["ingested"]["not_stated"])
    assert summary["step_time_s"] is None and summary["tokens_per_s_per_gpu"] is not None
    assert not (run / "plan.json").exists()
    code, _, err = cli("compare-run", str(run))
    assert code != 0 and "not a run directory" in err


def test_calibrate_reads_ingested_runs_and_refuses_too_few(cli, tmp_path):
    runs = []
    for fmt in LAYOUTS:
        runs.append(str(tmp_path / f"run-{fmt}"))
        assert cli("ingest", str(LOGS[fmt]), "--format", fmt, "--plan", str(plan_file(tmp_path, fmt)),
                   "--out", runs[-1])[0] == 0
    code, _, err = cli("calibrate", "--runs", *runs, "--out", str(tmp_path / "prof.json"))
    assert code != 0 and "calibration refused: 2 run(s) move no coefficient" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "prof.json").exists()


def test_a_log_of_another_gpu_than_the_plans_is_refused_by_compare_run_and_calibrate(cli, tmp_path):
    plan = plan_file(tmp_path, TT.FRAMEWORK, instance="ml.p5en.48xlarge")  # H200; the log names an H100
    run = tmp_path / "run"
    code, out, _ = cli("ingest", str(TT_LOG), "--format", TT.FRAMEWORK, "--plan", str(plan), "--out", str(run))
    assert code == 0 and "h100-sxm-80gb (log)" in out and "refuse this run" in out
    for argv in (["compare-run", str(run)], ["calibrate", "--runs", str(run), "--out", str(tmp_path / "p.json")]):
        code, _, err = cli(*argv)
        assert code != 0 and "ran on h100-sxm-80gb" in err and "h200" in err, argv


def test_a_log_that_names_no_device_needs_a_plan_or_a_gpu(cli, tmp_path):
    code, _, err = cli("ingest", str(MG_LOG), "--format", MG.FRAMEWORK, "--out", str(tmp_path / "a"))
    assert code != 0 and "--plan" in err and "--gpu" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "a").exists()
    code, _, err = cli("ingest", str(MG_LOG), "--format", MG.FRAMEWORK, "--gpu", "h100", "--out", str(tmp_path / "b"))
    assert code == 0, err
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert summary["gpu"] == "h100-sxm-80gb" and summary["ingested"]["gpu_from"] == "--gpu"
    # Megatron's arguments block states the run's shape: tokens/s per GPU without a plan
    assert summary["tokens_per_s_per_gpu"] is not None and summary["world_size"] == 8


def test_a_plan_that_is_not_the_logs_run_is_refused(cli, tmp_path):
    # 16 GPUs, the log's global batch and sequence length; the log's world_size is 8
    plan = plan_file(tmp_path, MG.FRAMEWORK, nodes=2, layout=f"bf16 ac=selective mb=1 ga=4 dp=1x8(zero1) tp=2 stack={MG.STACK}")
    code, _, err = cli("ingest", str(MG_LOG), "--format", MG.FRAMEWORK, "--plan", str(plan), "--out", str(tmp_path / "r"))
    assert code != 0 and "world_size 8, the plan 16" in err and not (tmp_path / "r").exists()


def test_bad_input_is_one_line_and_writes_nothing(cli, tmp_path):
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("a run\n")
    cases = [
        (["ingest", str(TT_LOG), "--format", TT.FRAMEWORK, "--out", str(full)], "not an empty directory"),
        (["ingest", str(TT_LOG), "--format", "deepspeed", "--out", str(tmp_path / "x")], "known: "),
        (["ingest", str(tmp_path / "missing.log"), "--format", TT.FRAMEWORK, "--out", str(tmp_path / "x")],
         "cannot read"),
        (["ingest", str(MG_LOG), "--format", TT.FRAMEWORK, "--out", str(tmp_path / "x")], "no step lines"),
    ]
    for argv, why in cases:
        code, _, err = cli(*argv)
        assert code != 0 and why in err and len(err.strip().splitlines()) == 1, (argv, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full"]
    assert [p.name for p in full.iterdir()] == ["keep.txt"]


def test_a_quantized_torchtitan_run_and_a_non_finite_loss(cli, tmp_path):
    """torchtitan prints `mfu: N/A` under fp8/mx (metrics.py:486-489): its non-causal MFU comes from
    its TFLOP/s and the GPU's bf16 peak instead; a `nan` loss is written as None, as the trainer does."""
    lines = TT_LOG.read_text().splitlines()
    at = next(i for i, x in enumerate(lines) if "step: 20" in x)
    lines[at] = re.sub(r"mfu: [\d.]+%", "mfu: N/A", re.sub(r"loss: +[\d.]+", "loss:      nan", lines[at]))
    log = tmp_path / "fp8.log"
    log.write_text("\n".join(lines) + "\n")
    run = tmp_path / "run"
    assert cli("ingest", str(log), "--format", TT.FRAMEWORK, "--gpu", "h100", "--out", str(run))[0] == 0
    rec = next(json.loads(x) for x in (run / "measurements.jsonl").read_text().splitlines() if '"step": 20' in x)
    tflops = float(re.search(r"tflops: ([\d.,]+)", lines[at])[1].replace(",", ""))
    from trainplan.hardware import find_gpu
    from trainplan.precision import mfu_peak

    assert rec["loss"] is None and not rec["skipped"]
    assert rec["mfu_noncausal"] == pytest.approx(tflops * 1e12 / mfu_peak(find_gpu("h100-sxm-80gb")))


def test_calibrate_on_ingested_runs_of_several_layouts_gives_a_profile(cli, tmp_path):
    """Five torchtitan logs (written in the fixture's line format) of five layouts, each running at
    0.8x its plan's predicted tokens/s: calibrate reads the ingested runs and writes a profile that
    predicts the runs it did not see better than the packaged one."""
    step = next(ANSI.sub("", x) for x in TT_LOG.read_text().splitlines() if "step: 10" in x and "[rank" not in x)
    device = next(x for x in TT_LOG.read_text().splitlines() if "capacity:" in x)
    runs = []
    for i, text in enumerate(["ac=full mb=1 ga=4 dp=1x8(fsdp)", "ac=selective mb=2 ga=2 dp=1x8(fsdp)",
                              "ac=none mb=1 ga=8 dp=1x4(fsdp) tp=2", "ac=full mb=4 ga=1 dp=1x8(fsdp)",
                              "ac=selective mb=1 ga=8 dp=1x2(fsdp) tp=4"]):
        plan = plan_file(tmp_path, TT.FRAMEWORK, layout=f"bf16 {text} stack={TT.STACK}").rename(tmp_path / f"p{i}.json")
        tps = json.loads(plan.read_text())["estimate"]["tokens_per_s_per_gpu"] * 0.8
        lines = [device] + [re.sub(r"tps: [\d,]+", f"tps: {round(tps * (0.4 if s == 1 else 1)):,}",
                                   re.sub(r"step: +\d+", f"step: {s:2}", step)) for s in (1, 10, 20, 30)]
        (tmp_path / f"{i}.log").write_text("\n".join(lines) + "\n")
        runs.append(str(tmp_path / f"run{i}"))
        assert cli("ingest", str(tmp_path / f"{i}.log"), "--format", TT.FRAMEWORK, "--plan", str(plan),
                   "--out", runs[-1])[0] == 0
    code, out, err = cli("calibrate", "--runs", *runs, "--out", str(tmp_path / "cal.json"), "--json")
    assert code == 0, err
    cv = json.loads(out)["cv_error"]["tokens_per_s_per_gpu"]
    assert cv["all"]["median_abs"] < cv["before"]["median_abs"] and (tmp_path / "cal.json").is_file()
