"""What trainplan's reference trainer runs exactly as the planner costs it, and what it refuses.

One torch-free check, read by every consumer: the trainer (before any process group or
allocation), `launch` (for plans whose stack is the trainer's) and the search (`plan` recommends
only layouts the trainer passes, and says which stack a faster refused layout needs). It sits
below search, launch and runtime (tests/core/test_layering.py), and never imports torch.

Execution settings: the trainer runs the values of its own preset (stacks.toml [trainplan], each
with the code it comes from) plus `ALSO_RUNS`; a plan that asks for another value was costed for
something the trainer would not do, so it is refused rather than run differently.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainplan.converter_names import declared
from trainplan.errors import TrainplanError
from trainplan.layout import expert_tp
from trainplan.models.layers import CHUNKED, LINEAR, MAMBA, MAMBA2, NO_MIXER, NOPE
from trainplan.precision import no_converter, registry
from trainplan.stacks import COMPLETE_STACK, DEFAULT_STACK, MAMBA_STACK, SETTINGS, stack

TRAINER_STACK = DEFAULT_STACK
# Values the trainer runs besides its preset's: the chunked loss (runtime/loss.py, with the
# planner's chunk count) when the layout's chunked_loss asks for it.
ALSO_RUNS = {"cross_entropy": ("chunked",)}
# The stack named in refusals and in `plan`'s reasons (stacks.py), for a model it builds (other_stack).
OTHER_STACK = COMPLETE_STACK


def other_stack(model) -> str | None:
    """The stack named when trainplan's trainer (or an exporter) refuses `model`; None when no stack
    trainplan knows builds it: Mamba-1 layers (Jamba), which Megatron-Core's hybrid model (what
    Megatron-Bridge builds) does not have, its mixer being Mamba-2's (NVIDIA/Megatron-LM
    megatron/core/ssm/mamba_mixer.py, mamba_ssm's ssd_combined kernels). Such a model runs only in
    the trainer through its Hugging Face code (--hf: data parallelism and FSDP)."""
    if model is not None and MAMBA in model.attention_layers:
        return None
    return MAMBA_STACK if model is not None and MAMBA2 in model.attention_layers else OTHER_STACK


def _or_stack(model) -> str:
    """The end of a refusal: the stack that builds `model`, or that none does (other_stack)."""
    name = other_stack(model)
    if name is None:
        return " (no stack trainplan knows builds Mamba-1 layers: Megatron-Core's hybrid model has Mamba-2 only)"
    return f", or --stack {name}"


# Layout fields the trainer fixes whatever a search or a flag would choose: runtime/parallel.apply_tp
# keeps the LM head whole on every tp rank (sequence parallel or not: both run).
_TRAINER_TP = {"vocab_parallel_loss": False}


def trainer_fields(stack_name: str, tp: int) -> dict:
    """Layout fields a layout of `stack_name` with tensor-parallel degree `tp` takes so that it is
    costed as the trainer runs it (the search's candidates, estimate's and fit's layouts)."""
    return dict(_TRAINER_TP) if stack_name == TRAINER_STACK and tp > 1 else {}


@dataclass(frozen=True, slots=True)
class Refusal:
    reason: str  # one line: what the trainer cannot do, and what to change
    stack: str | None  # a stack that runs it, when another stack would


def implemented() -> dict[str, tuple]:
    """Setting -> the values the trainer runs."""
    preset = stack(TRAINER_STACK).execution
    return {k: (getattr(preset, k),) + ALSO_RUNS.get(k, ()) for k in SETTINGS}


def refusal(layout, device: str = "cuda", model=None) -> Refusal | None:
    """Why the trainer cannot run `layout` (a Layout) on `device` ('cuda' or 'cpu') exactly as
    costed, or None. `model` (a ModelSpec), when given, adds the model-dependent rules."""
    L = layout
    if L.stack != TRAINER_STACK:
        return Refusal(f"the plan was costed for stack {L.stack!r}; trainplan's trainer runs stack "
                       f"{TRAINER_STACK!r} (plan again with --stack {TRAINER_STACK})", L.stack)
    if L.cp > 1 and device != "cuda":
        return Refusal(
            f"cp needs CUDA: cp={L.cp} runs ring attention through torch's context_parallel, which "
            "handles only the CUDA SDPA kernels (flash, memory-efficient, cuDNN); on CPU SDPA's "
            "_scaled_dot_product_flash_attention_for_cpu has no context-parallel implementation in this "
            "torch; run on GPUs, or choose a plan with cp = 1", None)
    r = L.recipe
    if not r.runnable:  # recipes.toml: no runtime converter
        return Refusal(f"{no_converter(r)}{_or_stack(model)}", other_stack(model))
    conv = declared(r.low_precision.converter) if r.low_precision is not None else None
    if L.tp > 1 and L.sequence_parallel and conv is not None and not conv.sequence_parallel_on_cpu \
            and device != "cuda":
        return Refusal(f"{L.precision} with tp={L.tp} and sequence parallel gathers {conv.tensors} tensors, "
                       "which gloo (CPU) cannot: run on GPUs, or set sequence_parallel false", None)
    for rule in (_hf_only, _expert_tp, _tensor_parallel, _pipeline, _zero1, _aux_loss_scaling, _settings):
        r = rule(L, model)
        if r is not None:
            return r
    return None


def own_model_gaps(model) -> tuple[str, ...]:
    """What of `model` (a ModelSpec) trainplan's own decoder (runtime/model.py) does not build, though
    the planner costs it: such a model runs in the trainer only through its Hugging Face code. The
    one list both the planner's refusal (_hf_only) and the trainer's build (runtime/build.py) read."""
    gaps = []
    if model.mla is not None:
        gaps.append("multi-head latent attention")
    if model.attention_sinks:
        gaps.append("attention sinks")
    if model.sliding_window and model.sliding_window_layers:
        gaps.append("sliding-window attention")
    if model.norms_per_layer != 2:
        gaps.append(f"{model.norms_per_layer} norms per layer")
    # runtime/model.py runs full causal attention with RoPE on every layer (models/layers.py kinds)
    variants = set(model.attention_layers)
    if CHUNKED in variants:
        gaps.append("chunked local attention")
    if NOPE in variants:
        gaps.append("layers without rotary positions (NoPE)")
    if LINEAR in variants:
        gaps.append("gated DeltaNet linear attention")
    if model.attention_output_gate:
        gaps.append("gated attention output")
    if MAMBA in variants:
        gaps.append("Mamba-1 (selective-scan) mixer layers")
    if MAMBA2 in variants:
        gaps.append("Mamba-2 mixer layers")
    if NO_MIXER in variants or model.mlp_layers:
        gaps.append("blocks of a mixer or an MLP alone")
    return tuple(gaps)


def check_own_model(model) -> None:
    """Raise a one-line TrainplanError when trainplan's own decoder would build another model than
    `model` (own_model_gaps): the trainer then runs it only with --hf."""
    gaps = own_model_gaps(model)
    if gaps:
        raise TrainplanError(f"{model.name} uses {', '.join(gaps)}, which trainplan's own model does not build; "
                             f"run it through its Hugging Face config (--hf, data parallel only){_or_stack(model)}")


def hf_refusal(layout, hf_config: dict | None) -> str | None:
    """Why the trainer cannot run `layout` through the Hugging Face model (--hf, runtime/build.py
    build_hf_model), or None: it needs the config.json the plan came from, and the HF model has
    neither pipeline stages (runtime/pipeline.py cuts trainplan's own decoder), nor expert
    parallelism (runtime/moe.py splits the trainer's own experts), nor a capacity factor (it
    routes with its own dropless code)."""
    if not hf_config:
        return "--hf needs a plan with hf_config (a plan made from a config.json)"
    if layout.pp > 1:
        return "pp > 1 is implemented for trainplan's own model, not for --hf models; use pp=1"
    if layout.ep > 1:
        return "ep > 1 is implemented for trainplan's own model, not for --hf models; use ep=1"
    if layout.execution.moe_capacity_factor is not None:
        return ("moe_capacity_factor is implemented for trainplan's own MoE layer; a --hf model routes with its "
                "own (dropless) code: --set moe_capacity_factor=null, or drop --hf")
    return None


def check_hf(layout, hf_config: dict | None) -> None:
    """Raise hf_refusal's one line, if any."""
    if (why := hf_refusal(layout, hf_config)) is not None:
        raise TrainplanError(why)


def _hf_only(L, model) -> Refusal | None:
    """A model trainplan's own decoder does not build (own_model_gaps) runs in the trainer only
    through its Hugging Face code (runtime/build.py --hf), which has data parallelism and FSDP and
    none of: expert parallelism (runtime/moe.py splits the trainer's own experts), context
    parallelism (runtime/context.py), tensor or pipeline parallelism (runtime/parallel.py apply_tp,
    runtime/pipeline.py)."""
    gaps = own_model_gaps(model) if model is not None else ()
    degrees = [f"{k}={getattr(L, k)}" for k in ("ep", "cp", "tp", "pp") if getattr(L, k) > 1]
    if not gaps or not degrees:
        return None
    what = ", ".join(gaps)
    return Refusal(f"{model.name}'s {what} run{'s' if len(gaps) == 1 else ''} in the trainer only through its "
                   f"Hugging Face model (--hf), which has no expert, context, tensor or pipeline parallelism "
                   f"(plan has {', '.join(degrees)}); choose a plan with data parallelism only{_or_stack(model)}",
                   other_stack(model))


def _expert_tp(L, model) -> Refusal | None:
    """The trainer's expert tensor parallelism (runtime/moe.apply_ep, parallel.apply_tp): etp = tp,
    each expert's matrices split over the tp ranks like the dense MLP's, or etp = 1 with sequence
    parallel, whole experts and each tp rank routing its own sequence shard (layout.py refuses
    etp < tp without it). Another etp (Megatron-Core's etp between 1 and tp) is refused. Without
    the model, an etp the layout states is checked as if the model had experts."""
    if L.tp == 1 or (model is not None and model.moe is None) or (model is None and L.etp is None):
        return None
    etp = expert_tp(L)
    if etp == L.tp or (etp == 1 and L.sequence_parallel):
        return None
    if etp == 1:
        return Refusal(f"etp=1 with tp={L.tp} routes each tp rank's own sequence shard: set sequence_parallel "
                       f"true, or etp={L.tp}", other_stack(model))
    return Refusal(f"the trainer runs experts split over all tp ranks (etp = tp = {L.tp}) or whole (etp=1), "
                   f"not etp={etp}: plan with etp={L.tp} or 1{_or_stack(model)}", other_stack(model))


def _tensor_parallel(L, model) -> Refusal | None:
    """runtime/parallel.apply_tp: attention and MLP split Megatron-style, with or without sequence
    parallel; embeddings and the LM head whole on every tp rank. MoE layers: the router whole, the
    shared experts as the MLP, and the routed experts with expert tensor parallel size etp = tp
    (runtime/moe.apply_ep)."""
    if L.tp == 1:
        return None
    if L.conventions.vocab_parallel_loss:  # the layout's own, else the stack's (false for trainplan)
        return Refusal(f"the trainer's tensor parallel computes the whole vocabulary's logits on every tp rank "
                       f"(tp={L.tp}): set vocab_parallel_loss false{_or_stack(model)}", other_stack(model))
    lowp = L.recipe.low_precision
    if lowp is not None and not _tp_runs(lowp):
        runs = [r.name for r in registry().values() if r.low_precision and _tp_runs(r.low_precision)]
        return Refusal(f"{L.precision} with tensor parallel: the tp styles of converter {lowp.converter!r} shard "
                       f"{', '.join(declared(lowp.converter).tensor_parallel)} recipes; use {', '.join(runs)}, "
                       "or tp=1", other_stack(model))
    return None


def _tp_runs(lowp) -> bool:
    """The recipe's converter has tensor-parallel styles for its converter_recipe (converter_names.py)."""
    return lowp.converter is not None and lowp.converter_recipe in declared(lowp.converter).tensor_parallel


def _pipeline(L, model) -> Refusal | None:
    """runtime/pipeline.py: the last stage returns full logits to the schedule's loss, and only the
    first stage would know its rank's sequence positions (rotary) under context parallelism."""
    if L.pp == 1 or not (L.cp > 1 or L.chunked_loss):
        return None
    what = "cp > 1" if L.cp > 1 else "the chunked loss"
    return Refusal(f"pp > 1 together with {what} is not implemented in the trainer; choose pp = 1 "
                   f"or drop {what}{_or_stack(model)}", other_stack(model))


def _aux_loss_scaling(L, model) -> Refusal | None:
    """runtime/moe.py injects the auxiliary load-balancing loss's gradient in backward at a fixed
    scale; under dynamic loss scaling (fp16) the LM loss's gradient is multiplied by the scaler's
    current scale and the aux loss's is not, so the balance term would shrink by that factor."""
    if model is None or model.moe is None or model.moe.load_balance != "aux_loss" or model.moe.aux_loss_coef <= 0:
        return None
    if not L.recipe.loss_scaling:
        return None
    return Refusal(f"precision {L.precision!r} scales the loss dynamically, which the trainer's MoE auxiliary "
                   f"loss does not follow; use bf16 (no loss scaling){_or_stack(model)}", other_stack(model))


def _zero1(L, model) -> Refusal | None:
    """zero1 runs as DDP + torch's ZeroRedundancyOptimizer (runtime/parallel.apply_zero1): plain
    tensors, so not with DTensor tp or ep, pipeline stages or context parallelism; and the updated
    parameters are broadcast after the optimizer step, not overlapped with compute."""
    if L.sharding != "zero1" or L.dp == 1:
        return None
    if L.tp > 1 or L.pp > 1 or L.cp > 1 or L.ep > 1:
        return Refusal("sharding zero1 (DDP + ZeroRedundancyOptimizer) runs with tp = pp = cp = ep = 1 in the "
                       f"trainer; use zero2 or fsdp{_or_stack(model)}", other_stack(model))
    if L.execution.param_gather_overlap:
        return Refusal("sharding zero1 broadcasts the updated parameters after the optimizer step in the "
                       "trainer (not overlapped): --set param_gather_overlap=false, or use zero2 or fsdp",
                       other_stack(model))
    return None


def _settings(L, model) -> Refusal | None:
    runs = implemented()
    s = L.execution.to_dict()
    for key in SETTINGS:
        if key == "param_gather_overlap" and L.sharding == "zero1":
            continue  # _zero1: its gather is not overlapped, false is what runs
        if key == "moe_imbalance":
            continue  # what the routing will do, assumed for the estimate; nothing the trainer runs
        if key == "moe_capacity_factor":
            continue  # any value: runtime/build.py gives the plan's to every MoE layer (runtime/moe.py)
        if s[key] not in runs[key]:
            ok = " or ".join(_text(v) for v in runs[key])
            return Refusal(f"the trainer does not implement {key}={_text(s[key])} (it runs {key}={ok}); "
                           f"--set {key}={_text(runs[key][0])}{_or_stack(model)}", other_stack(model))
    kind = L.loss_kind
    if kind not in runs["cross_entropy"]:
        # compiled_loss: the loss compiled with its upcast fused, which the trainer does not do
        return Refusal(f"the trainer does not implement the {kind} cross-entropy the plan was costed with "
                       f"(compiled_loss={_text(L.compiled_loss)}); use plain or chunked_loss"
                       f"{_or_stack(model)}", other_stack(model))
    if kind == "chunked" and not L.chunked_loss:
        # the memory model prices the chunked loss from chunked_loss (costs/memory.py)
        return Refusal("cross_entropy=chunked needs the layout's chunked_loss true, which the plan's memory "
                       "was costed with; set both", None)
    return None


def _text(v) -> str:
    return "null" if v is None else str(v).lower()


def check_runnable(layout, device: str = "cuda", model=None) -> None:
    """Raise a one-line TrainplanError when the trainer cannot run `layout` exactly as costed."""
    r = refusal(layout, device, model)
    if r is not None:
        raise TrainplanError(r.reason)
