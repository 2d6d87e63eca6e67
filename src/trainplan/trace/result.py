"""What a trace measured, and its extrapolation from the K traced layers to the full depth.

Each full-model layer takes the traced values of the last traced layer of its kind and
checkpointing policy (the last, so that a layer whose input is freed by its successor is counted
in steady state). A kind the slice could not hold falls back to a traced kind of the same policy,
and the result says so in `notes`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainplan.trace.settings import TraceSettings

FLOP_CLASSES = ("matmul", "attention", "other")


@dataclass(frozen=True, slots=True)
class LayerTrace:
    index: int
    kind: str  # "dense", "moe", "dense/sliding_attention", ... (config.layer_kinds)
    ac: str  # policy applied to this layer: none | selective | full
    activation_bytes: int  # growth of live bytes across the layer's forward
    saved_tensor_bytes: int  # unique non-parameter storages packed by saved_tensors_hooks
    params: int
    flops: dict  # per FLOP class, forward + backward (+ recompute)
    forward_flops: dict = field(default_factory=dict)  # per FLOP class, forward pass only
    kept_tensors: tuple = ()  # what the layer keeps: {"op", "shape", "dtype", "bytes"} (attribution.py)

    def to_dict(self) -> dict:
        return {"index": self.index, "kind": self.kind, "ac": self.ac,
                "activation_bytes": self.activation_bytes,
                "saved_tensor_bytes": self.saved_tensor_bytes,
                "params": self.params, "flops": sum(self.flops.values()),
                "flops_by_class": dict(self.flops),
                "forward_flops_by_class": dict(self.forward_flops),
                "kept_tensors": list(self.kept_tensors)}


@dataclass(frozen=True, slots=True)
class TraceResult:
    model_type: str
    settings: TraceSettings
    full_layers: int
    full_kinds: tuple[str, ...]
    layers: tuple[LayerTrace, ...]
    total_params: int  # of the traced (K-layer) model
    param_bytes: int  # compute-dtype weights (traced model)
    master_param_bytes: int  # fp32 masters (mixed recipes), else 0
    grad_bytes: int
    optimizer_state_bytes: int
    activation_bytes: int  # live-bytes growth over the whole forward (traced model)
    peak_bytes: int  # peak of live bytes over the traced steps (traced model)
    peak_phase: str
    peak_breakdown: dict
    flops: int  # traced model, one step
    forward_flops: int
    flops_by_class: dict
    fp8_linears: int
    seconds: float
    forward_flops_by_class: dict = field(default_factory=dict)
    peak_slope_bytes_per_layer: int | None = None  # peak(K+1 layers) - peak(K layers), when traced
    notes: list = field(default_factory=list)

    # ---- extrapolation ------------------------------------------------------------------
    def full_policies(self) -> list[str]:
        s = self.settings
        if s.ac == "partial":
            return ["full" if i < s.ac_layers else "none" for i in range(self.full_layers)]
        return [s.ac] * self.full_layers

    def _pick(self, kind: str, ac: str) -> LayerTrace:
        same = [x for x in self.layers if x.kind == kind and x.ac == ac]
        if same:
            return same[-1]
        alt = [x for x in self.layers if x.ac == ac] or [x for x in self.layers if x.kind == kind] or list(self.layers)
        note = f"no traced layer of kind {kind!r} with ac={ac}; used layer {alt[-1].index} ({alt[-1].kind}, ac={alt[-1].ac})"
        if note not in self.notes:
            self.notes.append(note)
        return alt[-1]

    def full_layer_traces(self) -> list[LayerTrace]:
        return [self._pick(k, a) for k, a in zip(self.full_kinds, self.full_policies())]

    @property
    def outside_params(self) -> int:
        return self.total_params - sum(x.params for x in self.layers)

    @property
    def outside_activation_bytes(self) -> int:
        return self.activation_bytes - sum(x.activation_bytes for x in self.layers)

    def outside_flops(self, forward: bool = False) -> dict:
        total = self.forward_flops_by_class if forward else self.flops_by_class
        return {c: total[c] - sum((x.forward_flops if forward else x.flops)[c] for x in self.layers)
                for c in FLOP_CLASSES}

    # MemTracker / FSDPMemTracker categories that grow with the parameter count.
    _PARAM_LIKE = ("Parameter", "Buffer", "Gradient", "Optstate", "OptState", "Sharded Param", "Sharded Grad")

    def _extrapolated_peak(self, param_ratio: float, act_ratio: float) -> float:
        """The traced peak with each category scaled to the full depth.

        Parameters, gradients and optimizer states scale with the parameter count, the live
        activations at the peak with the activation total, the rest (the gradients of the logits,
        one layer's unsharded parameters, communication buffers) stays as traced. Exact for a
        uniform stack; for stacks of different layer kinds it is an estimate, because the peak moment
        of the traced slice is not the peak moment of the full model.
        """
        total = 0.0
        for key, v in self.peak_breakdown.items():
            if key == "Total":
                continue
            if key in self._PARAM_LIKE:
                total += v * param_ratio
            elif key == "Activation":
                total += v * act_ratio
            else:
                total += v
        return total

    def full(self) -> dict:
        """Full-depth numbers, extrapolated from the traced layers by kind and policy."""
        per = self.full_layer_traces()
        params = self.outside_params + sum(x.params for x in per)
        scale = params / self.total_params
        act_layers = sum(x.activation_bytes for x in per)
        flops_cls = {c: self.outside_flops()[c] + sum(x.flops[c] for x in per) for c in FLOP_CLASSES}
        fwd_cls = {c: self.outside_flops(True)[c] + sum(x.forward_flops[c] for x in per) for c in FLOP_CLASSES}
        # Backward = 2 x forward for matmuls; torch counts flash-attention backward at 2.5 x forward.
        # What a step does beyond that is recompute (checkpointing).
        recompute = {"matmul": flops_cls["matmul"] - 3 * fwd_cls["matmul"],
                     "attention": flops_cls["attention"] - 3.5 * fwd_cls["attention"]}
        act_full = act_layers + self.outside_activation_bytes
        if self.peak_slope_bytes_per_layer is not None:
            peak = self.peak_bytes + (self.full_layers - len(self.layers)) * self.peak_slope_bytes_per_layer
        else:
            peak = self._extrapolated_peak(params / self.total_params, act_full / max(1, self.activation_bytes))
        by_kind: dict = {}
        for x in per:
            by_kind.setdefault(f"{x.kind}|ac={x.ac}", x.activation_bytes)
        return {
            "params": params,
            "param_bytes": round(self.param_bytes * scale),
            "master_param_bytes": round(self.master_param_bytes * scale),
            "grad_bytes": round(self.grad_bytes * scale),
            "optimizer_state_bytes": round(self.optimizer_state_bytes * scale),
            "activation_bytes_per_layer": round(act_layers / len(per)),
            "activation_bytes_per_layer_by_kind": by_kind,
            "activation_bytes_layers": act_layers,
            "activation_bytes_outside_layers": self.outside_activation_bytes,
            "activation_bytes": act_layers + self.outside_activation_bytes,
            "peak_bytes": round(peak),
            "peak_phase": self.peak_phase,
            "peak_extrapolation": ("linear in depth from K and K+1 traced layers"
                                   if self.peak_slope_bytes_per_layer is not None else
                                   "traced categories scaled by parameters and activations"
                                   if len(self.layers) < self.full_layers else "none: full depth traced"),
            "flops_per_step": sum(flops_cls.values()),
            "flops_by_class": flops_cls,
            "forward_flops_by_class": fwd_cls,
            "model_flops_matmul": 3 * fwd_cls["matmul"],
            "recompute_flops_by_class": {c: round(v) for c, v in recompute.items()},
        }

    def to_dict(self) -> dict:
        k = len(self.layers)
        full = self.full()
        return {
            "model_type": self.model_type,
            "settings": self.settings.to_dict(),
            "traced_layers": k,
            "full_layers": self.full_layers,
            "extrapolated": k < self.full_layers,
            "note": (f"{k} of {self.full_layers} decoder layers traced on fake tensors; full-depth values "
                     "are extrapolated per layer kind" if k < self.full_layers else
                     f"all {k} decoder layers traced on fake tensors"),
            "traced": full,
            "traced_slice": {
                "params": self.total_params,
                "activation_bytes": self.activation_bytes,
                "peak_bytes": self.peak_bytes,
                "peak_phase": self.peak_phase,
                "peak_breakdown": self.peak_breakdown,
                "flops_per_step": self.flops,
                "forward_flops": self.forward_flops,
                "flops_by_class": self.flops_by_class,
                "layers": [x.to_dict() for x in self.layers],
            },
            "fp8_linears": self.fp8_linears,
            "trace_seconds": round(self.seconds, 2),
            "notes": list(self.notes),
        }
