"""Regenerate calibration/activations/hf_eager.json from traces (needs the torch extra).

The shapes vary one dimension at a time, so the leave-one-shape-out error is pessimistic where a
shape is the only one that identifies a feature (it then measures extrapolation, not noise).

    python -m trainplan.trace.calibrate [--out FILE] [--seq-len 64]

For each family and checkpointing policy, the model of the family is traced at several shapes
(each varies one dimension of a base shape), and the difference traced - analytic per layer kind
(bytes per token) is fitted by least squares on the features of calibration.activations. The
file keeps the coefficients, the shapes and trace settings they came from, and the
leave-one-shape-out error: the largest relative error of (analytic + correction) on a shape the
fit did not see.
"""

from __future__ import annotations

import argparse
import json
import sys

from trainplan.calibration.activations import FEATURES, SCHEMA, features, kind
from trainplan.trace.settings import TraceSettings

POLICIES = ("none", "selective", "full")

# A small base config per family and the one-dimension variations of it (shapes scaled down, the
# architecture unchanged: what a layer keeps per token is linear in these sizes).
BASE = {
    "dense_mha": {"model_type": "gpt2", "n_embd": 128, "n_head": 4, "n_layer": 4, "n_positions": 256, "vocab_size": 512,
                      "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "n_inner": 512},
    "gqa_swiglu": {"model_type": "llama", "hidden_size": 128, "intermediate_size": 344, "num_attention_heads": 4,
                       "num_key_value_heads": 2, "num_hidden_layers": 4, "vocab_size": 512},
    "moe": {"model_type": "qwen3_moe", "hidden_size": 128, "intermediate_size": 256, "moe_intermediate_size": 64,
                "num_experts": 8, "num_experts_per_tok": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
                "num_hidden_layers": 4, "vocab_size": 512, "norm_topk_prob": True},
    "mla": {"model_type": "deepseek_v3", "hidden_size": 128, "intermediate_size": 256, "moe_intermediate_size": 64,
                "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1, "n_group": 1, "topk_group": 1,
                "first_k_dense_replace": 1, "num_attention_heads": 4, "num_key_value_heads": 4, "q_lora_rank": 48,
                "kv_lora_rank": 32, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32, "num_hidden_layers": 4,
                "vocab_size": 512},
    # Nemotron-H blocks (Mamba-2 mixer, attention, MLP); transformers runs its reference PyTorch scan
    # on CPU (no mamba_ssm kernels), which keeps the within-chunk decay matrices the fused kernel does not
    "hybrid_ssm": {"model_type": "nemotron_h", "hidden_size": 128, "intermediate_size": 256, "num_attention_heads": 4,
                   "num_key_value_heads": 2, "head_dim": 32, "mamba_num_heads": 8, "mamba_head_dim": 16, "n_groups": 2,
                   "ssm_state_size": 16, "chunk_size": 16, "conv_kernel": 4, "mlp_hidden_act": "relu2",
                   "hybrid_override_pattern": "M-*-", "num_hidden_layers": 4, "vocab_size": 512},
}
# Sequence lengths each family is traced at (the file's seq_len unless listed): the Mamba-2 scan hands
# its state on once per sequence, a per-token term in 1 / seq_len that one length cannot tell apart
SEQ_LENS = {"hybrid_ssm": (64, 128)}
VARIANTS = {
    "dense_mha": [{}, {"n_embd": 192, "n_head": 6}, {"n_embd": 256}, {"n_head": 8}, {"n_inner": 768},
                  {"n_inner": 320, "n_embd": 160, "n_head": 5}],
    "gqa_swiglu": [{}, {"hidden_size": 192}, {"num_attention_heads": 8}, {"num_key_value_heads": 4},
                   {"intermediate_size": 512}, {"head_dim": 48}, {"num_key_value_heads": 1, "hidden_size": 160}],
    "moe": [{}, {"hidden_size": 192}, {"num_attention_heads": 8}, {"num_key_value_heads": 4},
            {"moe_intermediate_size": 96}, {"num_experts_per_tok": 3}, {"num_experts": 16}, {"head_dim": 48}],
    "mla": [{}, {"hidden_size": 192}, {"num_attention_heads": 8, "num_key_value_heads": 8},
            {"kv_lora_rank": 48}, {"q_lora_rank": 64}, {"moe_intermediate_size": 96}, {"num_experts_per_tok": 3},
            {"n_routed_experts": 16}, {"intermediate_size": 384}, {"qk_rope_head_dim": 32}, {"v_head_dim": 48}],
    "hybrid_ssm": [{}, {"hidden_size": 192}, {"mamba_num_heads": 16}, {"mamba_head_dim": 32}, {"ssm_state_size": 32},
                   {"n_groups": 4}, {"chunk_size": 32}, {"intermediate_size": 384}, {"num_attention_heads": 8},
                   {"num_key_value_heads": 4}],
}


def points(family: str, policy: str, seq_len: int, progress=None):
    """(features, traced bytes/token, analytic bytes/token, kind, shape) per traced layer kind."""
    from trainplan.costs.activations import ActivationContext, layer_activations, saved_kinds
    from trainplan.models import spec_from_config
    from trainplan.models.layers import moe_flags
    from trainplan.trace.config import default_layers, slice_config
    from trainplan.trace.run import trace_config

    rows = []
    for v in VARIANTS[family]:
        cfg = BASE[family] | v
        spec = spec_from_config(cfg, name=family, where=family)
        k = default_layers(cfg)  # one traced layer of every kind
        traced = spec_from_config(slice_config(cfg, k), name=family, where=family)  # the layers traced
        moe, blocks = moe_flags(traced), saved_kinds(traced)
        r = trace_config(cfg, TraceSettings(seq_len=seq_len, ac=policy, layers=k, steps=1, peak_slope=False))
        tokens = seq_len
        for i, layer in enumerate(r.layers):
            analytic = layer_activations(spec, moe[i], ActivationContext(seq_len=seq_len), policy, *blocks[i]).total
            rows.append((features(spec, moe[i], seq_len), layer.activation_bytes / tokens, analytic,
                         kind(moe[i], blocks[i]), v))
        if progress:
            progress(f"{family} {policy} {v or 'base'}")
    return rows


def _select(X, y, cols):
    """Forward stepwise least squares: the fewest features that explain y (to 0.5 byte/token).

    Plain least squares over all features is under-determined on collinear shapes (q_dim = hidden
    in most configs) and then splits a term between features, which extrapolates badly.
    """
    import numpy as np

    chosen: list[int] = []
    coef = np.zeros(0)
    while True:
        res = y - (X[:, chosen] @ coef if chosen else 0)
        if np.max(np.abs(res), initial=0) < 0.5 or len(chosen) == len(cols):
            return chosen, coef
        best = None
        for j in range(len(cols)):
            if j in chosen:
                continue
            c = np.linalg.lstsq(X[:, chosen + [j]], y, rcond=None)[0]
            err = np.max(np.abs(y - X[:, chosen + [j]] @ c))
            if best is None or err < best[0] - 1e-9:
                best = (err, j, c)
        if best is None or (chosen and best[0] >= np.max(np.abs(res)) - 1e-9):
            return chosen, coef
        chosen, coef = chosen + [best[1]], best[2]


def _lstsq(X, y, cols):
    import numpy as np

    return list(range(len(cols))), np.linalg.lstsq(X, y, rcond=None)[0]


def _evaluate(rows, X, y, method):
    chosen, coef = method(X, y, FEATURES)
    worst = 0.0
    for i in range(len(rows)):  # leave one shape out
        keep = [j for j in range(len(rows)) if rows[j][4] != rows[i][4]]
        if not keep:
            continue
        ch, c = method(X[keep], y[keep], FEATURES)
        pred = rows[i][2] + (X[i, ch] @ c if ch else 0.0)
        worst = max(worst, abs(pred - rows[i][1]) / rows[i][1])
    fitted = max(abs(r[2] + (X[i, chosen] @ coef if chosen else 0.0) - r[1]) / r[1] for i, r in enumerate(rows))
    return chosen, coef, fitted, worst


def fit(rows) -> dict:
    """Coefficients by the method (stepwise or plain least squares) with the lower held-out error."""
    import numpy as np

    X = np.array([[r[0][f] for f in FEATURES] for r in rows], dtype=float)
    y = np.array([r[1] - r[2] for r in rows])
    results = [(name, *_evaluate(rows, X, y, m)) for name, m in (("stepwise", _select), ("lstsq", _lstsq))]
    name, chosen, coef, fitted, worst = min(results, key=lambda r: (round(r[4], 6), len(r[1])))
    raw = max(abs(r[2] - r[1]) / r[1] for r in rows)
    return {
        "coefficients": {FEATURES[j]: round(float(c), 6) for j, c in zip(chosen, coef) if abs(c) > 1e-9},
        "method": name,
        "points": len(rows),
        "fit_max_rel_error": round(float(fitted), 6),
        "loo_max_rel_error": round(float(worst), 6),
        "uncorrected_max_rel_error": round(float(raw), 6),
    }


def build(seq_len: int = 64, progress=None, only: tuple[str, ...] = (), keep: dict | None = None) -> dict:
    """The calibration file's data; `only`: refit these families and take the others from `keep`
    (the file as it is), so that adding a family leaves the fitted ones byte for byte."""
    import torch
    import transformers

    out = {
        "schema": SCHEMA,
        "what": "bytes per token per decoder layer to add to costs.activations.layer_activations(...).total "
                "so that it equals a trace of the Hugging Face eager model code (see trainplan/calibration/activations)",
        "generated_by": "python -m trainplan.trace.calibrate",
        "trace_settings": {**TraceSettings(seq_len=seq_len, steps=1, peak_slope=False).to_dict(), "ac": "per policy"},
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "features": list(FEATURES),
        "shapes": {f: {"base": BASE[f], "variants": VARIANTS[f], **({"seq_lens": list(SEQ_LENS[f])} if f in SEQ_LENS
                                                                   else {})} for f in BASE},
        "families": {},
    }
    out["not_calibrated"] = {
        "mla/none, mla/selective": "on CPU, SDPA falls back to its math kernel for MLA (q/k head dim "
        "nope+rope != v head dim): the trace keeps fp32 s x s probabilities and fp32 q, k copies that "
        "CUDA's efficient/flash kernels do not, so these traces do not describe a GPU run",
    }
    for fam in BASE:
        if only and fam not in only:
            if keep and fam in keep["families"]:
                out["families"][fam] = keep["families"][fam]
            continue
        for pol in POLICIES:
            if fam == "mla" and pol != "full":
                continue
            rows = [r for n in SEQ_LENS.get(fam, (seq_len,)) for r in points(fam, pol, n, progress)]
            for k in sorted({r[3] for r in rows}):
                out["families"].setdefault(fam, {}).setdefault(pol, {})[k] = fit([r for r in rows if r[3] == k])
    return out


def main(argv=None) -> int:
    from trainplan.calibration.activations import FILE
    from trainplan.fileio import write_atomic

    p = argparse.ArgumentParser(prog="python -m trainplan.trace.calibrate", description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(FILE))
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--family", action="append", choices=sorted(BASE),
                   help="refit only this family (repeatable); the others are kept from --out as they are")
    a = p.parse_args(argv)
    from trainplan.calibration.activations import load

    keep = load(a.out) if a.family else None
    data = build(a.seq_len, progress=lambda m: print(f"calibrate: {m}", file=sys.stderr, flush=True),
                 only=tuple(a.family or ()), keep=keep)
    write_atomic(a.out, json.dumps(data, indent=1) + "\n")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
