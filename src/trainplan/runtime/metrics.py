"""Measurements in the planner's units: one JSON line per step, a summary, a progress line.

Field names and units are those of the planner's estimate and of trainplan-validation/1
`measured` (peak_mem_gib, step_time_s, tokens_per_s_per_gpu, tflops_per_gpu, mfu), so that
comparing a run with its plan is a diff of two dicts (`trainplan compare-run`).
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from trainplan.models.spec import ModelSpec
from trainplan.units import GiB

MEASUREMENT_SCHEMA = "trainplan-measurement/1"


def flops_per_token(spec: ModelSpec, seq_len: int, causal: bool = True) -> float:
    """Model FLOPs per trained token with the planner's convention (trainplan.costs.flops: 6N +
    attention, causal attention at half the s x s work, LM head in, recompute out); `causal=False`
    is the Megatron/torchtitan count (the estimate's `mfu_noncausal`)."""
    try:
        from trainplan.costs.flops import model_flops
    except ImportError:  # a trimmed install without the planner's cost models
        return local_flops_per_token(spec, seq_len, causal)
    return model_flops(spec).model_per_token(seq_len, causal=causal)


def local_flops_per_token(spec: ModelSpec, seq_len: int, causal: bool = True) -> float:
    """Fallback with the same convention, from parameter counts:

    1. each matmul weight a token passes costs 2 FLOP forward (multiply + add) and 4 backward
       (grads of input and of weight): 6 * N, N = active parameters outside the embedding table
       (the LM head counts: it is a GEMM; Kaplan et al. 2020, section 2.1; PaLM, appendix B);
    2. attention scores and weighted sum: 2 GEMMs of head_dim per (query, key) pair per head,
       2 FLOP each, x3 with backward: 12 * layers * q_dim * keys, keys = seq/2 causal, seq not.
    Norm weights and biases are counted in N (a rounding error next to the matrices).
    """
    from trainplan.models.params import count_params

    p = count_params(spec)
    n = p.active - p.embedding + (p.embedding if spec.tied_embeddings else 0)
    keys = seq_len / 2 if causal else seq_len
    return 6.0 * n + 12.0 * spec.num_layers * spec.q_dim * keys


@dataclass
class StepRecord:
    schema: str
    step: int
    loss: float | None  # None when not finite (JSON has no NaN): the step was skipped
    lr: float
    grad_norm: float | None
    tokens: int  # tokens in this step, all ranks
    step_time_s: float
    tokens_per_s: float  # all ranks
    tokens_per_s_per_gpu: float
    tflops_per_gpu: float
    mfu: float | None  # None on CPU: no tensor-core peak to divide by
    mfu_noncausal: float | None  # full s x s attention counted (Megatron / torchtitan)
    peak_mem_gib: float | None  # = reserved, as torchtitan's logger and the validation data
    peak_mem_kind: str | None
    peak_allocated_gib: float | None
    peak_reserved_gib: float | None
    skipped: bool = False  # non-finite loss or gradient norm: no update (numerics.py)


def memory_gib(device) -> tuple[float | None, float | None]:
    import torch

    if device.type != "cuda":
        return None, None
    return torch.cuda.max_memory_allocated(device) / GiB, torch.cuda.max_memory_reserved(device) / GiB


def make_record(step: int, loss: float, lr: float, grad_norm: float, tokens: int, step_time_s: float,
                world: int, flops_tok: tuple[float, float], peak_flops: float | None, device,
                skipped: bool = False) -> StepRecord:
    """flops_tok: (causal, non-causal) model FLOPs per token; peak_flops: one GPU's dense peak."""
    tps = tokens / step_time_s
    per_gpu = tps / world
    achieved = per_gpu * flops_tok[0]
    alloc, reserved = memory_gib(device)
    return StepRecord(
        schema=MEASUREMENT_SCHEMA, step=step, loss=_finite(loss), lr=lr, grad_norm=_finite(grad_norm), tokens=tokens,
        step_time_s=step_time_s, tokens_per_s=tps, tokens_per_s_per_gpu=per_gpu,
        tflops_per_gpu=achieved / 1e12, mfu=(achieved / peak_flops) if peak_flops else None,
        mfu_noncausal=(per_gpu * flops_tok[1] / peak_flops) if peak_flops else None,
        peak_mem_gib=reserved, peak_mem_kind="reserved" if reserved is not None else None,
        peak_allocated_gib=alloc, peak_reserved_gib=reserved, skipped=skipped,
    )


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


class Recorder:
    """Rank 0's writer: JSONL per step, optional TensorBoard, a progress line on stderr."""

    def __init__(self, out_dir: Path, total_steps: int, tensorboard: str | None, progress: bool,
                 resumed_at: int = 0):
        self.path = out_dir / "measurements.jsonl"
        self.total = total_steps
        # A fresh run starts the file anew. A resumed run keeps the interrupted run's records up to
        # the step it restored and drops the later ones: it runs those steps again, and the file
        # must hold each step once.
        kept = [r for r in read_records(self.path) if r["step"] <= resumed_at] if resumed_at and self.path.is_file() else []
        self._f = open(self.path, "w")  # noqa: SIM115 - open for the whole run
        self._f.writelines(json.dumps(r) + "\n" for r in kept)
        self._f.flush()
        self._tty = progress and sys.stderr.isatty()
        self._quiet = not progress
        self._tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=tensorboard)
        self._start = time.perf_counter()

    def write(self, r: StepRecord) -> None:
        self._f.write(json.dumps(asdict(r)) + "\n")
        self._f.flush()
        if self._tb is not None:
            for k in ("loss", "lr", "grad_norm", "step_time_s", "tokens_per_s_per_gpu", "mfu", "peak_mem_gib"):
                v = getattr(r, k)
                if v is not None:
                    self._tb.add_scalar(k, v, r.step)
        self._progress(r)

    def _progress(self, r: StepRecord) -> None:
        if self._quiet:
            return
        loss = f"{r.loss:.4f}" if r.loss is not None else "not finite (update skipped)"
        text = (f"step {r.step}/{self.total} loss {loss} lr {r.lr:.2e} "
                f"{r.tokens_per_s_per_gpu:,.0f} tok/s/gpu {r.step_time_s * 1e3:.0f} ms"
                + (f" mfu {r.mfu:.1%}" if r.mfu is not None else "")
                + (f" mem {r.peak_mem_gib:.1f} GiB" if r.peak_mem_gib is not None else ""))
        if self._tty:
            width = 20
            done = int(width * r.step / max(self.total, 1))
            sys.stderr.write(f"\r[{'#' * done}{'.' * (width - done)}] {text}\x1b[K")
            if r.step >= self.total:
                sys.stderr.write("\n")
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()

    def close(self) -> None:
        self._f.close()
        if self._tb is not None:
            self._tb.close()


def summarize(records: list[dict], warmup: int = 1) -> dict:
    """Run summary: first/last loss, and the medians of the timing fields after `warmup` steps
    (the first steps pay for allocation, compilation and cache warm-up)."""
    import statistics

    if not records:  # nothing ran (a resume at or past the last step)
        return {"steps": None, "first_loss": None, "last_loss": None}
    steady = records[warmup:] or records

    def med(k):
        vals = [r[k] for r in steady if r.get(k) is not None]
        return statistics.median(vals) if vals else None

    def peak(k):
        vals = [r[k] for r in records if r.get(k) is not None]
        return max(vals) if vals else None

    finite = [r["loss"] for r in records if r.get("loss") is not None]
    return {
        "steps": records[-1]["step"],
        "first_loss": finite[0] if finite else None,
        "last_loss": finite[-1] if finite else None,
        "skipped_steps": sum(1 for r in records if r.get("skipped")),
        "step_time_s": med("step_time_s"),
        "tokens_per_s": med("tokens_per_s"),
        "tokens_per_s_per_gpu": med("tokens_per_s_per_gpu"),
        "tflops_per_gpu": med("tflops_per_gpu"),
        "mfu": med("mfu"),
        "mfu_noncausal": med("mfu_noncausal"),
        "peak_mem_gib": peak("peak_mem_gib"),
        "peak_mem_kind": records[-1].get("peak_mem_kind"),
        "peak_allocated_gib": peak("peak_allocated_gib"),
        "peak_reserved_gib": peak("peak_reserved_gib"),
    }


def resume_line(checkpoint: str | Path, start: int, total: int) -> str:
    """What rank 0 says when a run restores a checkpoint, before its first step."""
    todo = (f"steps {start + 1}-{total} to run" if total > start + 1 else f"step {total} to run"
            if total > start else f"nothing to run before --steps {total}")
    return f"resuming from {checkpoint} at step {start}: {todo}"


def steps_ran(summary: dict) -> str:
    """The steps a run did, counted from the step it started at (a resumed run does not count the
    steps of the run it resumed): '11 steps (11-21, resumed at step 10)', '10 steps'."""
    start, reached = summary.get("start_step") or 0, summary["steps"]
    ran = f"{reached - start} step{'s' if reached - start != 1 else ''}"
    return f"{ran} ({start + 1}-{reached}, resumed at step {start})" if start else ran


def read_records(path: str | Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
