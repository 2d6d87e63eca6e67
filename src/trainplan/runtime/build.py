"""Build the model a plan describes, applying the concerns of parallel.py in their fixed order."""

from __future__ import annotations

import torch
from torch import nn

from trainplan.errors import TrainplanError
from trainplan.runtime import context, converters, moe, parallel
from trainplan.runtime.dtypes import torch_dtype
from trainplan.runtime.init import fill
from trainplan.runtime.loss import chunks_for, lm_loss
from trainplan.runtime.model import Decoder
from trainplan.supports import check_hf, check_own_model, check_runnable


class HFCausalLM(nn.Module):
    """A Hugging Face causal LM (random init from its config.json) behind the same interface as
    Decoder: forward(tokens, labels) -> mean loss, `.layers` = the repeated decoder blocks."""

    def __init__(self, hf_model: nn.Module):
        super().__init__()
        self.hf = hf_model
        self.loss_chunks = 1

    @property
    def layers(self) -> nn.ModuleList:
        return self.hf.model.layers

    def forward(self, tokens: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        h = self.hf.model(input_ids=tokens, use_cache=False).last_hidden_state
        return lm_loss(h, self.hf.get_output_embeddings().weight, labels, self.loss_chunks)

    @torch.no_grad()
    def init_weights(self, seed: int) -> None:
        """Layout-independent init (runtime/init.py) with the config's initializer_range."""
        std = getattr(self.hf.config, "initializer_range", 0.02)
        for mname, mod in self.hf.named_modules():
            norm = "norm" in type(mod).__name__.lower()
            # Gemma-style norms store (weight - 1), so zero is their identity.
            one = "zeros" if "gemma" in type(mod).__name__.lower() else "ones"
            for pname, p in mod.named_parameters(recurse=False):
                name = f"{mname}.{pname}"
                kind = (one if pname == "weight" else "zeros") if norm else ("zeros" if pname == "bias" else "normal")
                fill(p, name, seed, kind, std)
            # Rotary tables are buffers computed in __init__; to_empty() left them uninitialised.
            if hasattr(mod, "inv_freq") and hasattr(mod, "config"):
                with torch.device("cpu"):
                    fresh = type(mod)(mod.config)
                for bname, buf in fresh.named_buffers(recurse=False):
                    getattr(mod, bname).copy_(buf)


def build_hf_model(hf_config: dict) -> HFCausalLM:
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = dict(hf_config)
    model_type = cfg.pop("model_type", None)
    if not model_type:
        raise TrainplanError("plan.hf_config has no model_type; give the model's config.json")
    try:
        config = AutoConfig.for_model(model_type, **cfg)
    except ValueError as e:
        raise TrainplanError(f"transformers cannot build model_type {model_type!r}: {e}") from None
    config.use_cache = False
    with torch.device("meta"):
        hf = AutoModelForCausalLM.from_config(config)
    return HFCausalLM(hf)


def build_model(plan, mesh, device: torch.device, use_hf: bool):
    """The model of `plan` on `device`, parallelised per its layout. Returns (model, fsdp applied).
    On a single process (dp = tp = 1) FSDP is not applied (as torchtitan): mixed precision then
    comes from autocast (parallel.forward_context), and no sharding machinery costs step time;
    likewise for sharding zero1 (DDP + ZeroRedundancyOptimizer, parallel.apply_zero1).

    pp > 1: the model is cut into this rank's pipeline chunks (pipeline.py), each parallelised as
    a model of its own; the returned module holds all of this rank's parameters under the whole
    model's names (for the optimizer and checkpoints) and carries the schedule as `.pipe`, which
    trainer.train_step runs instead of calling the module."""
    layout, spec = plan.layout, plan.job.model
    check_runnable(layout, device.type, spec)  # the trainer's own check (trainer.train did it too)
    if use_hf:
        check_hf(layout, plan.hf_config)
        model = build_hf_model(plan.hf_config)
    else:
        check_own_model(spec)
        with torch.device("meta"):
            model = Decoder(spec, plan.job.workload.seq_len)
        moe.set_capacity(model, layout.execution.moe_capacity_factor)
    model.loss_chunks = chunks_for(layout, spec.vocab_size, spec.hidden_size)
    context.check_context_parallel(layout, plan.job.workload.seq_len, device.type, use_hf)
    emesh = moe.expert_mesh(layout, device.type) if moe.splits_experts(layout, spec) else None
    converter = converters.for_layout(layout)
    if layout.pp == 1:
        model = _parallelize(model, plan, mesh, device, emesh, converter)
        # cp > 1: trainer.train_step runs each micro-batch inside context.sequence_shard(cp_mesh).
        model.cp_mesh = mesh["cp"] if layout.cp > 1 else None
        model.converters = [converter] if converter else []  # optim.make_optimizer: each hooks the optimizer
        return model, mesh.size() > 1 and layout.sharding != "zero1"

    from trainplan.runtime import pipeline

    parts, make = pipeline.build_pipeline(model, layout, mesh, device)
    view = pipeline.rank_view(parts)
    for part in parts:
        _parallelize(part, plan, mesh, device, emesh, converter)
    # between stages the activations are in FSDP's compute dtype, else the parameters' own (pure bf16)
    params = next(p for part in parts for p in part.parameters())
    view.pipe = make(parallel.mp_policy(layout.precision).param_dtype or params.dtype)
    view.converters = [converter] if converter else []
    return view, True


def _parallelize(model, plan, mesh, device: torch.device, emesh=None, converter=None):
    """Steps 2-7 of parallel.py on one model (or one pipeline chunk); `emesh`: the experts' mesh
    when they are split (moe.splits_experts): experts split over ep and tp after the dense tp,
    sharded over edp before FSDP; `converter`: the recipe's (converters.for_layout), or None."""
    layout = plan.layout
    r = layout.recipe
    # etp = 1 under tp: experts whole, each tp rank routing its sequence shard (supports.py: sequence parallel)
    whole_experts = plan.job.model.moe is not None and layout.expert_groups.etp < layout.tp
    if converter is not None:  # before tp: tp shards the converted modules with the converter's styles
        converter.convert(model)
    if layout.tp > 1:
        parallel.apply_tp(model, mesh["tp"], styles=converter.tp_styles() if converter else None,
                          sequence_parallel=layout.sequence_parallel, whole_experts=whole_experts)
    if emesh is not None:
        moe.apply_ep(model, emesh, token_split=layout.tp if whole_experts else 1)
    parallel.apply_ac(model, layout.ac, layout.ac_layers)
    if layout.torch_compile:
        parallel.apply_compile(model)
    moe.set_balance_group(model, mesh, 1 / layout.grad_accum)
    if r.pure:  # no master copy: the parameters themselves are in the compute dtype
        model = model.to(torch_dtype(r.compute_dtype))
    zero1 = mesh.size() > 1 and layout.sharding == "zero1"
    if mesh.size() > 1 and not zero1:
        if emesh is not None:
            moe.apply_expert_fsdp(model, emesh, parallel.mp_policy(layout.precision),
                                  layout.sharding == "fsdp" and layout.pp == 1)
        parallel.apply_fsdp(model, parallel.fsdp_mesh(mesh), layout.precision, layout.sharding, layout.pp > 1)

    model.to_empty(device=device)
    model.init_weights(plan.train.seed)
    if zero1:
        model = parallel.apply_zero1(model, mesh, find_unused=plan.job.model.moe is not None)
    return model
