"""Run under torchrun (2 ranks, gloo): build the tiny model under several layouts in one process
group, take two optimizer steps on the same data with each, write losses and grad norms as JSON.

argv: OUT_JSON CONFIGS_JSON, CONFIGS_JSON = {"name": {"layout": {...}, "model": {...}}, ...}
("fp32_compute": true computes in float32 under FSDP instead of the recipe's dtype.)
"""

import json
import sys
import traceback
from dataclasses import replace

import torch
import torch.distributed as dist

from trainplan.runtime import distributed, parallel
from trainplan.runtime.build import build_model
from trainplan.runtime.data import make_batches
from trainplan.runtime.demo import DEMO_MODEL, demo_plan
from trainplan.runtime.optim import make_optimizer
from trainplan.runtime.trainer import make_scaler, train_step

TINY = replace(DEMO_MODEL, num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2, head_dim=16, ffn_size=128)


def probe_cp_shard(device) -> dict:
    """Context parallel's sequence sharding (runtime/context.py) on 2 ranks: which positions each
    rank holds, and whether its tokens and labels are the same positions. The ring attention
    itself needs CUDA; the sharding runs anywhere."""
    from torch.distributed.device_mesh import init_device_mesh

    from trainplan.runtime.context import sequence_shard

    mesh = init_device_mesh(device.type, (dist.get_world_size(),), mesh_dim_names=("cp",))
    x = torch.arange(16, device=device)[None].repeat(2, 1)
    y = x + 100
    with sequence_shard(mesh, x, y) as extra:
        mine = torch.stack([extra["positions"], x[1], y[1] - 100])
    every = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(every, mine)
    return {"positions": [t[0].tolist() for t in every], "tokens": [t[1].tolist() for t in every],
            "labels": [t[2].tolist() for t in every]}


def watch_drops(model, capacity_factor: float) -> list:
    """After every MoE forward: [pairs the layer says it dropped, pairs its own routing of that
    input puts past ceil(c * T * k / E) with the plan's c] (GShard's per-group capacity)."""
    import math

    seen = []

    def check(mod, args, output):
        x = args[0].reshape(-1, args[0].shape[-1])
        with torch.no_grad():
            _, chosen, _ = mod.route(x)
        counts = torch.bincount(chosen.reshape(-1), minlength=mod.num_experts)
        cap = math.ceil(capacity_factor * len(x) * mod.top_k / mod.num_experts)
        seen.append([int(mod.dropped), int((counts - cap).clamp(min=0).sum())])

    for m in model.modules():
        if type(m).__name__ == "MoE":
            m.register_forward_hook(check)
    return seen


def run_one(cfg: dict, device) -> dict:
    if cfg.get("probe") == "cp_shard":
        return probe_cp_shard(device)
    spec = replace(TINY, **cfg.get("model", {}))
    if "moe" in cfg:
        from trainplan.models.spec import MoESpec

        spec = replace(spec, moe=MoESpec(**cfg["moe"]))
    layout = dict(cfg.get("layout", {}))
    if "execution" in cfg:  # settings over the trainer's preset, as a plan.json carries them
        from trainplan.stacks import stack

        layout["execution"] = stack("trainplan").execution.with_(**cfg["execution"])
    mb = layout.pop("micro_batch", 2)
    plan = demo_plan(dist.get_world_size(), steps=2, seq_len=64, micro_batch=mb, model=spec, **layout)
    if "hf" in cfg:
        plan = replace(plan, hf_config=cfg["hf"])
    L = plan.layout
    mesh = parallel.build_mesh(L, dist.get_world_size(), device.type)
    dp_rank = mesh["dp_replicate"].get_local_rank() * L.dp_shard + mesh["dp_shard"].get_local_rank()
    if cfg.get("fp32_compute"):
        # FSDP computes in fp32: layouts then differ only by the order of their float32 sums
        from unittest import mock

        from torch.distributed.fsdp import MixedPrecisionPolicy

        with mock.patch.object(parallel, "mp_policy", lambda precision: MixedPrecisionPolicy()):
            model, fsdp = build_model(plan, mesh, device, use_hf=bool(cfg.get("hf")))
    else:
        model, fsdp = build_model(plan, mesh, device, use_hf=bool(cfg.get("hf")))
    opt, sched = make_optimizer(model, plan.train, 2)
    scaler = make_scaler(L.precision, device, fsdp)
    data = make_batches("", None, spec.vocab_size, 64, L.micro_batch, L.grad_accum, L.dp, dp_rank, 2)
    out = {"losses": [], "grad_norms": [], "params": sum(p.numel() for p in model.parameters())}
    # Sharded init must not repeat one shard's values on every rank (DTensor RNG on CPU).
    emb = getattr(getattr(model, "tok_embeddings", None), "weight", None)  # pp: only on stage 0
    if emb is not None and hasattr(emb, "full_tensor"):
        full = emb.full_tensor()
        half = full.shape[0] // 2
        out["init_halves_equal"] = bool(torch.equal(full[:half], full[half:2 * half]))
        out["init_std"] = float(full.float().std())
    experts = [m.experts for m in model.modules() if type(m).__name__ == "MoE"]
    if experts:  # what this rank holds of the first MoE layer's w1: ep splits experts, FSDP the rest
        w1 = experts[0].w1
        out["expert_w1_local"] = list((w1.to_local() if hasattr(w1, "to_local") else w1).shape)
    if L.execution.moe_capacity_factor is not None:
        out["drops"] = watch_drops(model, L.execution.moe_capacity_factor)
    forward_ctx = parallel.forward_context(L.precision, L.ac, device.type, fsdp)
    for step in range(2):
        loss, gn, _ = train_step(model, opt, sched, scaler, data, step, L.grad_accum, 1.0, forward_ctx, device)
        t = loss.detach().clone()
        dist.all_reduce(t)
        out["losses"].append(float(t) / dist.get_world_size())
        out["grad_norms"].append(gn)
    if L.tp > 1:
        out["tp_replicas_agree"] = tp_replicas_agree(model, mesh["tp"].get_group())
    return out


def tp_replicas_agree(model, tp_group) -> bool:
    """Whether every tp rank holds the same whole model after training: a weight kept whole on
    each tp rank (norms, the MoE router, an expert's output bias) whose gradients differed across
    tp would drift apart. Each parameter is made full (gathered over its shards) and compared."""
    from torch.distributed.tensor import DTensor

    mine = torch.cat([(p.full_tensor() if isinstance(p, DTensor) else p).detach().float().flatten()
                      for p in model.parameters()])
    every = [torch.empty_like(mine) for _ in range(dist.get_world_size(tp_group))]
    dist.all_gather(every, mine, group=tp_group)
    return all(torch.equal(every[0], t) for t in every[1:])


def serve(run) -> None:
    """The driver loop of a test worker: argv OUT_JSON CONFIGS_JSON; `run(config, device)` per named
    config, a failure recorded under its name; rank 0 writes the results."""
    out_path, configs = sys.argv[1], json.loads(sys.argv[2])
    device = distributed.init()
    results = {}
    for name, cfg in configs.items():
        try:
            results[name] = run(cfg, device)
        except Exception as e:  # noqa: BLE001 - recorded, so one failing layout does not hide the others
            results[name] = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-2000:]}
        dist.barrier()
    if dist.get_rank() == 0:
        with open(out_path, "w") as f:
            json.dump(results, f, indent=1)
    distributed.shutdown()


if __name__ == "__main__":
    serve(run_one)
