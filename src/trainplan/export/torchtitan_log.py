"""torchtitan 0.3.0's training log read as steps (export/logs.py): the per-step line of
MetricsProcessor.log and the device line, with the colour codes dropped; every pattern and its
FILE:LINE in torchtitan_log.toml."""

from __future__ import annotations

import functools
import re
from pathlib import Path

from trainplan.errors import TrainplanError
from trainplan.export.logs import NONCAUSAL, Log, Step, number
from trainplan.export.torchtitan import FRAMEWORK, RELEASE
from trainplan.parsing import read_toml

__all__ = ["FRAMEWORK", "RELEASE", "parse"]


@functools.cache
def _data() -> dict:
    d = read_toml(Path(__file__).with_name("torchtitan_log.toml"))
    return {"colors": re.compile(d["colors"]["pattern"]), "marker": re.compile(d["step"]["marker"]),
            "step": re.compile(d["step"]["pattern"]), "device": re.compile(d["device"]["pattern"]),
            "source": d["step"]["source"]}


def parse(lines, where: str) -> Log:
    d = _data()
    log = Log(FRAMEWORK, RELEASE, NONCAUSAL)
    for n, raw in enumerate(lines, 1):
        line = d["colors"].sub("", raw.rstrip("\n"))
        if log.device_name is None and (m := d["device"].search(line)):
            log.device_name, log.device_kind, log.device_gib = m["name"].strip(), m["kind"].lower(), float(m["gib"])
            continue
        if not d["marker"].search(line):
            continue
        m = d["step"].search(line)
        at = f"{where}:{n}"
        if m is None:
            raise TrainplanError(f"{at}: a step line that does not read as torchtitan {RELEASE}'s "
                                 f"({d['source']}): {line.strip()[:120]!r}")
        mfu = None if m["mfu"] == "N/A" else number(m["mfu"].rstrip("%"), at, "mfu") / 100
        # torchtitan updates on a non-finite loss too (no skip): the record says loss None, not skipped
        log.steps.append(Step(
            step=int(m["step"]), line=n, loss=number(m["loss"], at, "loss"),
            grad_norm=number(m["grad_norm"], at, "grad_norm"),
            tokens_per_s_per_gpu=number(m["tps"], at, "tps"), tflops_per_gpu=number(m["tflops"], at, "tflops"),
            mfu=mfu, peak_reserved_gib=number(m["reserved_gib"], at, "memory"),  # GiB of 2**30 bytes, as the planner's
        ))
    return log
