"""`trainplan model NAME|PATH [--json]`: one architecture and its exact parameter counts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainplan.commands.models import ACTIVE_NOTE

# What run() needs is imported there: `trainplan --help` reads this module for NAME and HELP alone (cli.py).
if TYPE_CHECKING:
    from trainplan.models import ModelSpec, ParamCounts

NAME = "model"
HELP = "show one model (catalog name, config.json or its directory) with parameter counts"


def add_arguments(p) -> None:
    p.add_argument("model", metavar="NAME|PATH", help="catalog name or config.json path")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _n(n: int) -> str:
    return f"{n:>17,} = {n / 1e9:9.3f} B"


def _architecture(m: ModelSpec) -> list[str]:
    if m.mla is None:
        attn = f"{m.num_heads} heads x {m.head_dim}, {m.num_kv_heads} kv heads"
    else:
        a = m.mla
        attn = (f"MLA {m.num_heads} heads, q rank {a.q_lora_rank}, kv rank {a.kv_lora_rank}, "
                f"qk {a.qk_nope_head_dim}+{a.qk_rope_head_dim}, v {a.v_head_dim}")
    lines = [
        f"{m.name} ({m.model_type})",
        f"  source     {m.source}",
        (f"  shape      {m.num_layers} layers, hidden {m.hidden_size}, vocab {m.vocab_size}, "
         f"context {m.max_position_embeddings}"),
        f"  attention  {attn}",
        (f"  mlp        {m.mlp}, ffn {m.ffn_size}; {m.norm} x{m.norms_per_layer} per layer; "
         f"tied embeddings: {'yes' if m.tied_embeddings else 'no'}"),
    ]
    if m.sliding_window:
        lines.append(f"  window     {m.sliding_window} tokens on {m.sliding_window_layers} layers")
    if m.moe is not None:
        e = m.moe
        shared = f" + {e.num_shared_experts} shared" if e.num_shared_experts else ""
        latent = f" in a latent of {e.latent_size}" if e.latent_size else ""
        lines.append(
            f"  moe        {e.num_experts} experts{shared}, top-{e.experts_per_token}, "
            f"expert ffn {e.expert_ffn_size}{latent}; {m.num_moe_layers} MoE, {m.num_dense_layers} dense"
        )
    if m.attention_layers:
        lines.append(f"  layers     {_pattern(m)}")
    if m.mtp_layers:
        from trainplan.models.params import count_mtp_params

        lines.append(f"  mtp        {m.mtp_layers} module(s), {count_mtp_params(m):,} parameters, not in the total: "
                     "transformers omits them")
    return lines


def _pattern(m: ModelSpec) -> str:
    """How many layers of each attention variant (models/layers.py), with their bound; a block
    without a mixer by its MLP (Nemotron-H's mlp-only, Nemotron 3's moe-only)."""
    from trainplan.models.layers import NO_MIXER, kind_counts

    by_attention: dict[tuple[str, int | None], int] = {}
    for k, n in kind_counts(m).items():
        name = f"{'moe' if k.is_moe else 'mlp'}-only" if k.attention == NO_MIXER else k.attention
        by_attention[(name, k.window)] = by_attention.get((name, k.window), 0) + n
    return ", ".join(f"{n} {a}" + (f" ({w} tokens)" if w else "") for (a, w), n in by_attention.items())


def describe(m: ModelSpec, c: ParamCounts) -> str:
    """A readable summary: the architecture, then the parameter counts."""
    first, last = c.layers[0], c.layers[-1]
    lines = _architecture(m) + [
        "  parameters",
        f"    total      {_n(c.total)}",
        f"    active     {_n(c.active)}  (per token)",
        f"    embedding  {_n(c.embedding)}",
        f"    lm head    {_n(c.lm_head)}" + ("  (tied)" if m.tied_embeddings else ""),
        f"    layer 0    {_n(first.total)}",
    ]
    if last.total != first.total:
        lines.append(f"    layer {len(c.layers) - 1:<4} {_n(last.total)}")
    lines.append(f"  {ACTIVE_NOTE}")
    return "\n".join(lines)


def run(args) -> int:
    from trainplan.commands._common import print_json
    from trainplan.models import count_params, resolve
    from trainplan.models.spec import spec_to_dict

    m = resolve(args.model)
    c = count_params(m)
    if args.json:
        print_json({"name": m.name, "spec": spec_to_dict(m), "params": c.to_dict()})
    else:
        print(describe(m, c))
    return 0
