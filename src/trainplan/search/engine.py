"""The search: screen every mesh cheaply, expand the promising ones fully, rank by the priority.

For each instance type and node count (space.node_counts):

 1. Screen. Every mesh (space.meshes) is tried once, in a reference precision: the least
    recompute that fits at micro-batch 1 (walking AC_LADDER, bisecting on the number of
    fully-recomputed layers for "partial"), then the largest micro-batch that fits at that level
    (bisection over the valid micro-batches), then one estimate.
 2. Expand. The best `KEEP` meshes by throughput, and the best `KEEP` by the priority's own order,
    are expanded over precision x checkpointing level x pipeline schedule, each at its largest
    micro-batch. A more-recompute level is only estimated when it fits a larger micro-batch than
    a cheaper level already did (otherwise it is dominated: same batch, more work). The execution
    settings with a trade-off (search/settings.py: the MoE dispatcher, the context-parallel
    exchange) are chosen here, on the expanded candidates; those that only hide time are set by
    rule on every point.
 3. Rank all feasible candidates with the objective; OOM risks (memory band above capacity) are
    set aside unless allow_risk.

With --seq-len max the sequence takes the micro-batch's place: micro-batch 1, and the longest
sequence that fits (costs.fit.longest_seq: a multiple of 1024 and of 2 cp, at least the workload's
sequence, Query.min_seq_len) is found by bisection. Memory is monotone in micro-batch,
sequence length and recompute level, which is what makes each bisection exact.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from trainplan.costs.fit import MAX_SEQ_LEN, shortest_seq
from trainplan.costs.fit import longest_seq as longest_seq_len
from trainplan.errors import TrainplanError
from trainplan.hardware.types import Cluster, NodeType
from trainplan.job import Job, Workload
from trainplan.layout import Layout, check_layout, expert_refusal
from trainplan.models.checks import context_limit
from trainplan.models.stages import balanced_split, max_stage_layers
from trainplan.precision import DEFAULT, mfu_peak, recipe, searched
from trainplan.search import settings, sizing, space
from trainplan.search.candidate import Candidate
from trainplan.search.capability import runnable
from trainplan.search.evaluator import Counting, Evaluator
from trainplan.search.objectives import Objective
from trainplan.search.query import Query
from trainplan.stacks import drop_refused
from trainplan.supports import trainer_fields

KEEP = 3  # meshes expanded per node count and per ranking (throughput, priority)

Progress = Callable[[int, int, str], None]  # (done, total, note)


def largest(items: list, pred: Callable) -> object | None:
    """The last item of `items` for which `pred` holds, given that it holds on a prefix."""
    lo, hi, best = 0, len(items) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        if pred(items[mid]):
            best, lo = items[mid], mid + 1
        else:
            hi = mid - 1
    return best


def smallest(items: list, pred: Callable) -> object | None:
    """The first item of `items` for which `pred` holds, given that it holds on a suffix."""
    lo, hi, best = 0, len(items) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        if pred(items[mid]):
            best, hi = items[mid], mid - 1
        else:
            lo = mid + 1
    return best


@dataclass
class Stats:
    counts: int = 0  # (instance, node count) pairs searched
    meshes: int = 0
    screened_out: int = 0  # meshes where nothing fits at micro-batch 1 with any checkpointing
    bounded: int = 0  # node counts skipped: even at MFU 1 they cannot beat the best found
    candidates: int = 0  # layouts evaluated (estimates) by the search
    fits_calls: int = 0
    evaluate_calls: int = 0
    seconds: float = 0.0
    no_fit_counts: list = field(default_factory=list)  # (instance, nodes) where no mesh fits
    notes: list = field(default_factory=list)  # why the node count is what it is (search/sizing.py)

    def to_dict(self) -> dict:
        return {"node_counts": self.counts, "node_counts_bounded": self.bounded,
                "meshes": self.meshes, "screened_out": self.screened_out,
                "candidates": self.candidates, "memory_checks": self.fits_calls,
                "estimates": self.evaluate_calls, "seconds": self.seconds,
                "candidates_per_s": self.evaluate_calls / self.seconds if self.seconds else None}


class _Count:
    """Search of one (instance, node count): builds jobs and layouts, asks the evaluator."""

    def __init__(self, q: Query, node: NodeType, nodes: int, ev: Counting, obj: Objective):
        self.q, self.node, self.nodes, self.ev, self.obj = q, node, nodes, ev, obj
        self.cluster = Cluster(node, nodes)
        self.context = q.seq_len is None
        # the execution settings chosen by rule (search/settings.py), on every point
        self.execution, self.conditions = settings.rule_execution(q), settings.conditional(q)
        self.mesh_execution: dict[space.Mesh, object] = {}  # with the trade-offs chosen for a mesh
        # point() per its arguments: the bisections and the expansion ask for the same points again
        self._points: dict[tuple, tuple[Job, Layout] | None] = {}

    # ---- building blocks ---------------------------------------------------------------------
    def job(self, seq: int, gb: int) -> Job:
        return Job(self.q.model, self.cluster, Workload(seq, gb, self.q.tokens))

    def point(self, mesh: space.Mesh, prec: str, ac: str, k: int, mb: int, seq: int,
              sched: tuple[str, int]) -> tuple[Job, Layout] | None:
        key = (mesh, prec, ac, k, mb, seq, sched, self.mesh_execution.get(mesh))
        if key not in self._points:
            self._points[key] = self._point(mesh, prec, ac, k, mb, seq, sched)
        return self._points[key]

    def _point(self, mesh: space.Mesh, prec: str, ac: str, k: int, mb: int, seq: int,
               sched: tuple[str, int]) -> tuple[Job, Layout] | None:
        ga = self.q.batch.grad_accum(mesh.dp, mb, seq)
        if ga is None or (sched[0] == "interleaved" and ga % mesh.pp):
            return None
        r = recipe(prec)
        split = balanced_split(self.q.model.num_layers, mesh.pp, sched[1])
        layout = Layout(precision=prec, ac=ac, ac_layers=k, micro_batch=mb, grad_accum=ga,
                        pp_schedule=sched[0], vp=sched[1],
                        pp_embedding_in_split=split.embedding, pp_loss_in_split=split.loss,
                        fp8_allgather=r.low_precision is not None and r.low_precision.fsdp_allgather
                        and mesh.sharding == "fsdp",
                        chunked_loss=self.context, stack=self.q.stack,
                        execution=self.mesh_execution.get(mesh, self.execution),
                        **mesh.layout_fields(), **trainer_fields(self.q.stack, mesh.tp))
        # a --set the stack refuses on this layout (stacks.RULES) is costed off here, as it would run,
        # and so is a setting chosen by rule where the framework does not run it
        layout = settings.settle(layout, self.conditions)
        layout = drop_refused(layout)
        if mesh.etp is not None and expert_refusal(self.q.model, layout):  # etp = 1 without sequence parallel
            return None
        return self.job(seq, mesh.dp * mb * ga), layout

    def fits(self, mesh, prec, ac, k, mb, seq, sched) -> bool:
        p = self.point(mesh, prec, ac, k, mb, seq, sched)
        return p is not None and self.ev.fits(*p)

    def evaluate(self, mesh, prec, ac, k, mb, seq, sched) -> Candidate:
        job, layout = self.point(mesh, prec, ac, k, mb, seq, sched)
        return Candidate(job, layout, self.ev.evaluate(job, layout))

    # ---- checkpointing and sizes -------------------------------------------------------------
    def levels(self, mesh, prec, mb, seq, sched, coarse: bool = False) -> Iterable[tuple[str, int]]:
        """Checkpointing levels of AC_LADDER that fit at (mb, seq), cheapest first; `coarse`
        skips the bisection over partial checkpointing (the screen's rough score).

        Offloading is asked first: it holds the least, so when it does not fit nothing does, and
        most meshes of a large model are ruled out by this one memory check."""
        if not self.fits(mesh, prec, "offload", 0, mb, seq, sched):
            return  # the least memory any checkpointing level holds: nothing fits
        if not self.fits(mesh, prec, "full", 0, mb, seq, sched):
            yield "offload", 0
            return
        # Then selective before none: for large models neither fits, and when selective does
        # not, none cannot (it keeps strictly more), which saves a check.
        sel = self.fits(mesh, prec, "selective", 0, mb, seq, sched)
        if sel and self.fits(mesh, prec, "none", 0, mb, seq, sched):
            yield "none", 0
        if sel:
            yield "selective", 0
        if not coarse:
            ks = list(range(1, max_stage_layers(self.q.model.num_layers, mesh.pp)))
            k = smallest(ks, lambda k: self.fits(mesh, prec, "partial", k, mb, seq, sched))
            if k is not None:
                yield "partial", k
        yield "full", 0

    def mb_max(self, mesh, prec, ac, k, seq, sched) -> int | None:
        mbs = self.q.batch.micro_batches(mesh.dp, seq)
        return largest(mbs, lambda mb: self.fits(mesh, prec, ac, k, mb, seq, sched))

    def seq_max(self, mesh, prec, ac, k, sched) -> int | None:
        s = longest_seq_len(lambda s: self.fits(mesh, prec, ac, k, 1, s, sched), mesh.cp, self.q.min_seq_len,
                            self.q.seq_limit)
        return s or None

    def schedules(self, mesh) -> list[tuple[str, int]]:
        if mesh.pp == 1 or self.context:
            # (with --seq-len max: interleaving only adds micro-batches in flight, never length)
            return [("1f1b", 1)]
        return [("1f1b", 1)] + [("interleaved", v) for v in space.vp_options(self.q.model.num_layers, mesh.pp)]

    # ---- the two stages ----------------------------------------------------------------------
    def screen(self, mesh: space.Mesh, prec: str, floor: str | None = None) -> Candidate | None:
        """One rough candidate for the mesh. `floor`: the checkpointing level its family needed
        on more nodes; on fewer nodes it needs at least that much, so cheaper levels are skipped."""
        sched = ("1f1b", 1)
        if self.context:
            # offload holds the least: if the shortest sequence does not fit with it, none does
            if not self.fits(mesh, prec, "offload", 0, 1, shortest_seq(mesh.cp, self.q.min_seq_len), sched):
                return None
            for ac in ("full", "offload"):
                s = self.seq_max(mesh, prec, ac, 0, sched)
                if s is not None:
                    return self.evaluate(mesh, prec, ac, 0, 1, s, sched)
            return None
        seq = self.q.seq_len
        if floor in (None, "none"):
            first = next(iter(self.levels(mesh, prec, 1, seq, sched, coarse=True)), None)  # lazy
        else:
            ladder = ("selective", "full", "offload")
            first = next(((ac, 0) for ac in ladder[ladder.index(floor):]
                          if self.fits(mesh, prec, ac, 0, 1, seq, sched)), None)
        if first is None:
            return None
        mb = self.mb_max(mesh, prec, *first, seq, sched)
        return self.evaluate(mesh, prec, *first, mb, seq, sched)

    def expand(self, mesh: space.Mesh, prec: str) -> list[Candidate]:
        out: list[Candidate] = []
        for sched in self.schedules(mesh):
            if self.context:
                for ac in ("selective", "full", "offload"):
                    s = self.seq_max(mesh, prec, ac, 0, sched)
                    if s is not None:
                        out.append(self.evaluate(mesh, prec, ac, 0, 1, s, sched))
                        if ac == "full":
                            break  # offload only when full checkpointing fits nothing
            else:
                out += self._expand_fixed_seq(mesh, prec, sched)
        return out

    def try_layout(self, c: Candidate, layout: Layout) -> Candidate | None:
        """`c`'s job with another layout, when the layout is valid and fits."""
        try:
            check_layout(c.job, layout)
        except TrainplanError:
            return None
        return Candidate(c.job, layout, self.ev.evaluate(c.job, layout)) if self.ev.fits(c.job, layout) else None

    def with_settings(self, mesh: space.Mesh, cands: list[Candidate]) -> list[Candidate]:
        """The expansion of `mesh` in the first precision with the trade-off settings chosen
        (search/settings.py): tried on the best of its candidates by the priority, the winner's then
        costed on the others (a candidate it does not fit keeps its own), and the mesh's other
        precisions expanded with them."""
        if not cands or not settings.enumerates(self.q):
            return cands
        top = self.obj.rank(cands, self.q.tokens, self.q.tolerance)[0]
        won = settings.choose(top, self.q, self.try_layout)
        if won is top:
            return cands
        self.mesh_execution[mesh] = settings.carry_values(self.execution, won.layout.execution)
        out = []
        for c in cands:
            alt = won if c is top else self.try_layout(c, settings.carry(c.layout, won.layout.execution))
            out.append(c if alt is None else alt)
        return out

    def expand_like(self, mesh: space.Mesh, prec: str, ref: list[Candidate]) -> list[Candidate]:
        """Another precision at the points the reference precision's expansion found.

        Precision changes memory by a few percent (fp8 weight copies and scales), so the
        reference's checkpointing level and micro-batch usually fit again: one memory check
        each. When one does not, the full expansion runs for this precision."""
        out = []
        for c in ref:
            L = c.layout
            point = (mesh, prec, L.ac, L.ac_layers, L.micro_batch, c.seq_len, (L.pp_schedule, L.vp))
            if not self.fits(*point):
                return self.expand(mesh, prec)
            out.append(self.evaluate(*point))
        return out

    def _expand_fixed_seq(self, mesh: space.Mesh, prec: str, sched) -> list[Candidate]:
        seq = self.q.seq_len
        mbs_all = self.q.batch.micro_batches(mesh.dp, seq)
        out: list[Candidate] = []
        best_mb = 0
        for ac, k in self.levels(mesh, prec, 1, seq, sched):
            mb = self.mb_max(mesh, prec, ac, k, seq, sched)
            if mb is None or mb <= best_mb:
                continue  # dominated: a cheaper level already runs this micro-batch
            out.append(self.evaluate(mesh, prec, ac, k, mb, seq, sched))
            best_mb = mb
        # A pipeline wants several micro-batches in flight: also try the largest micro-batch
        # that leaves at least pp of them per step (a smaller bubble for a smaller GEMM).
        if mesh.pp > 1 and out and out[-1].layout.grad_accum < mesh.pp:
            top = out[-1].layout
            mbs = [m for m in mbs_all if m < top.micro_batch
                   and (self.q.batch.grad_accum(mesh.dp, m, seq) or 0) >= mesh.pp]
            if mbs:
                out.append(self.evaluate(mesh, prec, top.ac, top.ac_layers, mbs[-1], seq, sched))
        return out


def precisions(q: Query, node: NodeType) -> list[str]:
    if q.precision:
        return [q.precision] if recipe(q.precision).runs_on(node.gpu) else []
    return [r.name for r in searched(node.gpu)]


def _family(mesh: space.Mesh) -> tuple | None:
    """Meshes of one family differ only in their number of data-parallel replicas or in the
    degree of a fully sharded dp (FSDP or ZeRO-1). Their memory per GPU does not grow with the
    node count (shards shrink, replicas add nothing), so a family member that does not fit on n
    nodes does not fit on fewer either. None for plain data parallelism (dp = 1)."""
    if mesh.sharding == "none":
        return None
    if mesh.dp_replicate > 1:  # HSDP: states sharded over a fixed dp_shard
        return (mesh.tp, mesh.pp, mesh.cp, mesh.ep, mesh.etp, "hsdp", mesh.dp_shard)
    return (mesh.tp, mesh.pp, mesh.cp, mesh.ep, mesh.etp, mesh.sharding)


class Memo:
    """What a search from the most nodes down has learnt per mesh family (see _family): the
    families that do not fit, and the checkpointing level each needed."""

    def __init__(self):
        self.dead: set[tuple] = set()
        self.floor: dict[tuple, str] = {}


def search_count(q: Query, node: NodeType, nodes: int, ev: Counting, obj: Objective,
                 stats: Stats, memo: Memo | None = None) -> list[Candidate]:
    """All candidates evaluated for one instance type and node count. `memo` carries what was
    learnt on more nodes (only valid when counts are searched from the most nodes down)."""
    sc = _Count(q, node, nodes, ev, obj)
    precs = precisions(q, node)
    if not precs:
        return []
    ref = q.precision or DEFAULT
    screened: list[tuple[space.Mesh, Candidate]] = []
    memo = Memo() if memo is None else memo
    no_fsdp: set[tuple] = set()  # (tp, pp, cp, ep, etp) where full FSDP does not fit on these nodes
    for mesh in space.meshes(q.model, node, nodes, q.seq_len):
        stats.meshes += 1
        fam, degrees = _family(mesh), (mesh.tp, mesh.pp, mesh.cp, mesh.ep, mesh.etp)
        # ZeRO-1 and HSDP hold more than FSDP over all of dp (space.shardings yields it first)
        skip = fam in memo.dead or (mesh.sharding != "fsdp" or mesh.dp_replicate > 1) and degrees in no_fsdp
        c = None if skip else sc.screen(mesh, ref, memo.floor.get(fam))
        if c is None:
            stats.screened_out += 1
            if fam is not None:
                memo.dead.add(fam)
            if mesh.sharding == "fsdp" and mesh.dp_replicate == 1:
                no_fsdp.add(degrees)
        else:
            screened.append((mesh, c))
            if fam is not None and not sc.context:
                memo.floor[fam] = c.layout.ac
    if not screened:
        stats.no_fit_counts.append((node.name, nodes))
        return []
    cands = [c for _, c in screened]
    # Ranked without recompute: the screen's checkpointing is coarse (full where partial would
    # do), and a mesh must not lose its place for recompute the expansion may remove.
    order = {id(c): i for i, c in enumerate(obj.rank(cands, q.tokens, q.tolerance))}

    def best(pairs):
        by_tps = sorted(pairs, key=lambda mc: -mc[1].tokens_per_s_without_recompute)[:KEEP]
        by_obj = sorted(pairs, key=lambda mc: order.get(id(mc[1]), len(order)))[:KEEP]
        return by_tps + by_obj

    # The best meshes overall, and the best the stack can run (capability.py): `plan` recommends
    # the latter and names the stack the former would need.
    keep = list({m: None for m, _ in best(screened) + best([mc for mc in screened if runnable(mc[1])])})
    for mesh in keep:
        ref_cands = sc.with_settings(mesh, sc.expand(mesh, precs[0]))
        cands += ref_cands
        for prec in precs[1:]:
            cands += sc.expand_like(mesh, prec, ref_cands) if ref_cands else []
    return cands


def _counts(q: Query, obj: Objective) -> tuple[list[int], bool]:
    first, last, stop_at_fit = q.node_range()
    if first == last:
        return [first], False
    grid = [n for n in space.node_counts(last) if n >= first]
    if q.seq_len is None and not stop_at_fit:
        # The longest sequence is reached on the most nodes: every sharded or context-parallel
        # mesh holds less per GPU on more GPUs. Search down from the top, stop at the first fit.
        return grid[::-1], True
    return grid, (stop_at_fit and not obj.chooses_count) or obj.fewest_first


def _flops_per_token(c: Candidate) -> float:
    """Model FLOPs per token, recovered from MFU (model FLOPs / (time x GPUs x precision.mfu_peak))."""
    peak = mfu_peak(c.job.cluster.gpu)
    return c.metrics.mfu * c.gpus * peak / c.tokens_per_s


def _peak_bound(q: Query, node: NodeType, n: int, flops_per_token: float) -> float:
    """Tokens/s no plan on n nodes can exceed: every GPU at the dense peak of the fastest
    precision searched (MFU = 1)."""
    peak = max(recipe(p).peak(node.gpu) for p in precisions(q, node))
    return n * node.gpus_per_node * peak / flops_per_token


def run_search(q: Query, ev: Evaluator, progress: Progress | None = None) -> tuple[list[Candidate], Stats, Counting]:
    """Every candidate the search evaluated (feasible by the point memory estimate), with stats."""
    obj = sizing.objective_for(q)
    counting = ev if isinstance(ev, Counting) else Counting(ev, q.allow_risk)
    stats = Stats()
    t0 = time.perf_counter()
    pool: list[Candidate] = []
    plan = [(node, _counts(q, obj)) for node in q.instances]
    total = sum(len(c) for _, (c, _) in plan)
    done = 0
    for node, (counts, stop_at_fit) in plan:
        searched: set[int] = set()
        memo = Memo()
        # Without an early stop, go from the most nodes down: a mesh family that does not fit on
        # n nodes is skipped on every smaller count (see _family).
        mine, flops_per_token = [], None
        for n in (counts if stop_at_fit else counts[::-1]):  # (context's list is already reversed)
            if flops_per_token and obj.skips(_peak_bound(q, node, n, flops_per_token), mine):
                stats.bounded += 1
                continue
            found = search_count(q, node, n, counting, obj, stats, None if stop_at_fit else memo)
            if found:
                mine += found
                flops_per_token = min(_flops_per_token(c) for c in found)
            searched.add(n)
            stats.counts += 1
            done += 1
            if progress:
                progress(done, total, f"{node.name} x{n}")
            pool += found
            if stop_at_fit and found:
                break
        if _probes(q, obj) and mine:
            pool = [c for c in pool if c.instance != node.name] + _probe(q, node, mine, counting, obj, stats)
        if obj.refine_counts and len(counts) > 1:
            pool += _refine(q, node, counts, searched, pool, counting, obj, stats)
    stats.seconds = time.perf_counter() - t0
    stats.fits_calls, stats.evaluate_calls = counting.memory_calls, counting.evaluate_calls
    stats.candidates = len(pool)
    return pool, stats, counting


def _probes(q: Query, obj: Objective) -> bool:
    """Throughput without a node count or range: the fewest nodes that fit is where it starts."""
    return obj.name == "throughput" and q.nodes is None and q.max_nodes is None and q.seq_len is not None


def _probe(q, node, first, ev, obj, stats) -> list[Candidate]:
    """`first` (the fewest nodes that fit) and the larger counts sizing.probe keeps."""
    def search_at(n: int) -> list[Candidate]:
        stats.counts += 1
        return search_count(q, node, n, ev, obj, stats)

    kept, note = sizing.probe(first, q.node_range()[1], search_at)
    if note:
        stats.notes.append(note)
    return kept


def _refine(q, node, counts, searched, pool, ev, obj, stats) -> list[Candidate]:
    """Search every node count between the grid neighbours of this instance's best count."""
    mine = [c for c in pool if c.instance == node.name]
    if not mine:
        return []
    best = obj.rank(mine, q.tokens, q.tolerance)[0].nodes
    i = counts.index(best)
    lo = counts[i - 1] if i > 0 else best
    hi = counts[i + 1] if i + 1 < len(counts) else best
    out = []
    for n in range(lo + 1, hi):
        if n not in searched:
            out += search_count(q, node, n, ev, obj, stats)
            stats.counts += 1
    return out


def feasible(pool: list[Candidate], q: Query) -> tuple[list[Candidate], int]:
    """(plans that may be recommended, plans that miss the deadline or budget). OOM risks never
    reach the pool unless allow_risk: the fit rule (evaluator.Counting.fits) keeps them out. A
    plan that misses is not dropped: the sizing rule ranks it after those that meet the goal, so
    that when none does the answer says by how much the nearest misses (search/sizing.py)."""
    goal = sizing.Goal.of(q)
    goal.check()
    return pool, sum(not sizing.meets(c, goal) for c in pool) if goal.sized else 0


def longest_seq(ev: Counting, job: Job, layout: Layout) -> int:
    """Longest sequence that fits `layout` at micro-batch 1 by the search's fit rule (the memory
    band included); 0 if none. The granularity and bisection are costs.fit.longest_seq's."""
    from dataclasses import replace

    lay = replace(layout, micro_batch=1, grad_accum=1)

    def ok(s: int) -> bool:
        return ev.fits(Job(job.model, job.cluster, Workload(s, lay.dp, job.workload.tokens)), lay)

    return longest_seq_len(ok, lay.cp, limit=min(MAX_SEQ_LEN, context_limit(job.model) or MAX_SEQ_LEN))
