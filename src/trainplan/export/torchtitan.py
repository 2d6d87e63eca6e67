"""torchtitan 0.3.0: a costed plan as torchtitan's own config function, and such a function read
back as a job and a layout.

torchtitan 0.3.0 configures a run in Python (torchtitan.toml's header): `export` writes
`trainplan_job.py`, whose `trainplan_job()` returns the `Trainer.Config` of exactly what the plan
costed; `read` parses a file of that shape with `ast` (export/pyconfig.py), never running it.
Every name written lives in torchtitan.toml with its FILE:LINE in the release; what torchtitan
0.3.0 cannot express, or would run differently from how trainplan costed it, is `refusal`'s one
line (the one home of that rule: export raises it, a search may skip on it).
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

from trainplan.errors import TrainplanError
from trainplan.export import Imported
from trainplan.export.pyconfig import Call, render
from trainplan.export.pyconfig import read as read_python
from trainplan.layout import Layout
from trainplan.models.stages import pipeline_chunks
from trainplan.parsing import read_toml
from trainplan.stacks import applicable
from trainplan.stacks import stack as stack_named


@functools.cache
def data() -> dict:
    return read_toml(Path(__file__).with_name("torchtitan.toml"))


FRAMEWORK = data()["release"]["framework"]  # as --to spells it
STACK = data()["release"]["stack"]  # the stacks.toml entry whose costs it exports
RELEASE = data()["release"]["version"]
_TT = f"torchtitan {RELEASE}"


def _tt_stage_sizes(stages: int, layers: int, first_less: int, last_less: int) -> list[int] | None:
    """Decoder layers per pipeline stage as torchtitan splits them (distributed/pipeline_parallel.py
    _generate_llm_fqn_per_model_part, lines 366-476: the embedding and the head weigh `first_less`
    and `last_less` layers, the first stages take the remainder), or None where it refuses."""
    effective = layers + first_less + last_less
    per, extra = divmod(effective, stages)
    if stages > effective or per == 0 or first_less > per or last_less > per:
        return None
    sizes, left = [], layers
    for s in range(stages):
        n = per + (s < extra) - (first_less if s == 0 else last_less if s == stages - 1 else 0)
        sizes.append(min(n, left))
        left -= sizes[-1]
    return sizes if left == 0 else None


def _pipeline(model, L: Layout) -> dict | str:
    """The ParallelismConfig pipeline keys that reproduce trainplan's split, or why none does."""
    sched = data()["schedules"][L.pp_schedule]
    if sched["single"] != (L.vp == 1):
        return (f"pp_schedule {L.pp_schedule} with vp={L.vp}: torchtitan's {sched['name']} runs "
                f"{'one stage' if sched['single'] else 'two or more stages'} per rank; use "
                f"{'interleaved with vp >= 2' if L.vp > 1 else '1f1b'}")
    stages = L.pp * L.vp
    want = [len(c) for c in pipeline_chunks(model.num_layers, L.pp, L.vp, L.uneven)]
    for first in range(3):
        for last in range(3):
            if _tt_stage_sizes(stages, model.num_layers, first, last) != want:
                continue
            effective = model.num_layers + first + last
            per_stage = next((n for n in range(1, effective + 1) if -(-effective // n) == stages), None)
            if per_stage is None:
                break
            return {"pipeline_parallel_degree": L.pp, "pipeline_parallel_schedule": sched["name"],
                    "pipeline_parallel_layers_per_stage": per_stage,
                    "pipeline_parallel_first_stage_less_layers": first,
                    "pipeline_parallel_last_stage_less_layers": last,
                    "pipeline_parallel_microbatch_size": L.micro_batch}
    return (f"pipeline split {want} (pp={L.pp} vp={L.vp}) is not one torchtitan {RELEASE} makes "
            "(pipeline_parallel_first/last_stage_less_layers); use the even split or count the embedding "
            "and loss in it (pp_embedding_in_split=true pp_loss_in_split=true)")


def refusal(job, L: Layout) -> str | None:
    """What torchtitan 0.3.0 cannot run as trainplan costed `L` for `job`, in one line naming the
    setting and what to change, or None."""
    tt = stack_named(STACK)
    if L.stack != STACK:
        other = stack_named(L.stack)
        as_tt = L.with_(stack=STACK, execution=applicable(L.with_(stack=STACK), L.execution))
        for what, a, b in (("recompute_family", other.recompute_family, tt.recompute_family),
                           ("fused_kernels", other.fused_kernels, tt.fused_kernels),
                           *((k, getattr(L.conventions, k), getattr(as_tt.conventions, k))
                             for k in L.conventions.__dataclass_fields__)):
            if a != b:
                return (f"stack {L.stack} runs {what}={a} where torchtitan runs {b}; re-plan with --stack "
                        "torchtitan, or export to that stack's framework")
    rec = data()["precision"].get(L.recipe.name)
    if rec is None or "refused" in rec:
        return f"precision {L.recipe.name}: " + (rec["refused"] if rec else f"not a recipe {_TT} runs")
    if job.model.name not in data()["models"]:
        return (f"model {job.model.name}: {_TT} builds models by flavor and none is this one; known: "
                f"{', '.join(data()['models'])}")
    checks = (
        (L.sharding != "fsdp", (f"sharding {L.sharding}: {_TT} always wraps the model in FSDP2 (parameters, "
                                "gradients and optimizer states sharded over dp_shard*cp, replicated over "
                                "dp_replicate: models/llama3/parallelize.py:69-90); use sharding fsdp")),
        (L.ac == "partial", (f"ac partial: {_TT} checkpoints every block or none (FullAC / SelectiveAC apply to "
                            "every layer, distributed/activation_checkpoint.py:148-158); use ac full or selective")),
        (L.ac == "offload", f"ac offload: {_TT} has no activation offload; use ac full"),
        (L.fp8_allgather, (f"fp8_allgather: {_TT}'s float8 converter has no FSDP float8 all-gather "
                          "(components/quantization/float8.py:57-72); drop fp8_allgather")),
        (L.optimizer_offload, (f"optimizer_offload: {_TT} offloads parameters, gradients and optimizer states "
                              "together (training.enable_cpu_offload), not the optimizer alone; drop it")),
        (not L.flash_attention, f"flash_attention false: {_TT} runs fused attention (flex / sdpa) only"),
        (L.grad_reduce_fp32 is False, (f"grad_reduce_fp32 false: {_TT} reduces gradients in float32 only "
                                      "(training.mixed_precision_reduce, config/configs.py:93)")),
        (L.bf16_loss is True, f"bf16_loss: {_TT}'s cross-entropy upcasts the logits to fp32; drop bf16_loss"),
        (L.tp > 1 and not L.conventions.vocab_parallel_loss,
         f"vocab_parallel_loss false: {_TT} runs the loss on vocabulary-sharded logits with tp; drop it"),
        (L.fsdp_sync_last_microbatch is True, (f"fsdp_sync_last_microbatch: {_TT} reduce-scatters every "
                                              "micro-batch; drop it")),
        (L.expert_groups.etp != (1 if L.ep > 1 else L.tp) and job.model.moe is not None,
         (f"etp={L.expert_groups.etp}: {_TT} splits experts over tp without ep and keeps them whole with ep "
         "(models/common/moe_sharding.py); leave etp out")),
    )
    why = next((msg for bad, msg in checks if bad), None) or _execution_refusal(L)
    if why is None and L.pp > 1 and isinstance(split := _pipeline(job.model, L), str):
        return split
    return why


def _execution_refusal(L: Layout) -> str | None:
    ex = L.execution
    fixed = {"grad_reduce_overlap": True, "param_gather_overlap": True, "pp_p2p_overlap": False,
             "moe_dispatcher": "alltoall", "ep_comm_overlap": False, "moe_capacity_factor": None,
             "moe_pad_to_capacity": False, "cp_comm": "allgather", "cross_entropy": "plain",
             "power_limit_w": None}
    for k, v in fixed.items():
        if getattr(ex, k) != v:
            return (f"{k}={getattr(ex, k)}: {_TT} runs {k}={'null' if v is None else v} (stacks.toml "
                    f"[torchtitan.settings]); --set {k}={'null' if v is None else str(v).lower()}")
    if ex.tp_comm_overlap and not L.torch_compile:
        return f"tp_comm_overlap: {_TT}'s async TP needs the model compiled (config/configs.py:301-309); add torch_compile"
    if ex.cuda_graphs and L.pp > 1:
        return f"cuda_graphs with pp={L.pp}: {_TT} captures no CUDA graphs with pipeline parallelism (trainer.py:183)"
    return None


def _config(plan) -> Call:
    """The Trainer.Config call of `plan` (its refusal checked first)."""
    job, L, t = plan.job, plan.layout, plan.train
    why = refusal(job, L)
    if why:
        raise TrainplanError(f"export to {_TT}: {why}")
    rec = data()["precision"][L.recipe.name]
    model = data()["models"][job.model.name]
    compiled = [c for c, on in (("model", L.torch_compile), ("loss", L.compiled_loss)) if on]
    registry_kw = {}
    if "converter" in rec:
        kw = {"recipe_name": rec["recipe_name"]} if "recipe_name" in rec else {}
        registry_kw["converters"] = [Call(rec["converter"], {**kw, "model_compile_enabled": L.torch_compile})]
    steps = t.steps or math.ceil(job.workload.tokens / (job.workload.global_batch * job.workload.seq_len))
    if steps <= 0:
        raise TrainplanError(f"export to {_TT}: the plan has neither train.steps nor a token budget")
    parallel = {"data_parallel_replicate_degree": L.dp_replicate, "data_parallel_shard_degree": L.dp_shard,
                "fsdp_reshard_after_forward": "default", "tensor_parallel_degree": L.tp,
                "enable_sequence_parallel": L.sequence_parallel, "context_parallel_degree": L.cp,
                "expert_parallel_degree": L.ep, "pipeline_parallel_degree": L.pp}
    if L.pp > 1:
        parallel.update(_pipeline(job.model, L))
    local = L.micro_batch * (L.grad_accum if L.pp > 1 else 1)  # pp: every micro-batch in one schedule
    ce = Call("CrossEntropyLoss.Config", {"global_vocab_size": job.model.vocab_size})
    data_kw = {"dataset": "c4", **({"dataset_path": t.data} if t.data else {})}
    return Call("Trainer.Config", {
        "model_spec": Call("model_registry", registry_kw, (model["flavor"],)),
        "training": Call("TrainingConfig", {
            "local_batch_size": local, "global_batch_size": job.workload.global_batch,
            "seq_len": job.workload.seq_len, "steps": steps, "max_norm": t.grad_clip, "dtype": rec["dtype"],
            "mixed_precision_param": "bfloat16", "mixed_precision_reduce": "float32", "enable_cpu_offload": False,
            "disable_cuda_graphs": not L.execution.cuda_graphs}),
        "parallelism": Call("ParallelismConfig", parallel),
        "activation_checkpoint": {"none": None, "selective": Call("SelectiveAC.Config"),
                                  "full": Call("FullAC.Config")}[L.ac],
        "compile": Call("CompileConfig", {"enable": bool(compiled), "components": compiled,
                                          "enable_async_tensor_parallel": L.execution.tp_comm_overlap}),
        "loss": Call("ChunkedLossWrapper.Config", {"loss_fn": ce}) if L.chunked_loss else ce,
        "optimizer": Call("default_adamw", {"lr": t.lr, "weight_decay": t.weight_decay, "betas": tuple(t.betas)}),
        "lr_scheduler": Call("LRSchedulersContainer.Config", {"warmup_steps": t.warmup_steps,
                                                             "decay_type": "cosine",
                                                             "min_lr_factor": t.min_lr_ratio}),
        "checkpoint": Call("CheckpointManager.Config", {"enable": True, "folder": "checkpoint",
                                                        "interval": t.checkpoint_every or steps}),
        "dataloader": Call("HuggingFaceTextDataLoader.Config", data_kw),
        "debug": Call("DebugConfig", {"seed": t.seed}),
    })


def _names(c, out: set) -> set:
    if isinstance(c, Call):
        out.add(c.func.split(".")[0])
        for v in (*c.args, *c.kwargs.values()):
            _names(v, out)
    elif isinstance(c, list):
        for v in c:
            _names(v, out)
    return out


def export(plan) -> dict[str, str]:
    """{'trainplan_job.py': the config function} for exactly what `plan` costed."""
    body = _config(plan)
    fn = data()["release"]["function"]
    imports = {n: data()["imports"][n] for n in _names(body, set()) if n != "model_registry"}
    imports["model_registry"] = data()["models"][plan.job.model.name]["module"]
    c, L = plan.job.cluster, plan.layout
    doc = (f"torchtitan {RELEASE} job config exported by trainplan: {plan.job.model.name} on {c.nodes} x "
           f"{c.node.name}, seq {plan.job.workload.seq_len}, global batch {plan.job.workload.global_batch}.\n"
           f"Layout costed: {L.short()}\n\n"
           f"Run (pip install {data()['release']['package']}), from this directory on every node:\n"
           f"  PYTHONPATH=$PWD torchrun --nnodes {c.nodes} --nproc-per-node {c.node.gpus_per_node} "
           f"-m {data()['release']['entry']} --module {fn} --config {fn}")
    return {f"{fn}.py": render(imports, fn, "Trainer.Config", body, doc)}


# ---- read ------------------------------------------------------------------------------------


def read(text: str, where: str) -> Imported:
    """The model, layout, sequence and batch a torchtitan 0.3.0 config function describes."""
    from trainplan.export.torchtitan_read import imported

    imports, body = read_python(text, where)
    return imported(imports, body, where)

