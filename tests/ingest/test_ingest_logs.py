"""The log readers (export/torchtitan_log.py, export/megatron_log.py) on fixtures written here in
each pinned release's format (tests/ingest/fixtures: torchtitan 0.3.0's MetricsProcessor.log line
with its colour codes, Megatron-LM core_v0.16.1's training_log and report_memory lines), with
noise lines of other ranks, a warm-up step, and lines that look alike but are not step lines
(torchtitan's validation line, Megatron's timers and validation loss). The expected values are
the numbers written in the fixture lines, read back here from the text, not copied."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import math
import os
import re
from pathlib import Path

import pytest

from trainplan.errors import TrainplanError
from trainplan.export import exporter, exporters
from trainplan.export.logs import CAUSAL, NONCAUSAL, formats, parser
from trainplan.ingest import match_gpu, read_logs

FIXTURES = Path(__file__).with_name("fixtures")
TT = FIXTURES / "torchtitan-0.3.0.log"
MG = FIXTURES / "megatron-core_v0.16.1.log"
TT_FMT = exporter(next(n for n, m in exporters().items() if m.endswith(".torchtitan"))).FRAMEWORK
MG_FMT = exporter(next(n for n, m in exporters().items() if m.endswith(".megatron"))).FRAMEWORK
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_formats_are_the_exporters_framework_names_with_a_log_reader():
    expected = {}
    for module in exporters().values():
        if importlib.util.find_spec(f"{module}_log"):
            expected[importlib.import_module(module).FRAMEWORK] = f"{module}_log"
    assert formats() == expected and {TT_FMT, MG_FMT} <= set(expected)
    for module in expected.values():  # a reader reads its exporter's pinned release
        reader, exp = importlib.import_module(module), importlib.import_module(module[: -len("_log")])
        assert (reader.FRAMEWORK, reader.RELEASE) == (exp.FRAMEWORK, exp.RELEASE)


def test_an_unknown_format_lists_the_known_ones():
    with pytest.raises(TrainplanError) as e:
        parser("deepspeed")
    assert "unknown log format 'deepspeed'" in str(e.value)
    assert all(name in str(e.value) for name in formats())


def _tt_lines():
    """(step, fields) of the fixture's rank-0 step lines, the colour codes dropped."""
    out = {}
    for line in TT.read_text().splitlines():
        text = ANSI.sub("", line)
        if "validate" in text or text.startswith("[rank") or "step:" not in text:
            continue
        m = re.search(r"step:\s*(\d+).*?loss:\s*(\S+).*?memory:\s*([\d.]+)GiB.*?tps: ([\d,]+).*?mfu: ([\d.]+)%", text)
        out[int(m[1])] = (float(m[2]), float(m[3]), float(m[4].replace(",", "")), float(m[5]) / 100)
    return out


def test_torchtitan_steps_colour_codes_and_device():
    assert "\x1b[" in TT.read_text()  # the fixture prints torchtitan's colours (utils.Color)
    log = read_logs([str(TT)], TT_FMT)
    lines = _tt_lines()
    assert [s.step for s in log.steps] == sorted(lines)  # the validation line is not a step
    assert log.flops_convention == NONCAUSAL
    for s in log.steps:
        loss, mem, tps, mfu = lines[s.step]
        assert (s.loss, s.tokens_per_s_per_gpu, s.mfu) == (loss, tps, pytest.approx(mfu))
        assert s.peak_allocated_gib is None and s.step_time_s is None  # not on torchtitan's line
        if s.step != 10:
            assert s.peak_reserved_gib == mem
    # step 10 is printed by rank 1 too: the worst rank's memory, rank 0's throughput
    rank1 = next(ANSI.sub("", x) for x in TT.read_text().splitlines() if x.startswith("[rank1]:") and "step:" in x)
    assert log.steps[1].peak_reserved_gib == max(lines[10][1], float(re.search(r"memory:\s*([\d.]+)", rank1)[1]))
    assert log.steps[1].tokens_per_s_per_gpu == lines[10][2]
    assert log.device_name == "NVIDIA H100 80GB HBM3" and log.device_kind == "cuda"
    assert match_gpu(log.device_name, log.device_gib).name.startswith("h100")


def test_megatron_iterations_memory_and_arguments():
    text = MG.read_text()
    log = read_logs([str(MG)], MG_FMT)
    its = [m for m in re.finditer(r"iteration\s+(\d+)/.*?\(ms\): ([\d.]+) \|.*?TFLOP/s/GPU\): ([\d.]+) \|"
                                  r".*?learning rate: (\S+) \|.*?lm loss: (\S+) \|", text)]
    assert [s.step for s in log.steps] == [int(m[1]) for m in its]  # not the timers or the validation loss
    assert log.flops_convention == CAUSAL
    for s, m in zip(log.steps, its):
        assert (s.step_time_s, s.tflops_per_gpu, s.lr, s.loss) == (float(m[2]) / 1e3, float(m[3]), float(m[4]),
                                                                    float(m[5]))
    args = dict(re.findall(r"^\s+(\w+) \.+ (\S+)$", text, re.MULTILINE))
    assert (log.world_size, log.seq_len, log.global_batch) == (int(args["world_size"]), int(args["seq_length"]),
                                                               int(args["global_batch_size"]))
    # report_memory: every rank of data-parallel rank 0; the worst one, MiB -> GiB
    for s in log.steps:
        reported = [float(m[1]) for m in re.finditer(rf"after {s.step} iterations\) .*max reserved: ([\d.]+)", text)]
        assert s.peak_reserved_gib == (max(reported) / 1024 if reported else None)
    assert log.device_name is None  # Megatron prints no device name: --plan or --gpu tells it


@pytest.mark.parametrize("fmt, path, damage", [
    (TT_FMT, TT, ("tps: 7,990", "tps: fast")),
    (MG_FMT, MG, ("grad norm: 1.900", "grad norm: big")),
    (MG_FMT, MG, ("| global batch size:    32 |", "|")),
])
def test_a_step_line_that_does_not_parse_names_its_file_and_line(tmp_path, fmt, path, damage):
    text = path.read_text()
    assert damage[0] in text
    bad = tmp_path / path.name
    bad.write_text(text.replace(damage[0], damage[1], 1))
    line = next(i for i, x in enumerate(text.splitlines(), 1) if damage[0] in x)
    with pytest.raises(TrainplanError) as e:
        read_logs([str(bad)], fmt)
    assert str(e.value).startswith(f"{bad}:{line}:") and "\n" not in str(e.value)


def test_a_log_without_step_lines_is_refused(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_text("[titan] starting\nnothing trained\n")
    with pytest.raises(TrainplanError, match="no step lines"):
        read_logs([str(empty)], TT_FMT)
    with pytest.raises(TrainplanError, match="no step lines"):  # a torchtitan log read as Megatron's
        read_logs([str(TT)], MG_FMT)


def test_torchtitan_format_labels_are_the_releases(tmp_path):
    """The labels the pattern reads are those of the installed torchtitan's metrics.py at the lines
    torchtitan_log.toml cites (skipped where torchtitan is not installed)."""
    spec = importlib.util.find_spec("torchtitan")
    if spec is None:
        pytest.skip("torchtitan not installed (the torchtitan extra)")
    from trainplan.export.torchtitan_log import _data
    from trainplan.parsing import read_toml

    src = Path(spec.origin).parent / "components" / "metrics.py"
    cited = read_toml(Path(importlib.import_module("trainplan.export.torchtitan_log").__file__)
                      .with_name("torchtitan_log.toml"))
    first, last = map(int, re.search(r"metrics\.py:(\d+)-(\d+)", cited["step"]["source"]).groups())
    lines = "\n".join(src.read_text().splitlines()[first - 1:last])
    labels = re.findall(r"([a-z_]+):\\s", cited["step"]["pattern"].replace("\\b", " "))
    assert labels == ["step", "loss", "grad_norm", "memory", "tps", "tflops", "mfu"]
    for label in labels:
        assert f"{label}: " in lines, label
    device = re.search(r"metrics\.py:(\d+)-(\d+)", cited["device"]["source"]).groups()
    assert "capacity: " in "\n".join(src.read_text().splitlines()[int(device[0]) - 1:int(device[1])])
    assert _data()["step"].pattern == cited["step"]["pattern"]


def _torchtitan_fstring(src: str, label: str) -> ast.expr:
    """The f-string of the installed torchtitan's metrics.py logger.info call that holds `label`."""
    for node in ast.walk(ast.parse(src)):
        if (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "info" and node.args
                and isinstance(node.args[0], ast.JoinedStr)):
            text = ast.get_source_segment(src, node.args[0])
            if label in text and "validate" not in text:
                return node.args[0]
    raise AssertionError(f"no logger.info f-string with {label!r} in metrics.py")


def test_lines_torchtitan_itself_formats_are_read_back(tmp_path):
    """torchtitan's own format strings (MetricsProcessor.log, build_device_memory_monitor), taken
    from the installed release and evaluated with chosen values, colours on and off: the reader
    gets each value back (skipped where torchtitan is not installed)."""
    spec = importlib.util.find_spec("torchtitan")
    if spec is None:
        pytest.skip("torchtitan not installed (the torchtitan extra)")
    from torchtitan.tools.utils import Color, NoColor

    src = (Path(spec.origin).parent / "components" / "metrics.py").read_text()
    step_line = compile(ast.Expression(_torchtitan_fstring(src, "step:")), "metrics.py", "eval")
    device_line = compile(ast.Expression(_torchtitan_fstring(src, "capacity:")), "metrics.py", "eval")
    cases = [  # step, loss, grad_norm, reserved GiB, %, tps, tflops, mfu (None: quantized, N/A)
        (1, 12.25, 9.5, 45.2, 55.0, 3021.4, 164.3, 16.61),
        (100, float("nan"), 0.1234, 139.99, 99.5, 1234567.8, 12345.67, None),
        (2500, 2.125, 123.4567, 5.0, 3.5, 812.0, 41.0, 4.2),
    ]
    for color in (Color(), NoColor()):
        monitor = type("M", (), {"device_name": "NVIDIA H200", "device_capacity_gib": 139.81})()
        lines = ["[titan] 2026-03-02 10:00:00,000 - root - INFO - "
                 + eval(device_line, {"device_type": "cuda", "device_memory_monitor": monitor})]
        for step, loss, gn, gib, pct, tps, tflops, mfu in cases:
            mem = type("S", (), {"max_reserved_gib": gib, "max_reserved_pct": pct})()
            ns = {"color": color, "step": step, "global_avg_loss": loss, "grad_norm": gn, "device_mem_stats": mem,
                  "tps": tps, "tflops": tflops, "mfu_str": f"{mfu:.2f}%" if mfu is not None else "N/A"}
            lines.append("[rank0]:[titan] 2026-03-02 10:00:01,000 - root - INFO - " + eval(step_line, ns))
        path = tmp_path / "rendered.log"
        path.write_text("\n".join(lines) + "\n")
        log = read_logs([str(path)], TT_FMT)
        assert (log.device_name, log.device_kind, log.device_gib) == ("NVIDIA H200", "cuda", 139.81)
        assert match_gpu(log.device_name, log.device_gib).name.startswith("h200")
        for s, (step, loss, gn, gib, _, tps, tflops, mfu) in zip(log.steps, cases, strict=True):
            assert s.step == step and (s.loss == loss or math.isnan(loss) and math.isnan(s.loss)) and s.grad_norm == round(gn, 4)
            assert (s.peak_reserved_gib, s.tokens_per_s_per_gpu, s.tflops_per_gpu) == (gib, round(tps), tflops)
            assert s.mfu == (pytest.approx(mfu / 100) if mfu is not None else None)


def _cited(source: str) -> tuple[str, int, int]:
    """'megatron/training/training.py:2016-2020, 2044 (...)' -> (file, first, last) of its first range."""
    m = re.match(r"([\w/.]+):(\d+)(?:-(\d+))?", source)
    return m[1], int(m[2]), int(m[3] or m[2])


@pytest.mark.skipif(not os.environ.get("MEGATRON_LM"), reason="MEGATRON_LM (a checkout of core_v0.16.1) not given")
def test_megatron_keys_are_printed_at_the_cited_lines():
    """Each key megatron_log.toml reads is printed at the FILE:LINE it cites in the checkout of the tag."""
    from trainplan.parsing import read_toml

    root = Path(os.environ["MEGATRON_LM"])
    d = read_toml(Path(importlib.import_module("trainplan.export.megatron_log").__file__).with_name("megatron_log.toml"))

    def text(source: str) -> str:
        f, first, last = _cited(source)
        return "\n".join((root / f).read_text().splitlines()[first - 1:last])

    for name, k in d["step"]["keys"].items():
        f, first, last = _cited(k["source"])
        lines = (root / f).read_text().splitlines()
        if name == "tflops":  # the key is printed at the second place the source names
            first = last = int(re.search(r", (\d+)", k["source"])[1])
        assert k["key"] in "\n".join(lines[first - 1:last + 2]), (name, k["source"])
    assert "iteration {:8d}/{:8d} |" in text(d["step"]["source"])
    for label in ("memory (MB)", "| allocated: ", "| max allocated: ", "| reserved: ", "| max reserved: ",
                  "[Rank {}] {}"):
        assert label in text(d["memory"]["source"]), label
    args = text(d["arguments"]["source"])
    assert "------------------------ {title} ------------------------" in args and "end of {title}" in args


def test_a_run_logged_to_one_file_per_rank_reads_as_one_log(tmp_path):
    """Megatron's iteration line is the last rank's, report_memory's lines each rank's: in one file
    per rank, the memory of another file's steps is still the step's."""
    lines = MG.read_text().splitlines()
    last, first = tmp_path / "rank7.log", tmp_path / "rank0.log"
    last.write_text("\n".join(x for x in lines if not x.startswith("[Rank ")) + "\n")
    first.write_text("\n".join(x for x in lines if x.startswith("[Rank ")) + "\n")
    whole = read_logs([str(MG)], MG_FMT)
    for order in ([first, last], [last, first]):
        split = read_logs([str(p) for p in order], MG_FMT)
        assert [(s.step, s.peak_allocated_gib, s.peak_reserved_gib) for s in split.steps] == \
               [(s.step, s.peak_allocated_gib, s.peak_reserved_gib) for s in whole.steps]
    assert any(s.peak_reserved_gib for s in whole.steps)
