"""The training loop: execute a Plan as it is and record what happened, in the planner's units."""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from trainplan.errors import TrainplanError
from trainplan.runtime import (
    checkpoint,
    context,
    distributed,
    faults,
    metrics,
    moe,
    parallel,
    preflight,
)
from trainplan.runtime.build import build_model
from trainplan.runtime.data import make_batches
from trainplan.runtime.distributed import RunStopped
from trainplan.runtime.numerics import DEFAULT_MAX_IN_ROW, NonFiniteGuard
from trainplan.runtime.optim import make_optimizer, retarget
from trainplan.runtime.progress import StepProgress
from trainplan.runtime.signals import StopSignals
from trainplan.runtime.world import fit_to_world
from trainplan.supports import check_own_model, check_runnable


@dataclass(frozen=True)
class RunOptions:
    out: Path
    steps: int | None = None  # None: plan.train.steps
    checkpoint_dir: Path | None = None  # None: no checkpoints
    tensorboard: str | None = None
    data: str | None = None  # None: plan.train.data
    tokenizer: str | None = None
    hf: bool = False  # build the Hugging Face model from plan.hf_config
    fit_world: bool = False
    progress: bool = True
    stop_at_step: int | None = None  # save and stop after this step (tests; a planned interruption)
    model_dir: str | None = None  # write the final model here (SageMaker: SM_MODEL_DIR)
    device: str | None = None  # "cuda" | "cpu" | None: preflight.choose_device
    gpu_plan: bool = False  # a plan made for GPUs (not the demo): refused on CPU unless device="cpu"
    max_nonfinite: int = DEFAULT_MAX_IN_ROW  # non-finite steps in a row that stop the run
    keep_checkpoints: int = preflight.DEFAULT_KEEP


def peak_flops_for(device: torch.device, plan) -> tuple[float | None, str]:
    """Dense peak of the GPU the run is on that MFU is quoted against (precision.mfu_peak, the
    estimate's denominator: the bf16 dense peak for every recipe); the plan's GPU when the device
    name is not in the catalog; None on CPU."""
    if device.type != "cuda":
        return None, ""
    from trainplan.hardware import gpus
    from trainplan.precision import mfu_peak

    words = torch.cuda.get_device_name(device).lower().replace("-", " ").split()
    for g in gpus().values():
        tag = g.name.split("-")[0]  # "h200", "b200", "a100"
        if tag in words:
            return mfu_peak(g), g.name
    return mfu_peak(plan.job.cluster.gpu), plan.job.cluster.gpu.name


def forward_backward(model, scaler, data, step: int, grad_accum: int, forward_ctx, device,
                     progress: StepProgress | None = None) -> torch.Tensor:
    """grad_accum micro-batches of step `step` (0-based) forward and backward; returns this
    rank's loss (a tensor, mean over its micro-batches). `progress` hears of each micro-batch
    done (a pipeline schedule runs them all in one call: no progress within its step)."""
    pipe = getattr(model, "pipe", None)  # pp > 1: build.build_model attached the schedule
    poison = faults.active("nan", step + 1)  # tests: a NaN loss, hence NaN gradients
    if pipe is not None:
        # The schedule splits the rank's whole batch into grad_accum micro-batches itself.
        pipe.scaler_ref[0] = scaler
        if scaler is not None:  # only the last stage scales a loss; this creates the scale on every rank
            scaler.scale(torch.zeros((), device=device))
        xs, ys = zip(*(data.micro(step, micro) for micro in range(grad_accum)))
        return pipe.forward_backward(torch.cat(xs).to(device), torch.cat(ys).to(device), forward_ctx)
    loss_sum = torch.zeros((), device=device, dtype=torch.float32)
    cp_mesh = getattr(model, "cp_mesh", None)  # cp > 1: this rank's part of each sequence
    for micro in range(grad_accum):
        x, y = (t.to(device, non_blocking=True) for t in data.micro(step, micro))
        with context.sequence_shard(cp_mesh, x, y) as extra:
            with forward_ctx():
                loss = model(x, y, **extra) / grad_accum
            if poison:
                loss = loss * float("nan")
            (scaler.scale(loss) if scaler is not None else loss).backward()
        loss_sum += loss.detach()
        if progress is not None:
            progress.done(micro + 1)
    return loss_sum


def clip(model, optimizer, scaler, grad_clip: float) -> float:
    """Unscale (fp16) and clip; returns the global gradient norm (the same on every rank)."""
    pipe = getattr(model, "pipe", None)
    if scaler is not None:
        scaler.unscale_(optimizer)
    return distributed.clip_grad_norm(model.parameters(), grad_clip, pipe.group if pipe else None,
                                      pipe.tied_copy if pipe else None)


def update(model, optimizer, scheduler, scaler, skip: bool = False) -> float:
    """The optimizer step (none when `skip`: a non-finite step), then the schedule; returns the lr
    used. A skipped step still advances the schedule, as the data does (and as torch's GradScaler
    does when it skips)."""
    if scaler is not None:
        if not skip:
            scaler.step(optimizer)
        scaler.update()  # an inf/nan found by unscale_ backs the scale off either way
    elif not skip:
        optimizer.step()
    # Aux-free MoE balancing, from the step's routing loads; a skipped step leaves the bias too.
    moe.update_expert_bias(model, skip=skip)
    lr = scheduler.get_last_lr()[0]
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return lr


def train_step(model, optimizer, scheduler, scaler, data, step: int, grad_accum: int, grad_clip: float,
               forward_ctx, device) -> tuple[torch.Tensor, float, float]:
    """One optimizer step (0-based `step`): grad_accum micro-batches, unscale (fp16), clip, step.
    Returns (this rank's loss as a tensor, global grad norm, the lr used)."""
    loss_sum = forward_backward(model, scaler, data, step, grad_accum, forward_ctx, device)
    grad_norm = clip(model, optimizer, scaler, grad_clip)
    return loss_sum, grad_norm, update(model, optimizer, scheduler, scaler)


def make_scaler(precision: str, device: torch.device, fsdp: bool):
    """fp16 needs dynamic loss scaling (Micikevicius et al. 2018, section 3.2); under FSDP the
    sharded scaler finds inf/nan across all ranks' gradient shards."""
    from trainplan.precision import recipe

    if not recipe(precision).loss_scaling:
        return None
    if not fsdp:
        return torch.amp.GradScaler(device.type)
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    return ShardedGradScaler(device=device.type)


def train(plan, opts: RunOptions) -> dict:
    """Run `plan` in this process (one rank of torchrun). Returns the run summary on rank 0 (also
    written to <out>/summary.json), {} on the other ranks. Raises RunStopped (every rank) for a
    stop the ranks agreed on: non-finite steps, a failed save, no usable checkpoint."""
    stop = StopSignals()  # first: a Ctrl-C while the model builds still ends in a clean save
    kind = preflight.choose_device(opts.device, opts.gpu_plan, torch.cuda.is_available())
    # Refused before any process group or allocation: the trainer runs exactly what was costed.
    check_runnable(plan.layout, kind, plan.job.model)
    preflight.check_scan_kernels(plan.job.model, kind)
    if not opts.hf:
        check_own_model(plan.job.model)
    device = distributed.init(kind)
    rank, world = dist.get_rank(), dist.get_world_size()
    if opts.fit_world:
        plan = fit_to_world(plan, world)
    L, w = plan.layout, plan.job.workload
    total = opts.steps or plan.train.steps
    if total <= 0:
        raise TrainplanError("steps must be positive (train.steps in the plan, or --steps)")
    size = checkpoint.expected_size(plan, world, opts.hf)
    one_checkpoint = size.total
    if opts.checkpoint_dir:  # seconds after start, not at the first save
        error = None
        if int(os.environ.get("LOCAL_RANK", "0")) == 0:
            try:
                preflight.check_checkpoint_dir(opts.checkpoint_dir, size, opts.keep_checkpoints)
            except TrainplanError as e:
                error = str(e)
        if error := distributed.agree(error):
            raise RunStopped(error)

    mesh = parallel.build_mesh(L, world, device.type)
    dp_rank = mesh["dp_replicate"].get_local_rank() * L.dp_shard + mesh["dp_shard"].get_local_rank()
    model, fsdp = build_model(plan, mesh, device, opts.hf)
    optimizer, scheduler = make_optimizer(model, plan.train, total)
    scaler = make_scaler(L.precision, device, fsdp)
    vocab = plan.job.model.vocab_size
    if opts.hf and plan.hf_config:
        vocab = int(plan.hf_config.get("vocab_size", vocab))
    data = make_batches(opts.data if opts.data is not None else plan.train.data, opts.tokenizer, vocab,
                        w.seq_len, L.micro_batch, L.grad_accum, L.dp, dp_rank, total)

    start = 0
    resumed_from, skipped_checkpoints = checkpoint.restore_point(opts.checkpoint_dir)
    if resumed_from is not None:
        start = checkpoint.load(resumed_from, model, optimizer, scheduler, scaler)
        retarget(scheduler, start, total)
        if rank == 0:
            print(metrics.resume_line(resumed_from, start, total), file=sys.stderr, flush=True)

    if rank == 0:
        opts.out.mkdir(parents=True, exist_ok=True)
        (opts.out / "plan.json").write_text(plan.to_json())
    recorder = None
    if rank == 0:
        recorder = metrics.Recorder(opts.out, total, opts.tensorboard, opts.progress, resumed_at=start)
    flops_tok = (metrics.flops_per_token(plan.job.model, w.seq_len),
                 metrics.flops_per_token(plan.job.model, w.seq_len, causal=False))
    peak, peak_gpu = peak_flops_for(device, plan)
    tokens_per_step = w.global_batch * w.seq_len
    forward_ctx = parallel.forward_context(L.precision, L.ac, device.type, fsdp)
    guard = NonFiniteGuard(opts.max_nonfinite, check_grad_norm=scaler is None)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    within_step = StepProgress(opts.progress and rank == 0 and L.grad_accum > 1, sync=sync)
    saved_at, stopped_by, error = None, None, None
    last_good = resumed_from.name if resumed_from is not None else None  # the newest checkpoint written or loaded
    before_streak = None  # last_good when the current streak of non-finite steps began

    step = start
    loop_start = time.perf_counter()
    while step < total:
        faults.at_step_start(step + 1)
        t0 = time.perf_counter()
        within_step.start(step + 1, L.grad_accum)
        loss_sum = forward_backward(model, scaler, data, step, L.grad_accum, forward_ctx, device, within_step)
        grad_norm = clip(model, optimizer, scaler, plan.train.grad_clip)
        mean_loss, signals = distributed.reduce_step(loss_sum.item(), tuple(stop.received), device)
        step += 1
        skip = guard.skip(step, mean_loss, grad_norm)
        lr = update(model, optimizer, scheduler, scaler, skip)
        dt = time.perf_counter() - t0
        if recorder is not None and (skip or step % plan.train.log_every == 0 or step == total):
            recorder.write(metrics.make_record(step, mean_loss, lr, grad_norm, tokens_per_step, dt, world,
                                               flops_tok, peak, device, skipped=skip))
        if skip and guard.in_row == 1:  # a streak begins: what came before it is worth keeping
            before_streak = last_good
            if opts.checkpoint_dir and last_good:
                checkpoint.pin(opts.checkpoint_dir, last_good, f"last checkpoint before the non-finite step {step}")
        if guard.exhausted:
            kept = before_streak and str(opts.checkpoint_dir / before_streak)
            stopped_by, error = "non-finite", guard.message(step, kept)
            break
        signal_name = StopSignals.name(signals)
        due = plan.train.checkpoint_every and step % plan.train.checkpoint_every == 0
        interrupted = signal_name or (opts.stop_at_step is not None and step >= opts.stop_at_step)
        if opts.checkpoint_dir and (due or interrupted or step == total):
            try:
                saved = checkpoint.save(opts.checkpoint_dir, step, model, optimizer, scheduler, scaler,
                                        opts.keep_checkpoints, one_checkpoint)
            except RunStopped as e:
                stopped_by, error = "save failed", str(e)
                break
            saved_at, last_good = str(saved), saved.name
        if interrupted:
            stopped_by = signal_name or "stop_at_step"
            break

    loop_time_s = time.perf_counter() - loop_start  # everything: steps, logging, checkpoints
    model_file = None
    if opts.model_dir and stopped_by is None:
        model_file = checkpoint.export_model(model, opts.model_dir)
    if recorder is not None:
        recorder.close()
    summary = {}
    if rank == 0:
        records = metrics.read_records(recorder.path)
        summary = {
            **metrics.summarize([r for r in records if r["step"] > start]),
            "steps": step,  # the step reached (= the last record's, or the checkpoint's if none ran)
            "start_step": start,  # the step it resumed at (0: a fresh run); steps - start_step ran
            "loop_time_s": loop_time_s,
            "resumed_from": str(resumed_from) if resumed_from else None,
            "skipped_checkpoints": skipped_checkpoints,
            "stopped_by": stopped_by,
            "error": error,
            "checkpoint": saved_at,
            "model_file": str(model_file) if model_file else None,
            "measurements": str(recorder.path),
            "world_size": world,
            "device": str(device.type),
            "peak_flops_gpu": peak_gpu or None,
            "flops_per_token": flops_tok[0],
            "layout": L.short(),
            "precision": L.precision,
            "model": plan.job.model.name,
        }
        (opts.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    distributed.shutdown()
    if error:
        raise RunStopped(error)
    return summary


def sagemaker_defaults() -> dict:
    """SageMaker training containers set SM_* variables: checkpoints go to /opt/ml/checkpoints
    (synced to the job's checkpoint S3 URI, restored on a spot restart), the final model to
    SM_MODEL_DIR, other outputs to SM_OUTPUT_DATA_DIR."""
    env = os.environ
    if not any(k in env for k in ("SM_MODEL_DIR", "SM_TRAINING_ENV", "SM_CURRENT_HOST")):
        return {}
    return {
        "checkpoint_dir": "/opt/ml/checkpoints",
        "model_dir": env.get("SM_MODEL_DIR", "/opt/ml/model"),
        "out": env.get("SM_OUTPUT_DATA_DIR", "/opt/ml/output/data"),
    }

