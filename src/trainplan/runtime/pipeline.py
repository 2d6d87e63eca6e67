"""Pipeline parallelism with torch.distributed.pipelining, for trainplan's own Decoder.

The model is cut into pp * vp chunks of consecutive layers by the planner's own split
(models/stages.py, which the memory model calls too; the layout's uneven options included): chunk 0 also holds the embeddings, the last
chunk the final norm and the LM head; rank r of the pipeline holds chunks r, r + pp, r + 2 pp, ...
Each chunk is a Decoder with the parts it does not hold set to None (model.Decoder.forward
documents how a stage runs), so parameter names are those of the whole model: checkpoints keep
the whole model's keys, and init (runtime/init.py, seeded by name) gives every parameter the
value it has without pipelining.

Schedules (layout.pp_schedule; Narayanan et al. 2021 for 1F1B and interleaving, Huang et al.
2019 for GPipe): 1f1b -> Schedule1F1B, gpipe -> ScheduleGPipe, interleaved -> ScheduleInterleaved1F1B
(ScheduleLoopedBFS when the micro-batch count does not fit its rounds). The schedule splits each
rank's batch of micro_batch * grad_accum sequences into grad_accum micro-batches (the plan's
grad_accum counts micro-batches per stage) and scales gradients by 1/grad_accum, which makes the
step the same mean loss as gradient accumulation without pipelining.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from trainplan.models.stages import EVEN, Uneven, pipeline_chunks, rank_chunks


def split_decoder(model: nn.Module, chunks: list[int], pp: int, vp: int = 1,
                  uneven: Uneven = EVEN) -> list[nn.Module]:
    """The given chunks of a meta-device Decoder, each a pruned deep copy (cheap on meta). A chunk
    may hold no layer when the embedding or the loss counts as one in the split (models/stages.py)."""
    ranges = pipeline_chunks(len(model.layers), pp, vp, uneven)
    num_chunks = pp * vp
    parts = []
    for c in chunks:
        part = copy.deepcopy(model)
        keep = {str(i) for i in ranges[c]}
        for key in list(part.layers.keys()):
            if key not in keep:
                del part.layers[key]
        if c > 0:
            part.tok_embeddings = None
            part.pos_embeddings = None
        if c < num_chunks - 1:
            part.norm = None
            part.output = None
        elif c > 0 and part.output is None:
            # Tied embeddings: the last stage holds its own copy of the embedding as the LM head,
            # kept equal to the first stage's by summing the two gradients (tied_grad_sync), as
            # Megatron-LM does (Narayanan et al. 2021, section 3.2's embedding all-reduce).
            with torch.device("meta"):
                part.output = nn.Linear(part.spec.hidden_size, part.spec.vocab_size, bias=False)
        parts.append(part)
    return parts


def stage_shapes(part: nn.Module, chunk: int, num_chunks: int, micro_batch: int, act_dtype: torch.dtype) -> dict:
    """What a stage receives and sends, as meta tensors (PipelineStage's static mode): token ids
    into the first chunk, hidden states between chunks, logits out of the last. Without them
    torch infers the shapes on the first step by running every later stage on an uninitialised
    buffer (pipelining TensorMeta.to_tensor: "an empty strided tensor"), and an MoE layer routes
    that garbage: its tp ranks can pick different experts and break their collectives, and the
    aux-free balancing would count the garbage routing as load."""
    seq, spec = part.max_seq_len, part.spec
    # Under sequence parallel the hidden states between stages are this tp rank's sequence shard
    # (tp divides the sequence: layout.check_layout); token ids in and logits out stay whole.
    sp = getattr(part, "sp_mesh", None)
    hidden_seq = seq // sp.size() if sp is not None else seq

    def meta(*shape, dtype=act_dtype, grad=True):
        return torch.empty(shape, dtype=dtype, device="meta").requires_grad_(grad)

    inputs = (meta(micro_batch, seq, dtype=torch.long, grad=False) if chunk == 0
              else meta(micro_batch, hidden_seq, spec.hidden_size))
    outputs = (meta(micro_batch, seq, spec.vocab_size) if chunk == num_chunks - 1
               else meta(micro_batch, hidden_seq, spec.hidden_size))
    return {"input_args": inputs, "output_args": outputs}


def tied_group(mesh, pp: int):
    """The process group of {first stage, last stage} of this rank's pipeline (the same position
    on the other mesh dimensions), for the tied embedding's gradient sum. Collective: every rank
    creates every such group, in the same order."""
    import torch.distributed as dist

    ranks = mesh.mesh.reshape(pp, -1)
    me, mine = dist.get_rank(), None
    for j in range(ranks.shape[1]):
        pair = [int(ranks[0, j]), int(ranks[-1, j])]
        g = dist.new_group(pair)
        if me in pair:
            mine = g
    return mine


def tied_grad_sync(param: nn.Parameter, group) -> None:
    """Sum the tied embedding's gradient over its two copies (first and last stage). Both copies
    are sharded alike over the data-parallel mesh, so the local shards line up."""
    import torch.distributed as dist

    grad = param.grad
    if grad is None:
        return
    dist.all_reduce(grad.to_local() if hasattr(grad, "to_local") else grad, group=group)


def rank_view(parts: list[nn.Module]) -> nn.Module:
    """One module holding every parameter of this rank's chunks under the whole model's names
    (the optimizer, gradient clipping and checkpoints see this); it shares the chunks' modules
    and is never run."""
    view = copy.deepcopy(parts[0]).to("meta")
    view.layers = nn.ModuleDict({k: v for p in parts for k, v in p.layers.items()})
    for name in ("tok_embeddings", "pos_embeddings", "norm", "output"):
        setattr(view, name, next((getattr(p, name) for p in parts if getattr(p, name) is not None), None))
    return view


@dataclass
class Pipeline:
    """This rank's stages and schedule. `step` runs one optimizer step's forward and backward."""

    schedule: object
    stages: list
    parts: list[nn.Module]
    group: object  # the pp process group
    is_last: bool
    scaler_ref: list  # [fp16 grad scaler or None]: the loss is scaled before backward
    tied: nn.Parameter | None = None  # this rank's copy of a tied embedding (first or last stage)
    tied_group: object = None
    tied_copy: nn.Parameter | None = None  # the last stage's copy: counted once in the grad norm

    def forward_backward(self, x: torch.Tensor, y: torch.Tensor, forward_ctx) -> torch.Tensor:
        """Run the schedule on this data-parallel rank's whole batch; returns the mean loss over
        its micro-batches, the same on every rank of the pipeline (a sum over the pp group, where
        only the last stage holds losses)."""
        losses: list = []  # the schedule's per-micro-batch loss_fn values (last stage only)
        with forward_ctx():
            if self.stages[0].is_first:
                self.schedule.step(x, target=y, losses=losses, return_outputs=False)
            else:
                self.schedule.step(target=y, losses=losses, return_outputs=False)
        if self.is_last:
            scaler = self.scaler_ref[0]
            loss = torch.stack([t.detach() for t in losses]).mean().float()
            if scaler is not None:  # loss_fn returned the fp16-scaled loss
                loss = loss / scaler.get_scale()
        else:
            loss = torch.zeros((), device=x.device, dtype=torch.float32)
        torch.distributed.all_reduce(loss, group=self.group)
        if self.tied is not None:
            tied_grad_sync(self.tied, self.tied_group)
        return loss


def make_schedule(layout, stages, loss_fn):
    from torch.distributed.pipelining import (
        Schedule1F1B,
        ScheduleGPipe,
        ScheduleInterleaved1F1B,
        ScheduleLoopedBFS,
    )

    n = layout.grad_accum
    if layout.pp_schedule == "gpipe":
        return ScheduleGPipe(stages[0], n, loss_fn=loss_fn)
    if layout.pp_schedule == "1f1b" and layout.vp == 1:
        return Schedule1F1B(stages[0], n, loss_fn=loss_fn)
    # interleaved: the flexible Interleaved1F1B needs grad_accum to be a multiple of its rounds
    # (max(1, grad_accum // pp)); otherwise breadth-first looping runs any count.
    rounds = max(1, n // layout.pp)
    if n % rounds == 0:
        return ScheduleInterleaved1F1B(stages, n, loss_fn=loss_fn)
    return ScheduleLoopedBFS(stages, n, loss_fn=loss_fn)


def build_pipeline(model: nn.Module, layout, mesh, device: torch.device):
    """Cut a meta-device Decoder into this rank's chunks. Returns (chunks, make) where make()
    builds the PipelineStages and the schedule once the chunks hold real weights (after FSDP and
    init)."""
    pp, vp = layout.pp, layout.vp
    pp_mesh = mesh["pp"]
    pp_rank = pp_mesh.get_local_rank()
    tied_pg = tied_group(mesh, pp) if model.spec.tied_embeddings else None
    chunks = rank_chunks(pp_rank, pp, vp)
    parts = split_decoder(model, chunks, pp, vp, layout.uneven)
    scaler_ref: list = [None]  # the fp16 grad scaler, set by the trainer (Pipeline.scaler_ref)

    def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        # The same fp32 cross-entropy as loss.lm_loss; the schedule averages over micro-batches.
        loss = F.cross_entropy(logits.float().flatten(0, -2), labels.flatten())
        scaler = scaler_ref[0]
        return scaler.scale(loss) if scaler is not None else loss

    def make(act_dtype: torch.dtype) -> Pipeline:
        """`act_dtype`: the dtype of the activations between stages (and of the logits), which
        FSDP's mixed-precision policy or the parameters themselves set (build.py)."""
        from torch.distributed.pipelining import PipelineStage

        group = pp_mesh.get_group()
        stages = [PipelineStage(part, c, pp * vp, device, group=group,
                                **stage_shapes(part, c, pp * vp, layout.micro_batch, act_dtype))
                  for part, c in zip(parts, chunks)]
        schedule = make_schedule(layout, stages, loss_fn)
        pipe = Pipeline(schedule, stages, parts, group, chunks[-1] == pp * vp - 1, scaler_ref)
        if tied_pg is not None:
            first = next((p.tok_embeddings.weight for p in parts if p.tok_embeddings is not None), None)
            last = next((p.output.weight for p in parts if p.norm is not None), None)
            pipe.tied, pipe.tied_group, pipe.tied_copy = first if first is not None else last, tied_pg, last
        return pipe

    return parts, make
