"""One function per parallelism/memory concern, applied by `build.build_model` in this fixed order:

    1. build the model on the meta device        (model.Decoder / hf.build_hf_model)
       pp > 1: cut it into this rank's pipeline chunks (pipeline.py); steps 2-7 apply per chunk
    2. convert        the recipe's converter (converters.py: torchao Float8Linear for fp8 recipes)
    3. apply_tp       tensor parallel: DTensor parallelize_module over the "tp" mesh dimension
    4. apply_ac       activation checkpointing per policy (none/selective/full/partial/offload)
    5. apply_compile  torch.compile per block (optional)
    6. apply_fsdp     FSDP2 fully_shard per block, then the root; HSDP over (dp_replicate, dp_shard);
                      with cp > 1 the shard group is dp_shard x cp (fsdp_mesh). sharding zero1
                      instead: nothing here, apply_zero1 after step 7
    7. init weights on the real device, then the optimizer (adamw: sharded for zero1; the
       converter hooks it, optim.make_optimizer)
    pp > 1: the PipelineStages and schedule are built last, on the initialised chunks; cp > 1:
    each micro-batch's forward and backward run inside context.sequence_shard (trainer.train_step)

Why this order (the same as torchtitan's): a converter swaps modules (nn.Linear for Float8Linear)
before any parallelism, and tp shards the converted modules with the converter's own styles
(torchao's float8 styles shard Float8Linear modules); tp then rewrites the linears' weights into
DTensors; checkpointing wraps whole blocks, after their contents are final; compile traces the
wrapped block; fully_shard comes last so it shards what the steps above produced, and per block
so each block's all-gather overlaps the previous block's compute.
On one process (dp = tp = 1) step 6 is skipped and autocast supplies mixed precision.
"""

from __future__ import annotations

import torch
from torch import nn

from trainplan.errors import TrainplanError
from trainplan.precision import check_runnable, recipe
from trainplan.runtime.dtypes import torch_dtype

MESH_DIMS = ("pp", "dp_replicate", "dp_shard", "cp", "tp")


def build_mesh(layout, world_size: int, device_type: str):
    """The 5-D mesh (pp, dp_replicate, dp_shard, cp, tp), pp outermost and tp innermost as in
    torchtitan: tp's all-reduces stay on the fastest links, pp's point-to-point sends can cross
    nodes. Dimensions of size 1 cost nothing."""
    from torch.distributed.device_mesh import init_device_mesh

    shape = tuple(getattr(layout, k) for k in MESH_DIMS)
    n = 1
    for v in shape:
        n *= v
    if n != world_size:
        product = "*".join(str(v) for v in shape)
        raise TrainplanError(
            f"the plan's layout needs pp*dp_replicate*dp_shard*cp*tp = {product} = {n} processes but "
            f"{world_size} were started; start that many (torchrun --nproc-per-node) or pass --fit-world "
            "to rescale dp_shard"
        )
    return init_device_mesh(device_type, shape, mesh_dim_names=MESH_DIMS)


def blocks(model: nn.Module) -> list[tuple[str | int, nn.Module]]:
    """(key, block) pairs of the model's repeated layers: a ModuleDict (our Decoder) or a
    ModuleList (Hugging Face models); `model.layers[key] = wrapped` replaces one."""
    layers = model.layers
    keys = list(layers.keys()) if isinstance(layers, nn.ModuleDict) else list(range(len(layers)))
    return [(k, layers[k]) for k in keys]


def apply_tp(model: nn.Module, tp_mesh, styles: tuple[type, type] | None = None, sequence_parallel: bool = False,
             whole_experts: bool = False) -> None:
    """Megatron-style tensor parallel (Shoeybi et al. 2019, section 3): q/k/v and w1/w3 split by
    output columns, wo and w2 by input rows, so each block needs one all-reduce in forward and one
    in backward. Embeddings and the LM head stay whole on every tp rank (simple and exact).

    sequence_parallel (Korthikanti et al. 2022, section 4.2.2; torchtitan's plan): between the
    attention and MLP regions each tp rank keeps only its 1/tp of the sequence, so the norms and
    the residual stream hold 1/tp of the activations. The norms run on the shard (torch's
    SequenceParallel: their weights Replicate DTensors, whose gradients DTensor sums over tp), a
    region's input is all-gathered (PrepareModuleInput Shard(1) -> Replicate) and its output
    reduce-scattered (wo, w2: RowwiseParallel to Shard(1)) where plain tp all-reduces. The model
    shards the embedding output and gathers the final norm's before the LM head (Decoder.sp_mesh).
    An MoE layer with etp = tp gathers its input and keeps the whole-token computation below, its
    (replicated) output sliced back to the rank's shard.

    whole_experts (etp = 1, sequence parallel only; Megatron-Core's and torchtitan's etp = 1): each
    tp rank routes its own sequence shard, through an expert-parallel group that spans the tp ranks
    (moe.expert_mesh), to experts held whole. The router and the shared experts' gate run on the
    shard with their weights Replicate DTensors (SequenceParallel on the token dim: their gradients
    summed over tp); the shared experts gather the shard's tokens and reduce-scatter them back.

    styles: the (column-wise, row-wise) styles of the recipe's converter (converters.py), whose
    modules the linears already are (torchao's float8 styles cast to fp8 before the tp
    communication, as torchtitan's); None: torch's ColwiseParallel and RowwiseParallel."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        PrepareModuleInputOutput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    col, row = styles or (ColwiseParallel, RowwiseParallel)
    sp = sequence_parallel
    region_out = {"output_layouts": Shard(1)} if sp else {}

    for _, block in blocks(model):
        if not hasattr(block, "attention"):
            raise TrainplanError("tensor parallel is implemented for trainplan's own Llama model only; use tp=1")
        plan = {
            "attention.wq": col(),
            "attention.wk": col(),
            "attention.wv": col(),
            "attention.wo": row(**region_out),
        }
        if sp:
            plan |= {"attention_norm": SequenceParallel(), "ffn_norm": SequenceParallel(),
                     "attention": PrepareModuleInput(input_layouts=(Shard(1), None),
                                                     desired_input_layouts=(Replicate(), None),
                                                     use_local_output=True)}
        # An MoE layer: its shared experts split as the dense MLP. etp = tp: the router whole on
        # every tp rank (the same routing everywhere), the routed experts split over tp by
        # moe.apply_ep; whole_experts (etp = 1): each rank routes its shard (below).
        is_moe = hasattr(block.feed_forward, "experts")
        mlp = block.feed_forward.shared if is_moe else block.feed_forward
        if mlp is not None:
            prefix = "feed_forward.shared" if is_moe else "feed_forward"
            plan |= {f"{prefix}.w1": col(), f"{prefix}.w2": row(**({} if is_moe else region_out))}
            if mlp.w3 is not None:
                plan[f"{prefix}.w3"] = col()
        if sp and is_moe and whole_experts:
            moe_plan = {"feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Shard(1),),
                                                           use_local_output=True),
                        "feed_forward.router": SequenceParallel(sequence_dim=0, use_local_output=True)}
            if mlp is not None:  # shared experts: the tokens of the shard (dim 0 inside MoE.forward)
                moe_plan |= {"feed_forward.shared": PrepareModuleInput(
                    input_layouts=(Shard(0),), desired_input_layouts=(Replicate(),), use_local_output=True),
                    "feed_forward.shared.w2": row(output_layouts=Shard(0))}
            if block.feed_forward.shared_gate is not None:
                moe_plan["feed_forward.shared_gate"] = SequenceParallel(sequence_dim=0, use_local_output=True)
            plan |= moe_plan
            block.feed_forward.token_split_group = tp_mesh.get_group()
        elif sp and is_moe:
            plan["feed_forward"] = PrepareModuleInputOutput(
                input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),), use_local_input=True,
                output_layouts=(Replicate(),), desired_output_layouts=(Shard(1),), use_local_output=True)
        elif sp:
            plan["feed_forward"] = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),),
                                                      use_local_output=True)
        parallelize_module(block, tp_mesh, plan)
    if sp:
        if getattr(model, "norm", None) is not None:
            parallelize_module(model.norm, tp_mesh, SequenceParallel(use_local_output=True))
        model.sp_mesh = tp_mesh


# Ops whose outputs selective checkpointing keeps: attention and the matmuls, except every second
# plain matmul, which is recomputed (torchtitan's per-op SAC policy). Norms, activations, rotary and
# element-wise ops are recomputed. This is exactly what the planner's "selective" prices for a
# PyTorch-checkpoint framework: costs/flops.py (recompute of every second matmul: k, o, up in a
# Llama layer) and costs/activations.py (the kept tensors), both pinned to `trainplan trace`.
def _save_list():
    ops = torch.ops.aten
    keep = [ops.mm.default, ops.addmm.default, ops.bmm.default, ops.linear.default,
            ops._scaled_dot_product_efficient_attention.default,
            ops._scaled_dot_product_flash_attention.default,
            ops._scaled_dot_product_flash_attention_for_cpu.default]
    if hasattr(ops, "_scaled_dot_product_cudnn_attention"):
        keep.append(ops._scaled_dot_product_cudnn_attention.default)
    if hasattr(ops, "_scaled_mm"):
        keep.append(ops._scaled_mm.default)
    return set(keep)


def selective_policy():
    """A fresh per-op policy for one checkpointed block call (see the comment above)."""
    from torch.utils.checkpoint import CheckpointPolicy

    save, mm = _save_list(), torch.ops.aten.mm.default
    # One counter for the forward and one for the recompute, so both see the same numbering and
    # recompute exactly the matmuls the forward did not keep.
    counts = {False: 0, True: 0}

    def policy(ctx, op, *args, **kwargs):
        if op == mm:
            counts[ctx.is_recompute] += 1
            if counts[ctx.is_recompute] % 2 == 0:
                return CheckpointPolicy.PREFER_RECOMPUTE
        return CheckpointPolicy.MUST_SAVE if op in save else CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def _selective_context():
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    return create_selective_checkpoint_contexts(selective_policy())


def apply_ac(model: nn.Module, mode: str, ac_layers: int = 0) -> None:
    """Wrap blocks per policy. full/partial/offload: the block keeps only its input (torch
    non-reentrant checkpoint); selective: per-op policy above. offload additionally moves the
    saved block inputs to host memory (see `forward_context`)."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    if mode == "none":
        return
    chosen = blocks(model)
    if mode == "partial":
        chosen = chosen[:ac_layers]
    for name, block in chosen:
        if mode == "selective":
            wrapped = checkpoint_wrapper(block, context_fn=_selective_context, preserve_rng_state=False)
        else:
            wrapped = checkpoint_wrapper(block, preserve_rng_state=False)
        model.layers[name] = wrapped


def forward_context(precision: str, ac: str, device_type: str, fsdp: bool):
    """A factory of the context each micro-batch's forward runs in:
    - ac='offload': every tensor saved for backward goes to (pinned) host memory; with full
      checkpointing inside the blocks that is each block's input, the planner's offload policy;
    - without FSDP (one process, no sharding: as torchtitan, FSDP is not applied on one rank),
      mixed precision comes from autocast instead of FSDP's MixedPrecisionPolicy."""
    import contextlib

    r = recipe(precision)
    amp = None if fsdp or r.pure else torch_dtype(r.compute_dtype)

    def make():
        stack = contextlib.ExitStack()
        if ac == "offload":
            stack.enter_context(torch.autograd.graph.save_on_cpu(pin_memory=device_type == "cuda"))
        if amp is not None:
            stack.enter_context(torch.autocast(device_type, dtype=amp))
        return stack

    return make


def apply_compile(model: nn.Module) -> None:
    """torch.compile each block separately (torchtitan's choice): blocks are identical, so one
    compiled graph is reused, and compile time does not grow with depth."""
    for name, block in blocks(model):
        model.layers[name] = torch.compile(block, fullgraph=False)


def mp_policy(precision: str):
    """FSDP2 mixed precision per recipe. bf16 and fp8 recipes compute in bf16 and reduce gradients
    in fp32 over fp32 master weights; fp16 likewise in fp16 (with a gradient scaler in the trainer);
    pure bf16 holds the parameters themselves in bf16, so no casting policy."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    r = recipe(precision)
    check_runnable(r)
    if r.pure:
        return MixedPrecisionPolicy()
    # gradients reduced at the recipe's width: 4 bytes is fp32 (every mixed recipe today)
    reduce = torch.float32 if r.grad_bytes == 4 else torch_dtype(r.compute_dtype)
    return MixedPrecisionPolicy(param_dtype=torch_dtype(r.compute_dtype), reduce_dtype=reduce)


def apply_fsdp(model: nn.Module, dp_mesh, precision: str, sharding: str, pipelined: bool = False) -> None:
    """fully_shard each block, then the root (embeddings, final norm, head). With a 2-D mesh
    (dp_replicate, dp_shard) this is HSDP: shard inside a group, replicate across groups.

    sharding 'fsdp' frees gathered weights after each block's forward (ZeRO-3). 'zero2' keeps them
    gathered from forward until the block's backward (reshard_after_forward=False, FSDP1's
    SHARD_GRAD_OP): one all-gather per micro-batch, gradients reduce-scattered to fp32 shards,
    optimizer states on the shards, which is ZeRO-2's P_os+g (Rajbhandari et al. 2020, section
    5.2). 'none' runs on a dp_shard=1 mesh, i.e. plain replication; 'zero1' is apply_zero1.
    pipelined (a pipeline chunk): never reshard after forward, as torchtitan does with pp: the
    schedule defers resharding and gradient sync to the last micro-batch, so a stage is gathered
    once per step and reduce-scattered once (what costs/states.py and steptime.shard_calls price)."""
    from torch.distributed.fsdp import fully_shard

    if sharding == "zero1":
        raise AssertionError("zero1 is DDP + ZeroRedundancyOptimizer (apply_zero1), not FSDP")
    reshard = sharding == "fsdp" and not pipelined
    policy = mp_policy(precision)
    todo = blocks(model)
    for i, (_, block) in enumerate(todo):
        # The last block's weights are needed again at once by backward: never free them.
        fully_shard(block, mesh=dp_mesh, mp_policy=policy,
                    reshard_after_forward=reshard and i < len(todo) - 1)
    fully_shard(model, mesh=dp_mesh, mp_policy=policy, reshard_after_forward=False)


def apply_zero1(model: nn.Module, mesh, find_unused: bool) -> nn.Module:
    """sharding 'zero1' (ZeRO-1, P_os: Rajbhandari et al. 2020, section 5.1): every rank keeps
    the whole model and the whole gradient, only the optimizer states are sharded. torch's own
    pieces: DDP all-reduces the gradients in buckets during backward (gradient_as_bucket_view:
    the buckets are the .grad tensors, no second copy), and `adamw` below builds torch's
    ZeroRedundancyOptimizer over the dp_shard group, which steps its shard of the parameters
    and broadcasts them. Parameters stay in their storage dtype (fp32 for mixed precision, with
    autocast computing in bf16/fp16, as on one process); supports.py refuses zero1 with tp, pp or
    cp > 1. The plain tensors are the same on every rank: the init is layout-independent."""
    from torch.nn.parallel import DistributedDataParallel

    # MoE: experts no token was routed to get no gradient in that step.
    ddp = DistributedDataParallel(model, gradient_as_bucket_view=True, forward_sync_buffers=False,
                                  find_unused_parameters=find_unused)
    ddp.zero1_group = mesh["dp_shard"].get_group()
    return ddp


def adamw(model: nn.Module, groups: list[dict], **kwargs) -> torch.optim.Optimizer:
    """AdamW over `groups`; for a zero1 model (apply_zero1) torch's ZeroRedundancyOptimizer around
    it, each rank holding AdamW states for its shard of the parameters only."""
    group = getattr(model, "zero1_group", None)
    if group is None:
        return torch.optim.AdamW(groups, **kwargs)
    from torch.distributed.optim import ZeroRedundancyOptimizer

    opt = ZeroRedundancyOptimizer(groups, optimizer_class=torch.optim.AdamW, process_group=group, **kwargs)
    # A checkpoint restores the local optimizer (`checkpointed`), but step() feeds it the global
    # groups' hyperparameters: bring those (the restored lr) up to date from it.
    opt.optim.register_load_state_dict_post_hook(lambda local: _copy_hyperparameters(local, opt))
    return opt


def _copy_hyperparameters(src, dst) -> None:
    for a, b in zip(src.param_groups, dst.param_groups, strict=True):
        b.update({k: v for k, v in a.items() if k != "params"})


def checkpointed(optimizer):
    """The optimizer whose state a rank checkpoints: ZeroRedundancyOptimizer's local AdamW (its
    shard's states, under the parameters' names, so DCP stores each once, by its owner);
    ZeroRedundancyOptimizer.state_dict() itself needs a consolidation onto one rank first. The
    local optimizer sees the global groups' hyperparameters only inside step(): the lr the
    scheduler set since is copied in first, so that the checkpoint holds it."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    if not isinstance(optimizer, ZeroRedundancyOptimizer):
        return optimizer
    _copy_hyperparameters(optimizer, optimizer.optim)
    return optimizer.optim


def fsdp_mesh(mesh):
    """The data-parallel sub-mesh FSDP shards over: 2-D for HSDP, 1-D otherwise. With context
    parallelism the cp ranks hold the same weights and see different tokens, so they join the
    shard group (dp_shard x cp flattened, as torchtitan): FSDP's gradient average then covers them."""
    if mesh["cp"].size() > 1:
        flat = mesh["dp_shard", "cp"]._flatten("dp_shard_cp")  # idempotent for the same name
        if mesh["dp_replicate"].size() > 1:
            # Slicing a flattened dim from the root works in torch 2.13 (with a deprecation warning).
            return mesh["dp_replicate", "dp_shard_cp"]
        return flat
    if mesh["dp_replicate"].size() > 1:
        return mesh["dp_replicate", "dp_shard"]
    return mesh["dp_shard"]


