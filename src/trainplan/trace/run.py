"""One traced training step: the real model code on fake tensors, on CPU, no weights.

What is measured, and how:

- live bytes: `torch.distributed._tools.mem_tracker.MemTracker` (a TorchDispatchMode that follows
  every tensor storage to its release) over `steps` training steps (forward, backward, AdamW);
  the second step is the steady state (optimizer states exist);
- activation bytes per layer: the growth of MemTracker's live bytes across each decoder layer's
  forward in the last step. Whatever a layer leaves alive is what backward needs from it: its saved
  tensors, and under checkpointing the inputs that the checkpoint holds. It also sees what
  `saved_tensors_hooks` cannot (a non-reentrant checkpoint packs through its own inner hooks).
  `saved_tensors_hooks` (unique storages, parameters excluded) is recorded too as a cross-check for
  ac=none, where the two must agree;
- FLOPs: `torch.utils.flop_counter.FlopCounterMode` per module, with the CPU flash-attention op
  (which torch's table lacks) counted by torch's own sdpa formulas. Like torch, attention counts the
  full s x s product (no causal skipping);
- the peak of live bytes and the phase (forward, backward, optimizer) in which it was reached.
"""

from __future__ import annotations

import contextlib
import gc
import time

from trainplan.errors import TrainplanError
from trainplan.trace._deps import require_torch
from trainplan.trace.config import hf_config_object, layer_kinds, num_layers, slice_config
from trainplan.trace.precision import MasterWeights
from trainplan.trace.precision import setup as recipe_setup
from trainplan.trace.result import LayerTrace, TraceResult
from trainplan.trace.settings import TraceSettings

_DROP_KEYS = ("torch_dtype", "dtype")


def _decoder_layers(model, k: int):
    """The nn.ModuleList of decoder layers (model.model.layers in every HF causal LM we know)."""
    import torch

    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if isinstance(layers, torch.nn.ModuleList) and len(layers) == k:
        return layers, "model.layers"
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.ModuleList) and len(mod) == k:
            return mod, name
    raise TrainplanError(f"could not find the {k} decoder layers of {type(model).__name__}")


def _flop_mapping():
    import torch
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    aten = torch.ops.aten

    def fwd(q, k, v, *args, out_shape=None, **kwargs):
        return sdpa_flop_count(q, k, v)

    def bwd(grad_out, q, k, v, *args, out_shape=None, **kwargs):
        return sdpa_backward_flop_count(grad_out, q, k, v)

    def grouped(a, b, *args, out_shape=None, **kwargs):
        # torch's table has no _grouped_mm (MoE experts). 2 FLOP per multiply-add; the ragged
        # dimension (tokens per expert, given by offs) sums to the full extent of a or b.
        if len(a) == 2 and len(b) == 3:  # (tokens, K) x (E, K, N)
            return 2 * a[0] * a[1] * b[2]
        if len(a) == 3 and len(b) == 2:  # (E, M, K) x (K, tokens)
            return 2 * a[1] * a[2] * b[1]
        if len(a) == 2 and len(b) == 2:  # (M, tokens) x (tokens, N): weight gradients
            return 2 * a[0] * a[1] * b[1]
        return 2 * a[0] * a[1] * a[2] * b[2]  # batched (E, M, K) x (E, K, N)

    mapping = {aten._scaled_dot_product_flash_attention_for_cpu: fwd,
               aten._scaled_dot_product_flash_attention_for_cpu_backward: bwd}
    if hasattr(aten, "_grouped_mm"):
        mapping[aten._grouped_mm] = grouped
    return mapping


_MATMUL = ("mm", "addmm", "bmm", "baddbmm", "_scaled_mm", "_grouped_mm", "grouped_mm")


def _op_class(op) -> str:
    name = str(op).split(".")[1] if "." in str(op) else str(op)
    if "attention" in name:
        return "attention"
    if name in _MATMUL:
        return "matmul"
    return "other"


def _live(mt) -> int:
    return sum(d.get("Total", 0) for d in mt.get_tracker_snapshot("current").values())


def _peak(mt) -> int:
    return sum(d.get("Total", 0) for d in mt.get_tracker_snapshot("peak").values())


def trace_config(cfg: dict, s: TraceSettings, progress=None) -> TraceResult:
    torch = require_torch()
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import AutoModelForCausalLM

    say = progress or (lambda msg: None)
    t0 = time.perf_counter()
    full_layers = num_layers(cfg)
    k = min(s.layers, full_layers)
    # use_cache=False: training keeps no KV cache (a DynamicCache would hold extra k/v copies).
    sliced = slice_config({x: v for x, v in cfg.items() if x not in _DROP_KEYS} | {"use_cache": False}, k)
    hf_cfg = hf_config_object(sliced)
    setup = recipe_setup(s.precision)
    dtype = getattr(torch, setup.compute_dtype)
    vocab = getattr(hf_cfg, "vocab_size", None) or 32000

    if setup.compute_dtype == "float16" and any(x.startswith("moe") for x in layer_kinds(cfg)):
        raise TrainplanError(
            "fp16 with MoE experts cannot be traced: torch's _grouped_mm (the experts' kernel in "
            "transformers) accepts only bf16 inputs; trace with --precision bf16"
        )
    say(f"building {cfg.get('model_type')} with {k} of {full_layers} layers on fake tensors"
        + (f", FSDP2 over {s.fsdp} fake ranks" if s.fsdp > 1 else ""))
    from trainplan.trace import fsdp as F

    fsdp = s.fsdp > 1
    # FSDP2 mixed precision keeps fp32 sharded parameters (the master weights) and computes in bf16.
    build_dtype = torch.float32 if (fsdp and setup.master_weights) else dtype
    old_dtype = torch.get_default_dtype()
    fake = FakeTensorMode(allow_non_fake_inputs=False)
    world = F.fake_world(s.fsdp) if fsdp else contextlib.nullcontext()
    try:
        with world as mesh, fake, _eager_masks():
            torch.set_default_dtype(build_dtype)
            try:
                model = AutoModelForCausalLM.from_config(hf_cfg, attn_implementation="sdpa")
            finally:
                torch.set_default_dtype(old_dtype)
            model.train()
            layers, layers_fqn = _decoder_layers(model, k)
            kinds = layer_kinds(sliced)
            n_fp8 = setup.converter.convert(model) if setup.converter else 0
            from trainplan.trace.policies import apply_ac

            partial = max(1, k // 2) if s.ac == "partial" else 0
            applied = apply_ac(layers, s.ac, partial)
            if fsdp:
                F.shard(model, layers, mesh, dtype, setup.master_weights)

            params = [p for p in model.parameters()]
            param_storages = {id((p.to_local() if fsdp else p).untyped_storage()) for p in params}
            layer_numel = [sum(p.numel() for p in layer.parameters()) for layer in layers]
            param_bytes = sum(F.local_bytes(p) for p in params)
            if fsdp:
                opt = torch.optim.AdamW(params, lr=1e-4, foreach=False)  # see fsdp.py: foreach inflates
            elif setup.master_weights:
                opt = MasterWeights(params, torch, foreach=True)
            else:
                opt = torch.optim.AdamW(params, lr=1e-4, foreach=True)
            ids = torch.randint(0, vocab, (s.micro_batch, s.seq_len))

            from trainplan.trace.attribution import LayerAttribution

            attr = LayerAttribution(layers, param_storages)
            if fsdp:
                from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

                mt = FSDPMemTracker(model, opt)
                mt.track_inputs((ids,))
            else:
                mt = MemTracker()
                mt.track_external(model, *([opt.opt] if setup.master_weights else [opt]))
            phases = []  # (step, phase, peak after it)
            flops_mode = FlopCounterMode(display=False, custom_mapping=_flop_mapping())
            live = {}
            with mt:
                for step in range(s.steps):
                    last = step == s.steps - 1
                    if step:  # MemTracker refuses a second forward of a module without this
                        mt.reset_mod_stats()
                    say(f"step {step + 1}/{s.steps}: forward")
                    live["before_forward"] = _live(mt)
                    fc = flops_mode if last else _Null()
                    with fc:
                        if last:  # inside the FLOP counter: dispatch modes must exit in LIFO order
                            attr.start()
                        with torch.autograd.graph.saved_tensors_hooks(attr.pack, lambda t: t):
                            out = model(input_ids=ids, labels=ids)
                        loss = out.loss * setup.loss_scale if setup.loss_scale != 1.0 else out.loss
                        if last:
                            attr.stop()
                            kept, saved = attr.kept_bytes(), attr.saved_bytes()
                            inventory = [attr.inventory(i) for i in range(k)]
                        live["after_forward"] = _live(mt)
                        phases.append((step, "forward", _peak(mt)))
                        if last:
                            fwd_flops = flops_mode.get_total_flops()
                            fwd_counts = {m: dict(v) for m, v in flops_mode.get_flop_counts().items()}
                        say(f"step {step + 1}/{s.steps}: backward")
                        loss.backward()
                        del out, loss
                        gc.collect()  # free autograd reference cycles now, as a long run's allocator would see
                        phases.append((step, "backward", _peak(mt)))
                    say(f"step {step + 1}/{s.steps}: optimizer")
                    if setup.master_weights and not fsdp:
                        opt.step(setup.loss_scale)
                    else:
                        opt.step()
                    phases.append((step, "optimizer", _peak(mt)))
                    live["after_step"] = _live(mt)
                    opt.zero_grad()
            peak_snap = {getattr(key, "value", str(key)): v
                         for d in mt.get_tracker_snapshot("peak").values() for key, v in d.items()}

            if fsdp:  # sharded fp32 (mixed) or bf16 (pure) parameters are the master weights
                master_bytes = 0
                grad_bytes = param_bytes
                opt_bytes = sum(F.local_bytes(t) for st in opt.state.values() for t in st.values()
                                if hasattr(t, "nbytes") and t.dim() > 0)
            elif setup.master_weights:
                master_bytes = sum(m.nbytes for m in opt.masters)
                grad_bytes = master_bytes  # fp32 gradients on the masters
                opt_bytes = sum(t.nbytes for t in opt.state_tensors())
            else:
                master_bytes = 0
                grad_bytes = param_bytes
                opt_bytes = sum(t.nbytes for st in opt.state.values() for t in st.values()
                                if hasattr(t, "nbytes") and t.dim() > 0)  # not the step counters
    except TrainplanError:
        raise
    except Exception as e:  # a model transformers cannot build or trace on fake tensors
        raise TrainplanError(
            f"tracing {cfg.get('model_type')!r} failed on fake tensors: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
        ) from e

    def classes(counts):
        """FLOPs by class for the whole model, and for each traced layer."""
        whole = {"matmul": 0, "attention": 0, "other": 0}
        for op, n in counts.get("Global", {}).items():
            whole[_op_class(op)] += n
        per_layer = []
        for i in range(k):
            key = next((m for m in counts if m.endswith(f"{layers_fqn}.{i}")), None)
            cls = {"matmul": 0, "attention": 0, "other": 0}
            for op, n in (counts[key].items() if key else ()):
                cls[_op_class(op)] += n
            per_layer.append(cls)
        return whole, per_layer

    by_class, layer_flops = classes(flops_mode.get_flop_counts())
    fwd_by_class, layer_fwd_flops = classes(fwd_counts)
    total_flops = sum(by_class.values())

    peak = max(p for _, _, p in phases)
    phase = next(ph for st, ph, p in phases if p == peak)
    traced_layers = tuple(
        LayerTrace(index=i, kind=kinds[i], ac=applied[i], activation_bytes=kept[i],
                   saved_tensor_bytes=saved[i],
                   params=layer_numel[i], flops=layer_flops[i],
                   forward_flops=layer_fwd_flops[i], kept_tensors=tuple(inventory[i]))
        for i in range(k)
    )
    slope = None
    if s.peak_slope and k < full_layers:
        from dataclasses import replace

        say(f"tracing {k + 1} layers for the peak's growth per layer")
        slope = trace_config(cfg, replace(s, layers=k + 1, peak_slope=False)).peak_bytes - peak
    return TraceResult(
        model_type=cfg.get("model_type", "?"),
        settings=s,
        full_layers=full_layers,
        full_kinds=tuple(layer_kinds(cfg)),
        layers=traced_layers,
        total_params=sum(p.numel() for p in params),
        param_bytes=param_bytes,
        master_param_bytes=master_bytes,
        grad_bytes=grad_bytes,
        optimizer_state_bytes=opt_bytes,
        activation_bytes=live["after_forward"] - live["before_forward"],
        peak_bytes=peak,
        peak_phase=phase,
        peak_breakdown=peak_snap,
        flops=total_flops,
        forward_flops=fwd_flops,
        flops_by_class=by_class,
        forward_flops_by_class=fwd_by_class,
        fp8_linears=n_fp8,
        seconds=time.perf_counter() - t0,
        peak_slope_bytes_per_layer=slope,
    )


@contextlib.contextmanager
def _eager_masks():
    """Make transformers choose the causal mask it would choose on real tensors.

    transformers treats FakeTensor positions as "tracing": it cannot prove that the sequence is
    not packed (find_packed_sequence_indices) nor that the cache offset is 0
    (_ignore_causal_mask_sdpa), so it materialises an s x s causal mask instead of passing
    is_causal=True to SDPA, and with a mask it stops using SDPA's native GQA and expands k and v to
    every head. Both change the memory. The trace feeds one unpacked sequence per row and no cache,
    so while tracing both questions get the answer eager mode gets on real tensors.
    """
    from transformers import masking_utils

    orig = masking_utils._ignore_causal_mask_sdpa
    orig_packed = masking_utils.find_packed_sequence_indices

    def skip(padding_mask, q_length, kv_length, q_offset, kv_offset, local_attention_size=None):
        if padding_mask is None and (local_attention_size is None or kv_length < local_attention_size) \
                and (q_length == 1 or kv_length == q_length):
            return True
        return orig(padding_mask, q_length, kv_length, q_offset, kv_offset, local_attention_size)

    masking_utils._ignore_causal_mask_sdpa = skip
    masking_utils.find_packed_sequence_indices = lambda position_ids: None
    try:
        yield
    finally:
        masking_utils._ignore_causal_mask_sdpa = orig
        masking_utils.find_packed_sequence_indices = orig_packed


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False
