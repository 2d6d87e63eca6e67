"""Megatron-LM's training log at megatron-core 0.16.1 (tag core_v0.16.1) read as steps
(export/logs.py): training_log's iteration line, report_memory's lines and the `arguments` block;
every pattern, key and its FILE:LINE in megatron_log.toml."""

from __future__ import annotations

import functools
import re
from pathlib import Path

from trainplan.errors import TrainplanError
from trainplan.export.logs import CAUSAL, Log, Step, number
from trainplan.export.megatron import FRAMEWORK, RELEASE
from trainplan.parsing import read_toml

__all__ = ["FRAMEWORK", "RELEASE", "parse"]
MiB_PER_GiB = 1024.0  # report_memory divides bytes by 1024 * 1024 (megatron_log.toml [memory])
REQUIRED = ("step_time_ms", "global_batch")  # without these an iteration line says nothing to measure


@functools.cache
def _data() -> dict:
    d = read_toml(Path(__file__).with_name("megatron_log.toml"))
    a = d["arguments"]
    return {
        "marker": re.compile(d["step"]["marker"]), "step": re.compile(d["step"]["pattern"]),
        "segment": re.compile(d["step"]["segment"]), "source": d["step"]["source"],
        "keys": {v["key"]: k for k, v in d["step"]["keys"].items()},
        "memory": re.compile(d["memory"]["pattern"]),
        "begin": re.compile(a["begin"]), "end": re.compile(a["end"]), "argument": re.compile(a["pattern"]),
        "facts": {a[k]: k for k in ("world_size", "seq_len", "global_batch")},
    }


def parse(lines, where: str) -> Log:
    d = _data()
    log = Log(FRAMEWORK, RELEASE, CAUSAL)
    in_args = False
    for n, raw in enumerate(lines, 1):
        line = raw.rstrip("\n")
        at = f"{where}:{n}"
        if in_args:
            if d["end"].search(line):
                in_args = False
            elif (m := d["argument"].search(line)) and m["name"] in d["facts"] and m["value"] != "None":
                setattr(log, d["facts"][m["name"]], int(number(m["value"], at, m["name"])))
            continue
        if d["begin"].search(line):
            in_args = True
        elif m := d["memory"].search(line):
            it, was = int(m["step"]), log.memory.get(int(m["step"]), (0.0, 0.0))
            log.memory[it] = (max(was[0], float(m["max_allocated"]) / MiB_PER_GiB),
                              max(was[1], float(m["max_reserved"]) / MiB_PER_GiB))
        elif d["marker"].search(line):
            log.steps.append(_step(line, n, at, d))
    return log


def _step(line: str, n: int, at: str, d: dict) -> Step:
    m = d["step"].search(line)
    if m is None:
        raise TrainplanError(f"{at}: an iteration line that does not read as Megatron-LM {RELEASE}'s "
                             f"({d['source']}): {line.strip()[:120]!r}")
    got = {}
    for seg in m["rest"].split("|"):
        if not seg.strip():
            continue
        s = d["segment"].match(seg)
        if s is None:
            raise TrainplanError(f"{at}: {seg.strip()!r} is not 'key: number' as training_log prints it "
                                 f"({d['source']})")
        if s["key"] in d["keys"]:
            got[d["keys"][s["key"]]] = number(s["value"], at, s["key"])
    if missing := [d_key for d_key, v in d["keys"].items() if v in REQUIRED and v not in got]:
        raise TrainplanError(f"{at}: an iteration line without {', '.join(repr(k) for k in missing)} "
                             f"({d['source']})")
    return Step(
        step=int(m["step"]), line=n, loss=got.get("loss"), lr=got.get("lr"), grad_norm=got.get("grad_norm"),
        global_batch=int(got["global_batch"]), step_time_s=got["step_time_ms"] / 1e3,
        tflops_per_gpu=got.get("tflops"), skipped=got.get("skipped", 0) > 0 or got.get("nan", 0) > 0,
    )
