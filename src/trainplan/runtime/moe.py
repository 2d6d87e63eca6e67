"""The mixture-of-experts FFN of the reference trainer, with expert parallelism (ep).

One MoE layer, per rank holding T tokens (GShard, Lepikhin et al. 2020, section 2.2; the dispatch
as torchtitan's and Megatron's all-to-all token dispatcher):

    router     scores = softmax or sigmoid(x W_r); top-k experts per token, chosen on scores
               (+ the aux-free selection bias); weights = the chosen scores, renormalised
    permute    the T*k (token, expert) pairs sorted by expert (stable: token order kept)
    dispatch   ep > 1: all_to_all_single (torch's functional collective, with autograd) sends
               each pair to the rank holding its expert (experts split evenly, rank r holds
               experts [r*E/ep, (r+1)*E/ep)); received pairs regrouped by local expert
    experts    grouped GEMM over the local experts: torch._grouped_mm on CUDA (bf16), a loop of
               matmuls elsewhere; tp > 1 with etp = tp: each tp rank holds a slice of every
               expert's ffn dimension and the slices' partial outputs are summed over tp; etp = 1
               (sequence parallel): the experts whole, the ep group spanning the tp ranks
    combine    the reverse all-to-all, unpermute, sum of the k outputs times their weights
    shared     shared experts (always active) added, optionally through a sigmoid gate

ep = 1 runs the same code without the two exchanges, so ep only moves rows between ranks: every
token meets the same expert weights and the losses agree to float rounding (tests/runtime). Under
tp with etp = tp the router and the dispatch run whole, identically, on every tp rank (with sequence
parallel the layer gathers its input first, parallel.apply_tp); with etp = 1 each tp rank routes
its own sequence shard (`token_split_group`: the tp group, over which the aux loss's counts and
the router's gradients are summed).
Capacity: dropless by default; with a capacity factor c (the plan's moe_capacity_factor, given to
every layer by set_capacity) each rank keeps at most ceil(c * T * k / E) pairs per expert, T the
tokens it routes (its sequence shard with etp = 1) (GShard's per-group capacity, Megatron-Core's
get_capacity), the later ones in token order dropped (Megatron's
moe_token_drop_policy "position") before dispatch, so ep moves the same kept rows as ep = 1. A dropped
pair adds nothing to its token's output (the shared experts and the residual still do). `dropped`:
the pairs the last forward dropped.

Load balancing, as the model's spec says (MoESpec.load_balance):
- "aux_loss": Switch Transformer's loss (Fedus et al. 2021, eq. 4), aux_loss_coef * E * sum_e f_e P_e
  over this rank's tokens, its gradient injected in backward (no change to the returned loss);
- "aux_free": DeepSeek-V3's selection bias (arXiv 2412.19437, section 2.1.2): after each optimizer
  step, bias_e += rate * sign(mean load - load_e), loads summed over every data-parallel rank.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
from torch import nn

from trainplan.models.spec import ModelSpec
from trainplan.runtime.model import FeedForward, activation

# DeepSeek-V3 report, section 4.2: bias update speed gamma = 0.001 for the first 14.3T tokens.
BIAS_UPDATE_RATE = 1e-3
# Rows per expert group for torch._grouped_mm: 16 bytes of bf16 (GroupedExperts._grouped).
GROUP_ALIGN = 8


def _local(p: torch.Tensor) -> torch.Tensor:
    """The rank's own experts: under ep the stacked weights are DTensors sharded on the expert dim."""
    return p.to_local() if hasattr(p, "to_local") else p


class GroupedExperts(nn.Module):
    """All routed experts of a layer as stacked weights (experts first), so that one grouped GEMM
    runs them all and ep shards them on dim 0. w1/w3: (E, ffn, hidden), w2: (E, hidden, ffn), the
    nn.Linear convention per expert; the parameter count equals E separate FeedForward modules."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        m, h = spec.moe, spec.hidden_size
        e, f = m.num_experts, m.expert_ffn_size
        self.kind = spec.mlp
        self.w1 = nn.Parameter(torch.empty(e, f, h))
        self.w2 = nn.Parameter(torch.empty(e, h, f))
        self.w3 = nn.Parameter(torch.empty(e, f, h)) if spec.gated_mlp else None
        self.b1 = nn.Parameter(torch.empty(e, f)) if m.expert_bias else None
        self.b2 = nn.Parameter(torch.empty(e, h)) if m.expert_bias else None
        self.b3 = nn.Parameter(torch.empty(e, f)) if m.expert_bias and spec.gated_mlp else None
        self.grad_scale = 1.0  # 1/ep under expert parallelism (apply_ep)
        self.tp_mesh = None  # expert tensor parallelism: the tp mesh the ffn dimension is split over

    def forward(self, x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """x: rows grouped by local expert, counts[e] rows for local expert e. Under expert tensor
        parallelism (tp_mesh set by apply_ep) each tp rank holds a slice of every expert's ffn
        dimension, as a Megatron MLP (Shoeybi et al. 2019, section 3): the rows enter whole on every
        tp rank (`_enter_tp`), each rank's w2 product is a partial sum, summed over tp
        (`_sum_over_tp`) before the output bias, which is added once."""
        def local(p):
            if p is None:
                return None
            p = _local(p)
            return _ScaleGrad.apply(p, self.grad_scale) if self.grad_scale != 1.0 else p

        w1, w2, w3 = local(self.w1), local(self.w2), local(self.w3)
        b1, b2, b3 = local(self.b1), local(self.b2), local(self.b3)
        if self.tp_mesh is not None:
            x = _enter_tp(x, self.tp_mesh)
        if x.is_cuda and x.dtype == torch.bfloat16 and hasattr(torch, "_grouped_mm"):
            y = self._grouped(x, counts, w1, w2, w3, b1, b3)
        else:
            y = self._loop(x, counts, w1, w2, w3, b1, b3)
        if self.tp_mesh is not None:
            y = _sum_over_tp(y, self.tp_mesh)
        if b2 is not None:
            return y + b2.repeat_interleave(counts, dim=0, output_size=len(y))
        # DTensor's to_local returns a view, on which FSDP2 warns that in-place ops would skip its hooks
        return y.clone() if y._base is not None else y

    def _loop(self, x, counts, w1, w2, w3, b1, b3):
        outs = []
        start = 0
        # Every expert's matmul runs, even on zero rows, so every slice is in the graph.
        for e, n in enumerate(counts.tolist()):
            xe = x[start:start + n]
            start += n
            a = activation(self.kind, xe @ w1[e].T + (b1[e] if b1 is not None else 0))
            if w3 is not None:
                a = a * (xe @ w3[e].T + (b3[e] if b3 is not None else 0))
            outs.append(a @ w2[e].T)
        return torch.cat(outs)

    def _grouped(self, x, counts, w1, w2, w3, b1, b3):
        """torch._grouped_mm over the local experts. Each expert's rows are padded to a multiple of
        GROUP_ALIGN: the backward's weight gradient contracts over the rows, and the kernel's TMA
        loads need 16-byte-aligned groups (8 bf16 rows; torchtitan pads the same way)."""
        padded = (counts + GROUP_ALIGN - 1) // GROUP_ALIGN * GROUP_ALIGN
        total = int(padded.sum())
        shift = (padded.cumsum(0) - padded) - (counts.cumsum(0) - counts)
        rows = torch.arange(len(x), device=x.device) + torch.repeat_interleave(shift, counts, output_size=len(x))
        xp = x.new_zeros(total, x.shape[1]).index_copy(0, rows, x)
        offs = padded.cumsum(0).to(torch.int32)

        def mm(a, w, bias):
            y = torch._grouped_mm(a, w.transpose(-2, -1), offs=offs)
            return y if bias is None else y + bias.repeat_interleave(padded, dim=0, output_size=total)

        a = activation(self.kind, mm(xp, w1, b1))
        if w3 is not None:
            a = a * mm(xp, w3, b3)
        return mm(a, w2, None).index_select(0, rows)


def _enter_tp(x: torch.Tensor, tp_mesh) -> torch.Tensor:
    """Megatron's f: identity forward; backward sums the tp ranks' partial input gradients (each
    rank's comes from its own slice of the ffn dimension). In DTensor terms, a tensor replicated
    over tp whose gradient is Partial: from_local's backward then all-reduces it."""
    from torch.distributed.tensor import DTensor, Partial, Replicate

    return DTensor.from_local(x, tp_mesh, [Replicate()], run_check=False).to_local(grad_placements=[Partial()])


def _sum_over_tp(y: torch.Tensor, tp_mesh) -> torch.Tensor:
    """Megatron's g: all-reduce the tp ranks' partial sums forward; the gradient of the (replicated)
    sum is each partial's own, so backward passes it unchanged (DTensor Partial -> Replicate)."""
    from torch.distributed.tensor import DTensor, Partial

    return DTensor.from_local(y, tp_mesh, [Partial()], run_check=False).full_tensor()


class _ScaleGrad(torch.autograd.Function):
    """Identity forward, gradient times `scale` (see apply_ep: the experts' gradient average)."""

    @staticmethod
    def forward(ctx, x, scale):
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.scale, None


class _InjectAuxGrad(torch.autograd.Function):
    """Identity on the layer output; in backward, d(aux)/d(aux) = scale, so the auxiliary loss
    trains the router without being added to the returned loss (Megatron's MoEAuxLossAutoScaler).
    Works the same under pipeline stages and activation checkpointing."""

    @staticmethod
    def forward(ctx, out, aux, scale):
        ctx.scale = scale
        ctx.save_for_backward(aux)
        return out

    @staticmethod
    def backward(ctx, grad):
        (aux,) = ctx.saved_tensors
        return grad, torch.full_like(aux, ctx.scale), None


class MoE(nn.Module):
    """Router + routed experts (+ shared experts). `ep_group` (set by `apply_ep`) is the process
    group over which the experts are split; None: every expert is local."""

    def __init__(self, spec: ModelSpec, capacity_factor: float | None = None):
        super().__init__()
        m = spec.moe
        self.num_experts, self.top_k = m.num_experts, m.experts_per_token
        self.score_fn, self.load_balance, self.aux_coef = m.router_score, m.load_balance, m.aux_loss_coef
        self.num_groups, self.topk_groups = m.num_groups, m.topk_groups
        self.capacity_factor = capacity_factor
        self.router = nn.Linear(spec.hidden_size, m.num_experts, bias=m.router_bias)
        self.experts = GroupedExperts(spec)
        self.shared = (FeedForward(spec, spec.hidden_size, m.shared_expert_ffn_size, False)
                       if m.num_shared_experts else None)
        self.shared_gate = nn.Linear(spec.hidden_size, 1, bias=False) if m.shared_expert_gate else None
        if m.load_balance == "aux_free":
            # A buffer (HF keeps e_score_correction_bias as one): checkpointed, not trained, not counted.
            self.register_buffer("expert_bias", torch.empty(m.num_experts, dtype=torch.float32))
        else:
            self.expert_bias = None
        self.ep_group = None
        self.token_split_group = None  # etp = 1 under tp: the tp ranks, each routing its sequence shard
        self.balance_group = None  # set by set_balance_group (None: this process alone)
        self.aux_scale = 1.0  # 1 / grad_accum (build.py): the aux loss is averaged like the LM loss
        self.load = None  # pairs routed to each expert since the last bias update (aux_free)
        self.dropped = None  # pairs past capacity in the last forward (a tensor: no host sync)

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(weights (T, k), chosen experts (T, k), scores (T, E) in float32)."""
        logits = self.router(x).float()
        scores = logits.sigmoid() if self.score_fn == "sigmoid" else logits.softmax(dim=-1)
        select = scores if self.expert_bias is None else scores + self.expert_bias
        if self.num_groups > 1:
            # DeepSeek-V3 node-limited routing: rank groups by the sum of their top-2 scores and
            # keep topk_groups of them (the report's section 2.1.2, M nodes per token).
            g = select.view(len(x), self.num_groups, -1)
            group_score = g.topk(min(2, g.shape[-1]), dim=-1).values.sum(-1)
            keep = torch.zeros_like(group_score, dtype=torch.bool)
            keep.scatter_(1, group_score.topk(self.topk_groups, dim=-1).indices, True)
            select = g.masked_fill(~keep[..., None], float("-inf")).view(len(x), -1)
        chosen = select.topk(self.top_k, dim=-1).indices
        weights = scores.gather(1, chosen)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights, chosen, scores

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        weights, chosen, scores = self.route(x)
        flat = chosen.reshape(-1)
        counts = torch.bincount(flat, minlength=self.num_experts)
        if self.expert_bias is not None and torch.is_grad_enabled() and not _recomputing():
            self.load = counts.float() if self.load is None else self.load + counts.float()
        order = flat.argsort(stable=True)  # pairs sorted by expert, token order kept within one
        if self.capacity_factor is not None:
            order, counts = self._drop(order, counts, len(x))
        xs = x[order // self.top_k]
        ys = self._experts(xs, counts)
        y = ys.new_zeros(flat.numel(), shape[-1]).index_copy(0, order, ys)
        out = (y.view(len(x), self.top_k, -1) * weights.type_as(y)[..., None]).sum(dim=1)
        if self.shared is not None:
            s = self.shared(x)
            out = out + (torch.sigmoid(self.shared_gate(x)) * s if self.shared_gate is not None else s)
        if self.load_balance == "aux_loss" and self.aux_coef > 0 and torch.is_grad_enabled():
            out = _InjectAuxGrad.apply(out, self.aux_loss(scores, counts), self.aux_coef * self.aux_scale)
        return out.view(shape)

    def aux_loss(self, scores: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """Switch Transformer eq. 4 with top-k: E * sum_e f_e P_e, f_e = share of the T*k pairs
        routed to e, P_e = mean router probability of e (both over this rank's tokens). With etp = 1
        under tp, over the whole sequence as Megatron-Core's (its counts summed over the tp group):
        each tp rank's share sum_e f_e * (its own scores summed) / T_whole, so that the shares add up
        to the whole sequence's loss and each rank's gradient reaches its own tokens' scores."""
        tokens = len(scores)
        if self.token_split_group is not None:
            counts = counts.clone()
            dist.all_reduce(counts, group=self.token_split_group)
            tokens *= dist.get_world_size(self.token_split_group)
        f = counts.float() / counts.sum()
        p = scores.sum(dim=0) / tokens
        return self.num_experts * (f.detach() * p).sum()

    def _drop(self, order, counts, tokens: int):
        """Keep the first ceil(c * T * k / E) pairs of each expert (in token order)."""
        cap = math.ceil(self.capacity_factor * tokens * self.top_k / self.num_experts)
        starts = counts.cumsum(0) - counts
        expert_of = torch.repeat_interleave(torch.arange(self.num_experts, device=counts.device), counts)
        pos = torch.arange(len(order), device=order.device) - starts[expert_of]
        kept = counts.clamp(max=cap)
        self.dropped = (counts - kept).sum()
        return order[pos < cap], kept

    def _experts(self, xs: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        if self.ep_group is None:
            return self.experts(xs, counts)
        return _ep_exchange(self.experts, xs, counts, self.ep_group)


def _ep_exchange(experts: GroupedExperts, xs: torch.Tensor, counts: torch.Tensor, group) -> torch.Tensor:
    """Dispatch rows (sorted by global expert) to the ranks holding their experts, run the local
    experts, send the results back in the same order (all_to_all_single both ways)."""
    from torch.distributed._functional_collectives import all_to_all_single_autograd

    ep = dist.get_world_size(group)
    local = counts.numel() // ep
    # recv[s, e]: rows source rank s sends to this rank's local expert e
    recv = torch.empty_like(counts)
    dist.all_to_all_single(recv, counts, group=group)
    recv = recv.view(ep, local)
    send_splits = counts.view(ep, local).sum(1).tolist()
    recv_splits = recv.sum(1).tolist()
    xr = all_to_all_single_autograd(xs, recv_splits, send_splits, group)
    # Received rows come grouped (source rank, local expert); the experts want (local expert, source).
    idx = _regroup(recv)
    yr = experts(xr[idx], recv.sum(0))
    yr = torch.empty_like(yr).index_copy(0, idx, yr)
    return all_to_all_single_autograd(yr, send_splits, recv_splits, group)


def _regroup(counts: torch.Tensor) -> torch.Tensor:
    """Row indices that reorder blocks laid out (s, e) row-major, counts[s, e] rows each, into
    (e, s) order."""
    n = int(counts.sum())
    starts = (counts.flatten().cumsum(0) - counts.flatten()).view_as(counts)
    seg_start, seg_len = starts.T.flatten(), counts.T.flatten()
    seg_first = seg_len.cumsum(0) - seg_len
    offset = torch.arange(n, device=counts.device) - torch.repeat_interleave(seg_first, seg_len, output_size=n)
    return torch.repeat_interleave(seg_start, seg_len, output_size=n) + offset


def _recomputing() -> bool:
    """Whether this forward is activation checkpointing's recompute (its routing was counted
    already): a recompute runs inside the backward pass, where autograd has a current graph task."""
    return torch._C._current_graph_task_id() != -1


# ---- expert parallelism and the data-parallel wiring of the experts -----------------------------
# The mesh (layout.expert_groups): ep is carved out of dp_shard * cp (* tp with etp = 1), as in
# torchtitan. The dense parts keep the (pp, dp_replicate, dp_shard, cp, tp) mesh; the experts see
# the same ranks as (pp, dp_replicate, edp, ep, tp) with edp * ep = dp_shard * cp (etp = tp:
# an expert's weights split over ep and over tp, Megatron-Core's default), or as
# (pp, dp_replicate, edp, ep) with edp * ep = dp_shard * cp * tp (etp = 1: whole experts, split
# over ep only); ep innermost. The experts are sharded (FSDP) over edp, their gradients summed over
# ep and edp.

def moe_layers(model: nn.Module) -> list[MoE]:
    return [m for m in model.modules() if isinstance(m, MoE)]


def set_capacity(model: nn.Module, factor: float | None) -> None:
    """The plan's moe_capacity_factor (stacks.py) on every MoE layer; None: dropless."""
    for m in moe_layers(model):
        m.capacity_factor = factor


def splits_experts(layout, spec) -> bool:
    """Whether the routed experts live on their own mesh, with an FSDP of their own (apply_ep,
    apply_expert_fsdp): when they are split over ranks (ep > 1, or tp > 1 with etp = tp) or their
    tp ranks route different tokens (tp > 1 with etp = 1: the gradients are summed over tp too)."""
    return spec.moe is not None and (layout.ep > 1 or layout.tp > 1)


def expert_mesh(layout, device_type: str):
    """The experts' view of the ranks, in the dense mesh's rank order: etp = tp: (pp, dp_replicate,
    edp, ep, tp), dp_shard and cp flattened then split into edp x ep; etp = 1 under tp: (pp,
    dp_replicate, edp, ep), dp_shard, cp and tp flattened then split (the tp ranks of a sequence are
    neighbours in one ep group when tp divides ep)."""
    from torch.distributed.device_mesh import init_device_mesh


    g = layout.expert_groups
    if g.etp == layout.tp:
        shape = (layout.pp, layout.dp_replicate, g.edp_shard, layout.ep, layout.tp)
        return init_device_mesh(device_type, shape, mesh_dim_names=("pp", "dp_replicate", "edp", "ep", "tp"))
    shape = (layout.pp, layout.dp_replicate, g.edp_shard, layout.ep)
    return init_device_mesh(device_type, shape, mesh_dim_names=("pp", "dp_replicate", "edp", "ep"))


# Expert tensor parallel: the dim of each stacked expert tensor split over tp, as a Megatron MLP
# per expert (w1, w3: (E, ffn, hidden) by output columns; w2: (E, hidden, ffn) by input rows; b1, b3
# with their columns). b2 is replicated: it is added once, after the sum over tp.
ETP_DIM = {"w1": 1, "w3": 1, "b1": 1, "b3": 1, "w2": 2}


def apply_ep(model: nn.Module, emesh, token_split: int = 1) -> None:
    """Split each MoE layer's stacked expert weights over the (ep, tp) dims of the expert mesh as
    DTensors: ep Shard(0) (rank r holds experts [r*E/ep, (r+1)*E/ep)), the tokens routed to them
    through all-to-all over ep; tp per ETP_DIM. Every tp rank holds the same tokens (no sequence
    parallel), so the dispatch runs identically on each and the experts' partial sums meet in one
    all-reduce over tp (GroupedExperts.forward).

    Gradient average: each rank's loss is the mean over its own tokens, and an expert's gradient
    arrives summed over the tokens of all ep ranks; FSDP then averages over the edp ranks only.
    Scaling the experts' gradient by 1/ep makes it the mean over every data-parallel rank, as the
    dense weights' (FSDP's own divide factor would need PREMUL_SUM, which gloo lacks). The tp ranks
    see the same tokens, each for its own slice: no factor. With etp = 1 (no tp dim in `emesh`)
    the `token_split` = tp ranks of a sequence each bring their shard's part of its gradient, which
    the ep exchange and the edp average add up with the data-parallel ranks': tp / ep makes it the
    mean."""
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    ep, tp = emesh["ep"].size(), emesh["tp"].size() if "tp" in emesh.mesh_dim_names else 1
    dims = tuple(d for d, n in (("ep", ep), ("tp", tp)) if n > 1)
    mesh = emesh[dims] if len(dims) > 1 else emesh[dims[0]] if dims else None
    for m in moe_layers(model):
        if ep > 1:
            m.ep_group = emesh["ep"].get_group()
        m.experts.grad_scale = token_split / ep
        if tp > 1:
            m.experts.tp_mesh = emesh["tp"]
        if mesh is None:  # whole experts, not split: only the gradient scale and the expert FSDP
            continue
        for name, p in list(m.experts.named_parameters(recurse=False)):
            placements = [Shard(0) if d == "ep" else Shard(ETP_DIM[name]) if name in ETP_DIM else Replicate()
                          for d in dims]
            setattr(m.experts, name, nn.Parameter(distribute_tensor(p.data, mesh, placements)))


def apply_expert_fsdp(model: nn.Module, emesh, mp_policy, reshard: bool) -> None:
    """fully_shard each layer's experts over the expert-data-parallel ranks (edp, with dp_replicate:
    HSDP), before the blocks are sharded over the dense mesh (whose fully_shard then leaves them
    out). FSDP shards them on dim 1 (dim 0 is already split over ep, and E/ep may be smaller than
    edp; where tp splits dim 1 too, FSDP shards each tp slice, a _StridedShard)."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Shard

    dims = ("dp_replicate", "edp") if emesh["dp_replicate"].size() > 1 else ("edp",)
    dp_mesh = emesh[dims] if len(dims) > 1 else emesh[dims[0]]
    for m in moe_layers(model):
        fully_shard(m.experts, mesh=dp_mesh, mp_policy=mp_policy, reshard_after_forward=reshard,
                    shard_placement_fn=lambda p: Shard(1))


def set_balance_group(model: nn.Module, mesh, aux_scale: float) -> None:
    """The ranks whose expert loads are summed before the aux-free bias update (every rank of this
    pipeline stage: tp ranks count the same tokens tp times, which the update's sign ignores), and
    the aux loss's share of a step (1 / grad_accum, as the LM loss)."""
    layers = moe_layers(model)
    group = None
    if layers and mesh.size() > mesh["pp"].size():
        group = mesh["dp_replicate", "dp_shard", "cp", "tp"]._flatten("moe_balance").get_group()
    for m in layers:
        m.balance_group = group
        m.aux_scale = aux_scale


@torch.no_grad()
def update_expert_bias(model: nn.Module, skip: bool = False) -> None:
    """After an optimizer step: DeepSeek-V3's bias update on every aux-free MoE layer, from the
    loads of the whole step summed over the data-parallel ranks (one all-reduce for all layers).
    `skip` (a non-finite step, agreed by every rank): the step's loads are dropped and the bias is
    left as it was, so a skipped step changes no state of the model, the bias included."""
    layers = [m for m in moe_layers(model) if m.expert_bias is not None and m.load is not None]
    if not layers:
        return
    if skip:
        for m in layers:
            m.load = None
        return
    loads = torch.stack([m.load for m in layers])
    group = getattr(layers[0], "balance_group", None)
    if group is not None:
        dist.all_reduce(loads, group=group)
    for m, load in zip(layers, loads):
        m.expert_bias += BIAS_UPDATE_RATE * torch.sign(load.mean() - load)
        m.load = None
