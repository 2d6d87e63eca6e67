"""Run under torchrun (2 gloo ranks): the tiny model under fsdp, plain data parallel, zero1 and
zero2, three optimizer steps each on the same data. Writes, per layout: the mean losses, grad
norms, and what each rank holds: bytes of parameters, gradients (after one more backward) and
optimizer states, and whether a block's weights are still gathered between forward and backward.

argv: OUT_JSON CONFIGS_JSON, CONFIGS_JSON = {"name": {layout fields}, ...} ("execution": {...}
overrides settings of the trainplan preset).
"""

import torch.distributed as dist
from _worker import serve  # the layout worker's driver loop (the script dir is on sys.path)
from torch.distributed.tensor import DTensor

from trainplan.runtime import parallel
from trainplan.runtime.build import build_model
from trainplan.runtime.data import make_batches
from trainplan.runtime.demo import demo_plan
from trainplan.runtime.optim import make_optimizer
from trainplan.runtime.trainer import make_scaler, train_step
from trainplan.stacks import stack

STEPS = 3


def nbytes(t) -> int:
    t = t.to_local() if isinstance(t, DTensor) else t
    return t.numel() * t.element_size()


def run_one(fields: dict, device) -> dict:
    from _worker import TINY

    fields = dict(fields)
    if "execution" in fields:
        fields["execution"] = stack("trainplan").execution.with_(**fields["execution"])
    plan = demo_plan(dist.get_world_size(), steps=STEPS, seq_len=64, micro_batch=2, model=TINY, **fields)
    L = plan.layout
    mesh = parallel.build_mesh(L, dist.get_world_size(), device.type)
    dp_rank = mesh["dp_replicate"].get_local_rank() * L.dp_shard + mesh["dp_shard"].get_local_rank()
    model, fsdp = build_model(plan, mesh, device, use_hf=False)
    opt, sched = make_optimizer(model, plan.train, STEPS)
    scaler = make_scaler(L.precision, device, fsdp)
    data = make_batches("", None, TINY.vocab_size, 64, L.micro_batch, L.grad_accum, L.dp, dp_rank, STEPS + 1)
    forward_ctx = parallel.forward_context(L.precision, L.ac, device.type, fsdp)
    out = {"losses": [], "grad_norms": [], "fsdp": fsdp, "ddp": hasattr(model, "zero1_group")}
    for step in range(STEPS):
        loss, gn, _ = train_step(model, opt, sched, scaler, data, step, L.grad_accum, 1.0, forward_ctx, device)
        t = loss.detach().clone()
        dist.all_reduce(t)
        out["losses"].append(float(t) / dist.get_world_size())
        out["grad_norms"].append(gn)
    inner = getattr(model, "module", model)
    first = inner.layers["0"]
    x, y = (t.to(device) for t in data.micro(STEPS, 0))
    with forward_ctx():
        loss = model(x, y)
    # zero2 (reshard_after_forward=False): the block's weights stay gathered (plain tensors)
    # until its backward; fsdp frees them (sharded DTensors again).
    out["gathered_after_forward"] = not isinstance(first.attention.wq.weight, DTensor)
    loss.backward()
    out["param_bytes"] = sum(nbytes(p) for p in model.parameters())
    out["grad_bytes"] = sum(nbytes(p.grad) for p in model.parameters() if p.grad is not None)
    opt.zero_grad(set_to_none=True)
    states = parallel.checkpointed(opt).state.values()
    out["optimizer_bytes"] = sum(nbytes(v) for s in states for k, v in s.items() if k != "step")
    out["largest_param_numel"] = max(p.numel() for p in inner.parameters())
    return out


def run_gathered(fields: dict, device) -> dict:
    """run_one on every rank; the first rank's numbers, with every rank's under "ranks"."""
    r = run_one(fields, device)
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, r)
    return {**every[0], "ranks": every}


if __name__ == "__main__":
    serve(run_gathered)
