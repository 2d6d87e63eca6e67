"""Model states per GPU: parameters, gradients, master weights and optimizer states.

Three state layouts exist; `layout.sharding` says what is sharded, and for zero1 the stack's
`zero1` convention (stacks.toml, read through stacks.conventions) says whose ZeRO-1 runs. How
activations, fp8 copies, gradient dtypes and the loss are kept are the stack's conventions too,
never inferred from sharding (costs/memory.py):

* Megatron (sharding none / zero1 / zero2): bf16 weights (2 bytes/param) + fp32 main gradients (4)
  + fp32 master weights (4) + AdamW m and v (8) = 18 bytes/param. The distributed optimizer (zero1)
  shards master weights and optimizer states over the data-parallel group: 6 + 12/DP
  (Megatron-LM docs/source/api-guide/dist_optimizer.md, "bytes per parameter" table). zero2 also
  shards the fp32 gradients: 2 + 16/DP, plus one layer's fp32 gradient bucket being reduced
  (Rajbhandari et al. 2020, ZeRO, section 5.2 P_os+g, with Megatron's fp32 main gradients).
* FSDP2 (sharding fsdp; HSDP when dp_replicate > 1): the sharded fp32 parameters are the master
  copy, gradients are reduce-scattered to fp32 shards, AdamW adds 8: 16 bytes/param/shard
  (torchtitan, MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)). On top: the unsharded
  bf16 parameters of the units in flight (the current block and the prefetched next one) and,
  in backward, the unsharded gradients of the current block with their fp32 reduce-scatter input.
* torch ZeRO-1 (sharding zero1 under a stack whose zero1 convention is zero_redundancy: trainplan's
  trainer, runtime/parallel.apply_zero1: DDP + torch.distributed.optim.ZeroRedundancyOptimizer): the parameters keep their storage dtype and are
  the master copy, whole on every rank (fp32: 4); DDP's gradient buckets are the .grad tensors,
  whole on every rank, in the parameters' dtype (4); AdamW states for the rank's shard only (8/DP):
  8 + 8/DP bytes/param. autocast casts each weight to bf16 per use and keeps the copies it saved
  for backward: 2 more at the backward peak. The distributed_optimizer convention is Megatron's
  (6 + 12/DP above).

Pure bf16 keeps weights, gradients and AdamW states in bf16 (2 + 2 + 4 = 8 bytes/param) under
either convention. The bytes per element of each state are the recipe's (recipes.toml: param_bytes,
grad_bytes, master_bytes, optimizer_bytes per AdamW moment); the numbers above are bf16 mixed's. Data-parallel sharding runs over dp_shard * cp (torchtitan's fsdp mesh and
Megatron's data-parallel-with-context-parallel group); a layer's routed experts are divided over
ep * etp ranks and their states sharded over the edp_shard ranks of the expert folding
(layout.expert_groups: weight_split and edp_shard; etp a divisor of tp, the stack's default unless the
layout sets it). Tensor
parallelism divides the attention and MLP matrices and the
vocabulary-parallel embedding and head; norms and the MoE router are replicated on TP ranks
(sequence parallelism shards norm activations, not norm weights).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from trainplan.memo import memoised
from trainplan.models.layers import MAMBA, MAMBA2, NO_MIXER, layer_pattern, moe_flags
from trainplan.models.params import count_params, moe_linear_params
from trainplan.models.spec import ModelSpec
from trainplan.models.stages import EVEN, Uneven, stage_layers
from trainplan.precision import Recipe

FP32 = 4  # a gradient reduced in fp32 (Layout.grad_reduce_fp32)
ADAM_MOMENTS = 2  # AdamW's m and v


@dataclass(frozen=True, slots=True)
class StageParams:
    """Parameters one GPU of a pipeline stage holds before data-parallel sharding."""

    layers: tuple[int, ...]  # the decoder layers the stage holds (models/stages.py)
    moe_layers: int
    dense: float  # replicated over the data-parallel group: attention, MLP, norms, embedding, head
    experts: float  # routed experts (divided by ep * etp)
    fp8_linear: float  # the transformer-block matmul weights an fp8 recipe casts (the experts' when it casts them)
    largest_unit: float  # largest FSDP unit on the stage: one block, the embedding or the head
    largest_unit_linear: float  # fp8-castable weights of the largest block

    @property
    def num_layers(self) -> int:
        return len(self.layers)


@functools.lru_cache(maxsize=4096)
def stage_params(m: ModelSpec, tp: int, expert_split: int, pp: int, vp: int = 1,
                 uneven: Uneven = EVEN, lowp_experts: bool = True) -> tuple[StageParams, ...]:
    """Per-stage parameters held by one GPU of each pipeline rank (its layers: models/stages.py);
    `expert_split`: ranks sharing one copy of a layer's routed experts (ExpertGroups.weight_split,
    ep * etp); `lowp_experts`: the stack casts the routed experts' weights with the block's (its
    conventions.lowp_experts), so they count in fp8_linear. Cached because the search calls it for
    every layout."""
    pc = _counts(m)
    h = m.hidden_size
    kv_frac = max(1 / tp, 1 / m.num_kv_heads)  # tp beyond the kv-head count replicates kv heads
    moe = moe_flags(m)
    per_layer = []
    mixerless = tuple(k.attention in (MAMBA, MAMBA2, NO_MIXER) for k in layer_pattern(m))  # no k, v to replicate
    for lp, is_moe, own in zip(pc.layers, moe, mixerless, strict=True):
        if m.mla is None and not own:
            kv = 2 * h * m.kv_dim + (2 * m.kv_dim if m.qkv_bias else 0)
            attn = (lp.attention - kv) / tp + kv * kv_frac
        else:
            attn = lp.attention / tp
        if is_moe:
            router = lp.mlp - moe_linear_params(m)
            mlp_linear = moe_linear_params(m) / tp
            mlp = mlp_linear + router
        else:
            mlp = mlp_linear = lp.mlp / tp
        experts = lp.experts / expert_split
        dense = attn + mlp + lp.norms
        per_layer.append((dense, experts, attn + mlp_linear + (experts if lowp_experts else 0.0)))
    emb = pc.embedding / tp
    head = (pc.lm_head or (pc.embedding if pp > 1 else 0)) / tp  # tied + pp: the last stage keeps a copy
    out = []
    for i, held in enumerate(stage_layers(m.num_layers, pp, vp, uneven)):
        n = len(held)
        layers = [per_layer[j] for j in held]
        dense = sum(x[0] for x in layers)
        experts = sum(x[1] for x in layers)
        units = [x[0] + x[1] for x in layers]
        biggest = max(range(n), key=lambda j: units[j]) if n else None
        if i == 0:
            dense += emb
            units.append(emb)
        if i == pp - 1:
            dense += head + pc.final_norm
            units.append(head + pc.final_norm)
        out.append(StageParams(
            layers=held, moe_layers=sum(moe[j] for j in held),
            dense=dense, experts=experts, fp8_linear=sum(x[2] for x in layers),
            largest_unit=max(units, default=0.0), largest_unit_linear=layers[biggest][2] if n else 0.0,
        ))
    return tuple(out)


@functools.lru_cache(maxsize=1024)
def _counts(m: ModelSpec):
    return count_params(m)


@dataclass(frozen=True, slots=True)
class StateBytes:
    """Bytes of model states on one GPU (named terms)."""

    params: float  # weights as stored between steps (bf16 for Megatron, fp32 shards for FSDP2)
    grads: float  # gradients kept until the optimizer step
    master_params: float  # fp32 master copy (Megatron mixed precision only)
    optimizer_states: float  # AdamW m and v
    unsharded_params: float  # FSDP: all-gathered weights of the units in flight
    unsharded_grads: float  # FSDP: unsharded gradients + reduce-scatter input; zero2: one bucket
    convention: str  # "megatron" | "fsdp2" | "ddp" (torch ZeRO-1)
    bytes_per_param: float  # persistent bytes/param of the dense part (the golden-table number)


def state_bytes(sp: StageParams, *, sharding: str, recipe: Recipe, dp_shard: int, cp: int, edp_shard: int, pp: int,
                optimizer_offload: bool, fp8_allgather: bool,
                grad_fp32: bool = True, sync_last_microbatch: bool = False,
                zero1_replicated: bool = False) -> StateBytes:
    """Model-state bytes for one GPU of a stage; see the module docstring for the conventions.

    grad_fp32=False: gradients are accumulated and reduced in bf16 (Megatron-core's
    DistributedDataParallelConfig.grad_reduce_in_fp32 default; NeMo's and Megatron-Bridge's
    performance recipes and fp8 recipes turn the fp32 reduction off): a 2-byte gradient buffer.
    The optimizer step copies its shard to fp32 main gradients (Megatron's "fp16 param, fp16 grads"
    row, 4 + 16/DP, dist_optimizer.md), but those are set to None by zero_grad before the next
    forward, so they never coexist with activations and are not part of the training peak:
    2 + 2 + 12/DP here.
    sync_last_microbatch (FSDP with gradient accumulation, gradient sync turned off on all but the
    last micro-batch, FSDP2 set_requires_gradient_sync(False)): FSDP2 keeps every unit's unsharded
    gradient between micro-batches, upcast to the reduce dtype when it differs from the compute
    dtype (_fsdp_param.py to_accumulated_grad_if_needed), and reduce-scatters in the last one. The
    sharded gradients are made from those accumulators unit by unit and zero_grad(set_to_none)
    freed the previous step's, so at the peak the accumulators are the gradients.
    fp8_allgather under the Megatron convention is --fp8-param-gather: the block matmul weights are
    stored as fp8 tensors (their transposes are counted with the fp8 copies), not in bf16.
    grad_fp32=False or a recipe whose gradients are in the compute dtype (pure) reduce in the
    compute dtype: no extra fp32 copy of a gradient.
    zero1_replicated: sharding zero1 is torch's ZeRO-1 (module docstring), not Megatron's.
    """
    r = recipe
    cpy = r.param_bytes  # the compute copy of a weight (bf16)
    # bytes an fp8 (all-)gathered weight saves over its compute copy
    lowp_saving = (cpy - r.low_precision.weight_bytes) * fp8_allgather if r.low_precision else 0.0
    d = dp_shard * cp  # data-parallel sharding group of the dense parameters
    d_exp = edp_shard  # routed experts: sharded over the expert folding's edp_shard (layout.expert_groups)

    def per_gpu(dense_bytes: float, sharded: bool) -> float:
        return dense_bytes * sp.dense / (d if sharded else 1) + dense_bytes * sp.experts / (d_exp if sharded else 1)

    opt = ADAM_MOMENTS * r.optimizer_bytes
    if sharding == "fsdp":
        w = r.master_bytes or cpy  # the sharded parameters are the master copy when there is one
        params, grads = per_gpu(w, True), per_gpu(r.grad_bytes, True)
        master, states = 0.0, per_gpu(opt, True)
        if pp > 1:
            # torchtitan keeps pipeline stages unsharded between forward and backward
            # (reshard_after_forward=False with PP) and accumulates unsharded fp32 gradients over
            # the micro-batches (PyTorch pipelining turns gradient sync off until the last one).
            unsharded = sp.dense + sp.experts
            u_params = unsharded * cpy - lowp_saving * sp.fp8_linear
            u_grads = unsharded * r.grad_bytes
        else:
            # current + prefetched unit all-gathered; fp8 all-gather moves fp8 block weights
            unit = sp.largest_unit
            u_params = 2 * (unit * cpy - lowp_saving * sp.largest_unit_linear)
            # compute-dtype gradients of the current unit + their copy in the reduce dtype
            upcast = r.grad_bytes if grad_fp32 and r.grad_bytes != cpy else 0.0
            u_grads = unit * (cpy + upcast)
            if sync_last_microbatch:
                # every unit's accumulator (reduce dtype) + the current unit's compute-dtype gradient
                u_grads = (sp.dense + sp.experts) * (FP32 if grad_fp32 else cpy) + unit * cpy
                grads = 0.0
        bpp = (w + r.grad_bytes + opt) / d
        conv = "fsdp2"
    elif sharding == "zero1" and zero1_replicated:
        w = r.master_bytes or cpy  # the parameters as stored: the master copy when there is one
        params, grads = per_gpu(w, False), per_gpu(w, False)  # DDP reduces in the parameters' dtype
        master, states = 0.0, per_gpu(opt, True)
        # autocast's compute copies saved for backward (an upper bound: under full checkpointing
        # only the recomputed block's are); none when the parameters are in the compute dtype
        u_params, u_grads = (0.0 if w == cpy else per_gpu(cpy, False)), 0.0
        bpp = 2 * w + opt / d
        conv = "ddp"
    else:
        shard_grads = sharding == "zero2"
        shard_opt = sharding in ("zero1", "zero2")
        g = r.grad_bytes if grad_fp32 else cpy
        # fp8 parameters (--fp8-param-gather): block matmul weights stored in fp8
        params = per_gpu(cpy, False) - lowp_saving * sp.fp8_linear
        grads = per_gpu(g, shard_grads)
        master = per_gpu(r.master_bytes, shard_opt)
        states = per_gpu(opt, shard_opt)
        u_params = 0.0
        u_grads = sp.largest_unit * g if shard_grads else 0.0
        bpp = cpy + (g / d if shard_grads else g) + (r.master_bytes + opt) / (d if shard_opt else 1)
        conv = "megatron"
    if optimizer_offload:
        # master weights and optimizer states live in host memory (FSDP CPU offload also moves
        # the sharded fp32 parameters, which are the master copy)
        master, states = 0.0, 0.0
        if sharding == "fsdp":
            params = 0.0
    return StateBytes(params, grads, master, states, u_params, u_grads, conv, bpp)


@memoised()  # the estimate asks once per layout; the sum runs over every layer
def total_params(m: ModelSpec) -> int:
    return _counts(m).total


def checkpoint_bytes_per_param(recipe: Recipe, sharding: str) -> float:
    """Bytes per parameter a full training checkpoint holds (the persistent states above less the
    gradients, which are rebuilt every step): FSDP2 saves its sharded parameters (the master copy
    when the recipe has one) and AdamW's m and v; the Megatron convention saves the compute-dtype
    weights, the fp32 master weights and m, v (bf16 mixed: 4 + 8 = 12 and 2 + 4 + 8 = 14)."""
    opt = ADAM_MOMENTS * recipe.optimizer_bytes
    if sharding == "fsdp":
        return (recipe.master_bytes or recipe.param_bytes) + opt
    return recipe.param_bytes + recipe.master_bytes + opt
