"""Megatron-LM launch of a costed plan (`pretrain_gpt.py` arguments), and such arguments read back.

export(plan) writes `megatron_args.txt` (one `--flag value` per line, a `# trainplan:` header naming
the cluster) and `pretrain_gpt.sh` (torchrun over the nodes with those arguments), for exactly what
the plan costed: the model's dimensions, the layout, the recipe, the checkpointing and the stack's
execution settings. What Megatron-LM cannot express, or would run differently from how the plan was
costed, is refused in one line naming the setting. read(text, where) is megatron_read.read.

Arguments are named by their `dest` (what Megatron's parser fills); the flags, their kinds, defaults
and sources at the pinned release live in megatron.toml, the one home of Megatron's names.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

from trainplan.errors import TrainplanError
from trainplan.memo import memoised
from trainplan.models.layers import FULL, MLA, MOE, SLIDING, layer_kinds, layer_pattern
from trainplan.parsing import read_toml
from trainplan.stacks import MAMBA_STACK

ARGS_FILE = "megatron_args.txt"
SCRIPT_FILE = "pretrain_gpt.sh"
HEADER = "# trainplan:"  # the args file's first line: the cluster the arguments were costed on


@functools.cache
def names() -> dict:
    """megatron.toml: the release, every argument's flag / kind / default / source, the value tables."""
    return read_toml(Path(__file__).with_name("megatron.toml"))


FRAMEWORK = names()["framework"]  # as --to spells it
STACK = names()["stack"]  # the stacks.toml entry whose costs it exports
RELEASE = names()["release"]


def default(dest: str):
    """Megatron's value of `dest` when its flag is absent (megatron.toml)."""
    a = names()["args"][dest]
    return {"true": False, "false": True}.get(a["kind"], a.get("default"))


def _refuse(setting: str, why: str) -> TrainplanError:
    return TrainplanError(f"megatron export: {setting}: {why}")


# ---- the model ---------------------------------------------------------------------------------

def model_args(m) -> dict:
    """The architecture arguments of ModelSpec `m` (vocabulary and rope base aside: vocab_args,
    rope_base); a feature Megatron-LM has no argument for is a one-line refusal."""
    if m.mamba is not None:  # first: its one norm per block would be refused for the wrong reason
        raise _refuse("mamba", f"{m.name} has Mamba-2 layers, which Megatron-LM builds in its hybrid model "
                      "(pretrain_mamba.py, --hybrid-override-pattern), not the GPT model this exporter writes; "
                      f"plan with --stack {MAMBA_STACK} (NemotronHModelProvider builds it)")
    if m.mamba1 is not None:
        raise _refuse("mamba", f"{m.name} has Mamba-1 (selective-scan) layers; Megatron-LM's hybrid model "
                      "(pretrain_mamba.py, megatron/core/ssm/mamba_mixer.py) builds Mamba-2 mixers only and this "
                      "exporter writes its GPT model: no Megatron stack runs it, plan it on trainplan's trainer (--hf)")
    if m.norms_per_layer != 2:
        raise _refuse("norms_per_layer", f"{m.name} has {m.norms_per_layer} norms per layer; Megatron-LM's GPT layer "
                      "has 2 (no post-attention / post-MLP norm arguments at this release)")
    if m.sliding_window is not None:
        raise _refuse("sliding_window", f"{m.name} slides a {m.sliding_window}-token window on "
                      f"{m.sliding_window_layers} of {m.num_layers} layers; not exported to Megatron-LM")
    other = sorted({k.attention for k in layer_pattern(m)} - {FULL, MLA, SLIDING})
    if other:
        raise _refuse("attention", f"{m.name} has {', '.join(other)} attention layers (models/layers.py); the exporter "
                      f"writes full attention on every layer, so it refuses rather than run another model "
                      "(Megatron-LM has --no-rope-freq for NoPE and an experimental --linear-attention-freq, and no "
                      "chunked local attention argument at this release)")
    if m.attention_output_gate:
        raise _refuse("attention_output_gate", f"{m.name} gates the attention output; not exported to Megatron-LM")
    if m.mlp == "geglu":
        raise _refuse("mlp", "geglu has no Megatron-LM argument (--swiglu, --squared-relu, or gelu by default)")
    biases = (m.qkv_bias, m.o_bias, m.mlp_bias)
    if biases not in ((False, False, False), (True, False, False), (True, True, True)):
        raise _refuse("biases", f"qkv {m.qkv_bias}, output {m.o_bias}, mlp {m.mlp_bias}: Megatron-LM sets all linear "
                      "biases together (--disable-bias-linear) with only the qkv bias apart (--add-qkv-bias)")
    a = {"num_layers": m.num_layers, "hidden_size": m.hidden_size,
         "ffn_hidden_size": m.ffn_size or m.moe.expert_ffn_size,  # every layer MoE: the dense size is unused
         "num_attention_heads": m.num_heads, "normalization": {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm"}[m.norm],
         "swiglu": m.mlp == "swiglu", "squared_relu": m.mlp == "relu2",
         "untie_embeddings_and_output_weights": not m.tied_embeddings,
         "add_bias_linear": m.o_bias, "add_qkv_bias": m.qkv_bias and not m.o_bias, "qk_layernorm": m.qk_norm,
         "position_embedding_type": {"rope": "rope", "learned": "learned_absolute"}[m.position_embedding],
         "softmax_type": "learnable" if m.attention_sinks else "vanilla"}
    if m.mla is None:
        a |= {"group_query_attention": m.num_kv_heads != m.num_heads, "kv_channels": m.head_dim}
        if m.num_kv_heads != m.num_heads:
            a["num_query_groups"] = m.num_kv_heads
    else:
        a |= {"multi_latent_attention": True, "q_lora_rank": m.mla.q_lora_rank, "kv_lora_rank": m.mla.kv_lora_rank,
              "qk_head_dim": m.mla.qk_nope_head_dim, "qk_pos_emb_head_dim": m.mla.qk_rope_head_dim,
              "v_head_dim": m.mla.v_head_dim}
    if m.mtp_layers:
        a["mtp_num_layers"] = m.mtp_layers
    if m.moe is not None:
        a |= _moe_args(m)
    return a


def _moe_args(m) -> dict:
    e = m.moe
    if e.router_bias or e.expert_bias:
        raise _refuse("router_bias" if e.router_bias else "expert_bias", f"{m.name}'s router / expert biases have no "
                      "Megatron-LM argument apart from every linear's (--disable-bias-linear)")
    if e.router_score_correction_bias and e.load_balance != "aux_free":
        raise _refuse("router_score_correction_bias", "Megatron-LM keeps the expert bias for aux-free balancing only")
    kinds = layer_kinds(m)
    pattern = "".join("1" if k == MOE else "0" for k in kinds)
    a = {"num_experts": e.num_experts, "moe_router_topk": e.experts_per_token, "moe_ffn_hidden_size": e.expert_ffn_size,
         "moe_grouped_gemm": True,  # TEGroupedMLP, what stacks.toml megatron.conventions lowp_experts prices
         "moe_layer_freq": 1 if "0" not in pattern else _freq_expression(pattern),
         "moe_router_score_function": e.router_score,
         "moe_router_enable_expert_bias": e.load_balance == "aux_free",
         "moe_router_load_balancing_type": ["aux_loss" if e.load_balance == "aux_loss" and e.aux_loss_coef else "none"],
         "moe_aux_loss_coeff": [e.aux_loss_coef] if e.load_balance == "aux_loss" and e.aux_loss_coef else [0.0]}
    if e.num_shared_experts:
        a["moe_shared_expert_intermediate_size"] = e.shared_expert_ffn_size
        a["moe_shared_expert_gate"] = e.shared_expert_gate
    if e.num_groups > 1:
        a |= {"moe_router_num_groups": e.num_groups, "moe_router_group_topk": e.topk_groups}
    return a


def _freq_expression(pattern: str) -> str:
    """Megatron's --moe-layer-freq list expression (arguments.py moe_freq_type) for a 0/1 layer
    pattern, run-length encoded: '000111' -> '([0]*3+[1]*3)'."""
    runs, i = [], 0
    while i < len(pattern):
        j = i
        while j < len(pattern) and pattern[j] == pattern[i]:
            j += 1
        runs.append(f"[{pattern[i]}]*{j - i}")
        i = j
    return "(" + "+".join(runs) + ")"


def vocab_args(vocab_size: int, tp: int) -> dict:
    """A tokenizer-free vocabulary of exactly `vocab_size` rows: NullTokenizer counts --vocab-size plus
    one end-of-document id (megatron/core/tokenizers/text/libraries/null_tokenizer.py vocab_size), then
    Megatron pads to a multiple of make_vocab_size_divisible_by x tp (megatron/training/tokenizer/
    tokenizer.py _vocab_size_with_padding); a divisor that already divides leaves it unpadded."""
    if vocab_size % tp:
        raise _refuse("vocab_size", f"tp={tp} does not divide the {vocab_size} vocabulary rows; Megatron-LM would pad "
                      "them to a multiple of tp, which the plan did not cost")
    return {"tokenizer_type": "NullTokenizer", "vocab_size": vocab_size - 1,
            "make_vocab_size_divisible_by": math.gcd(vocab_size // tp, default("make_vocab_size_divisible_by"))}


def padded_vocab(vocab_size_arg: int, divisible_by: int, tp: int) -> int:
    """The embedding rows Megatron builds from NullTokenizer's --vocab-size (vocab_args)."""
    multiple = divisible_by * tp
    return math.ceil((vocab_size_arg + 1) / multiple) * multiple


def rope_base(plan) -> float | None:
    """rope_theta of the config the plan's model came from (plan.hf_config, else the catalog's)."""
    from trainplan.models import hf_config
    from trainplan.models import names as catalog_names

    m = plan.job.model
    if m.position_embedding != "rope":
        return None
    cfg = plan.hf_config or (hf_config(m.name) if m.name in catalog_names() else {})
    theta = cfg.get("rope_theta")
    if theta is None:
        raise _refuse("rope_theta", f"the plan does not say {m.name}'s rope base (no rope_theta in its config)")
    return theta


# ---- the layout and its settings ---------------------------------------------------------------

def refusal(job, L, stack: str = STACK) -> str | None:
    """What Megatron-LM cannot run as trainplan costed `L` for `job`, in one line naming the setting,
    or None. The checks are the ones the arguments are built with (model_args, vocab_args,
    layout_args), so `export` and the search (search/capability.py: a plan for this stack proposes
    only what this check passes) refuse by one rule."""
    try:
        _model_checked(job.model)
        vocab_args(job.model.vocab_size, L.tp)
        layout_args(job, L, stack)
    except TrainplanError as e:
        return str(e)
    return None


@memoised()
def _model_checked(m) -> None:
    model_args(m)  # raises its refusal; a search asks for one model thousands of times


def layout_args(job, L, stack: str = STACK) -> dict:
    """The layout's arguments; `stack` is the stacks.toml entry whose costs they run (the nemo exporter
    writes NeMo 2's Megatron-Core fields through these, export/nemo.py)."""
    m, w = job.model, job.workload
    if L.stack != stack:
        raise _refuse("stack", f"the plan was costed for --stack {L.stack} ({'FSDP2 / torch-style conventions' if L.conventions.torch_style else 'its own conventions'}); "
                      f"re-plan with --stack {stack} to export to it")
    t = names()
    for field, why in (("torch_compile", "Megatron-LM has no torch.compile option for training"),
                       ("chunked_loss", "Megatron-LM has no chunked cross-entropy"),
                       ("compiled_loss", "Megatron-LM does not compile the loss")):
        if getattr(L, field):
            raise _refuse(field, why)
    if not L.flash_attention:
        raise _refuse("flash_attention", "false: the plan costed a materialised score matrix; Megatron-LM runs TE's fused attention")
    c = L.conventions
    if not c.vocab_parallel_loss and L.tp > 1:
        raise _refuse("vocab_parallel_loss", "false: Megatron-LM always runs the vocabulary-parallel cross-entropy")
    if c.bf16_loss:
        raise _refuse("bf16_loss", "Megatron-LM computes the loss in fp32 (or fused)")
    if c.grad_sync != "every_microbatch":
        raise _refuse("fsdp_sync_last_microbatch", "Megatron-LM reduces gradients every micro-batch")
    recipes = t["precision"]
    if L.precision not in recipes:
        raise _refuse("precision", f"{L.precision} has no Megatron-LM recipe at {RELEASE} (exported: {', '.join(recipes)})")
    if L.sharding not in t["sharding"]:
        raise _refuse("sharding", f"{L.sharding} is priced as DeepSpeed stage 2 on this stack, which Megatron-LM does not run")
    if L.sharding == "fsdp" and L.dp_replicate > 1:
        raise _refuse("dp_replicate", f"{L.dp_replicate} with fsdp (HSDP) is not exported to Megatron-FSDP")
    if L.ac not in t["ac"]:
        raise _refuse("ac", f"{L.ac}: Megatron-LM {RELEASE} has no activation offload to host")
    if L.pp_schedule == "gpipe":
        raise _refuse("pp_schedule", "gpipe: Megatron-LM runs 1F1B and interleaved 1F1B only")
    if L.pp_schedule == "interleaved" and L.vp == 1 and L.pp > 1:
        raise _refuse("pp_schedule", "interleaved with vp=1: Megatron-LM runs that as plain 1F1B")
    if L.optimizer_offload and L.sharding != "zero1":
        raise _refuse("optimizer_offload", "Megatron-LM offloads the distributed optimizer's states only (sharding zero1)")
    ex = L.execution
    if ex.power_limit_w is not None:
        raise _refuse("power_limit_w", "a GPU power cap (nvidia-smi -pl on the nodes), not a Megatron-LM argument")

    spec = recipes[L.precision]
    a = {"tensor_model_parallel_size": L.tp, "sequence_parallel": L.tp > 1 and L.sequence_parallel,
         "pipeline_model_parallel_size": L.pp, "context_parallel_size": L.cp,
         "micro_batch_size": L.micro_batch, "global_batch_size": w.global_batch, "seq_length": w.seq_len,
         **spec["args"], **t["sharding"][L.sharding], **t["ac"][L.ac]}
    if L.recipe.low_precision is not None and L.recipe.low_precision.amax_history > 1:
        a[spec["amax_history"]] = L.recipe.low_precision.amax_history
    if L.fp8_allgather:
        a[spec["param_gather"]] = True
    if L.sharding == "zero1" and L.dp_replicate > 1:
        a["num_distributed_optimizer_instances"] = L.dp_replicate
    if L.ac == "partial":
        if L.ac_layers % L.vp:
            raise _refuse("ac_layers", f"{L.ac_layers} per stage with vp={L.vp}: Megatron's --recompute-method block "
                          "counts layers per virtual stage; choose ac_layers divisible by vp")
        a["recompute_num_layers"] = L.ac_layers // L.vp
    if L.vp > 1:
        a["num_virtual_stages_per_pipeline_rank"] = L.vp
    if L.pp_first_stage_layers:
        a["decoder_first_pipeline_num_layers"] = L.pp_first_stage_layers
    if L.pp_last_stage_layers:
        a["decoder_last_pipeline_num_layers"] = L.pp_last_stage_layers
    a["account_for_embedding_in_pipeline_split"] = L.pp_embedding_in_split
    a["account_for_loss_in_pipeline_split"] = L.pp_loss_in_split
    if L.optimizer_offload:
        # validate_args: --optimizer-cpu-offload needs --use-precision-aware-optimizer (arguments.py:1190)
        a |= {"optimizer_cpu_offload": True, "optimizer_offload_fraction": 1.0, "use_precision_aware_optimizer": True}
    if not c.grad_reduce_fp32:
        a["grad_reduce_in_bf16"] = True
    if m.moe is not None:
        a["expert_model_parallel_size"] = L.ep
        a["expert_tensor_parallel_size"] = L.expert_groups.etp
    counted = m.num_layers + L.pp_embedding_in_split + L.pp_loss_in_split
    if L.pp > 1 and L.vp == 1 and not L.uneven.counts_stages and counted % L.pp:
        # validate_args (arguments.py:570) asserts it; trainplan's even split gives the first stages one
        # layer more instead (models/stages.py), which Megatron-LM does not run
        raise _refuse("pipeline split", f"{counted} layers do not divide over pp={L.pp} and Megatron-LM asserts they do "
                      "(arguments.py:570); re-plan with pp_first_stage_layers / pp_last_stage_layers or another pp")
    return a | execution_args(L, m.moe is not None, job.cluster.node.gpus_per_node)


def execution_args(L, has_experts: bool, gpus_per_node: int) -> dict:
    """The stack's execution settings (stacks.py SETTINGS) as arguments."""
    from trainplan.stacks import a2a_group

    ex, t = L.execution, names()
    a = {"tp_comm_overlap": ex.tp_comm_overlap, "overlap_grad_reduce": ex.grad_reduce_overlap,
         "overlap_param_gather": ex.param_gather_overlap,
         **t["cross_entropy"][_chunk_refused(ex.cross_entropy)], **t["cuda_graphs"][str(ex.cuda_graphs).lower()]}
    if L.pp > 1 and L.vp > 1:
        a["overlap_p2p_comm"] = ex.pp_p2p_overlap  # without vp Megatron turns it off itself (stacks.toml)
    if L.cp > 1:
        a["cp_comm_type"] = [ex.cp_comm]
        if ex.cp_comm == "a2a+p2p":  # the inner (all-to-all) level: the cp ranks sharing a node (stacks.a2a_group)
            inner = a2a_group(L.cp, L.tp, gpus_per_node)
            a["hierarchical_context_parallel_sizes"] = [inner, L.cp // inner]
    if has_experts:
        a |= t["moe_dispatcher"][ex.moe_dispatcher]
        a["overlap_moe_expert_parallel_comm"] = ex.ep_comm_overlap
        if ex.moe_capacity_factor is not None:
            a["moe_expert_capacity_factor"] = ex.moe_capacity_factor
        a["moe_pad_expert_input_to_capacity"] = ex.moe_pad_to_capacity
    return a


def _chunk_refused(kind: str) -> str:
    if kind == "chunked":
        raise _refuse("cross_entropy", "chunked: Megatron-LM has no chunked cross-entropy (--set cross_entropy=fused)")
    return kind


def train_args(plan) -> dict:
    tr, w = plan.train, plan.job.workload
    steps = tr.steps or (math.ceil(w.tokens / w.tokens_per_step) if w.tokens else 0)
    if not steps:
        raise _refuse("train.steps", "0 with no token budget: give the plan --tokens or train.steps")
    a = {"train_iters": steps, "lr": tr.lr, "min_lr": tr.lr * tr.min_lr_ratio, "lr_decay_style": "cosine",
         "lr_warmup_iters": tr.warmup_steps, "weight_decay": tr.weight_decay, "adam_beta1": tr.betas[0],
         "adam_beta2": tr.betas[1], "clip_grad": tr.grad_clip, "seed": tr.seed, "log_interval": tr.log_every,
         "log_throughput": True, "eval_iters": 0, "exit_signal_handler": True}
    if tr.checkpoint_every:  # 0: Megatron saves at the end (and on the exit signal) only
        a["save_interval"] = tr.checkpoint_every
    a |= {"data_path": tr.data.split()} if tr.data else {"mock_data": True}
    return a


def launch_args(plan) -> dict:
    """Every argument of the launch, by dest, in the order written."""
    m = plan.job.model
    a = model_args(m) | vocab_args(m.vocab_size, plan.layout.tp)
    if (theta := rope_base(plan)) is not None:
        a["rotary_base"] = int(theta) if float(theta).is_integer() else theta
    a["max_position_embeddings"] = max(m.max_position_embeddings, plan.job.workload.seq_len)
    return a | layout_args(plan.job, plan.layout) | train_args(plan)


# ---- rendering ---------------------------------------------------------------------------------

def _text(v) -> str:
    return f"{v:.10g}" if isinstance(v, float) else str(v)


def lines(args: dict) -> list[str]:
    """`--flag value` lines; a store_true / store_false flag is written only to change its default."""
    spec, out = names()["args"], []
    for dest, v in args.items():
        a = spec[dest]
        if a["kind"] in ("true", "false"):
            if v != default(dest):
                out.append(a["flag"])
        elif a["kind"] == "list":
            out.append(" ".join([a["flag"], *map(_text, v)]))
        else:
            out.append(f"{a['flag']} {_text(v)}")
    return out


def export(plan) -> dict[str, str]:
    """megatron_args.txt and pretrain_gpt.sh for `plan` (module doc)."""
    args = launch_args(plan)
    c = plan.job.cluster
    header = (f"{HEADER} instance={c.node.name} nodes={c.nodes} gpus_per_node={c.node.gpus_per_node} "
              f"megatron-core={RELEASE}\n# layout: {plan.layout.short()}\n")
    return {ARGS_FILE: header + "\n".join(lines(args)) + "\n", SCRIPT_FILE: _script(plan)}


def _script(plan) -> str:
    c, L = plan.job.cluster, plan.layout
    # Megatron-FSDP refuses CUDA_DEVICE_MAX_CONNECTIONS=1 (validate_args, arguments.py:687); the other
    # layouts keep one connection so TP / CP communication is queued ahead of the compute it overlaps
    # (Megatron-LM examples/gpt3/train_gpt3_175b_distributed.sh)
    conn = "" if L.sharding == "fsdp" else "export CUDA_DEVICE_MAX_CONNECTIONS=1\n"
    t = names()
    return f"""#!/usr/bin/env bash
# Megatron-LM (megatron-core {RELEASE}, {t['tag']}) launch of a trainplan plan: {c.nodes} x {c.node.name}
# layout: {L.short()}
# Run on every node with NODE_RANK and MASTER_ADDR set; MEGATRON_LM is a checkout of {t['tag']}.
set -euo pipefail
: "${{MEGATRON_LM:?set MEGATRON_LM to a Megatron-LM checkout at {t['tag']}}}"
DIR=$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)
CHECKPOINT_DIR=${{CHECKPOINT_DIR:-$DIR/checkpoints}}
{conn}args=()
while read -r flag rest; do
  [[ -z "$flag" || "$flag" == \\#* ]] && continue
  args+=("$flag")
  if [[ -n "$rest" ]]; then read -ra values <<< "$rest"; args+=("${{values[@]}}"); fi
done < "$DIR/{ARGS_FILE}"
exec torchrun --nnodes {c.nodes} --nproc-per-node {c.node.gpus_per_node} --node-rank "${{NODE_RANK:-0}}" \\
  --master-addr "${{MASTER_ADDR:-localhost}}" --master-port "${{MASTER_PORT:-6000}}" \\
  "$MEGATRON_LM/pretrain_gpt.py" "${{args[@]}}" --save "$CHECKPOINT_DIR" --load "$CHECKPOINT_DIR"
"""


def read(text: str, where: str):
    """A Megatron-LM argument list or printed arguments block as an Imported (megatron_read)."""
    from trainplan.export.megatron_read import read as read_args

    return read_args(text, where)
