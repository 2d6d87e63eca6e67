"""Which decoder layers each pipeline stage holds: one split for the memory model, the step time
and the trainer.

The model is cut into pp * vp chunks of consecutive layers. Pipeline rank r holds chunks r, r + pp,
r + 2 pp, ... (the "loop" placement of Narayanan et al. 2021, section 2.2, which the interleaved
schedule needs): chunk index c = v * pp + r for virtual stage v. With vp > 1 a rank's layers are
not consecutive: DeepSeek's first dense layers sit on rank 0's first chunk only.

How many layers each chunk gets (`Uneven` says which rule; Megatron-LM @d98e8a6,
megatron/core/transformer/transformer_block.py get_num_layers_to_build and transformer_layer.py
get_transformer_layer_offset, checked by transformer_config.py __post_init__):

  * even (the default): the layers split over the pp * vp chunks, the first chunks one layer
    longer when they do not divide (trainplan's trainer and torchtitan's split run this).
  * first / last stage counts (Megatron's --decoder-first-pipeline-num-layers and
    --decoder-last-pipeline-num-layers): rank 0 holds `first` layers, the last rank `last`, and
    the middle ranks share the rest equally. Megatron requires the rest to divide over the middle
    ranks, and with vp each rank's count to divide by vp (each of its chunks holds count / vp).
  * embedding / loss in the split (--account-for-embedding-in-pipeline-split,
    --account-for-loss-in-pipeline-split): the embedding and the loss count as one layer each,
    (num_layers + 1 + 1) must divide by pp (and the per-rank count by vp); the first chunk of rank
    0 then builds one decoder layer fewer, the last chunk of the last rank too. Llama 3 405B on 16
    stages with vp 8 (Llama 3 paper, arXiv:2407.21783 sec. 3.3.2: "we reduce one Transformer layer
    each from the first and the last stages") is (126 + 2) / 128 = 1 layer per chunk, the first
    chunk holding only the embedding and the last only the output layer and loss.
    Megatron refuses the two rules together.

costs/states.py (parameters and layer kinds per stage), costs/memory.py (activations per stage),
costs/steptime.py (the slowest stage) and runtime/pipeline.py (the modules each rank builds) all
call `stage_layers` / `pipeline_chunks`; layout.check_layout calls `check_split`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from trainplan.errors import TrainplanError


@dataclass(frozen=True, slots=True)
class Uneven:
    """Megatron's uneven pipeline options (module doc); the default is the even split."""

    first: int = 0  # decoder layers on pipeline rank 0 (0: not set)
    last: int = 0  # decoder layers on the last pipeline rank (0: not set)
    embedding: bool = False  # the embedding counts as a layer in the split
    loss: bool = False  # the output layer and loss count as a layer in the split

    @property
    def counts_stages(self) -> bool:
        return bool(self.first or self.last)

    @property
    def counts_ends(self) -> bool:
        return self.embedding or self.loss


EVEN = Uneven()


def balanced_split(num_layers: int, pp: int, vp: int = 1) -> Uneven:
    """The split the search proposes: the even one when the layers divide into the chunks, else the
    embedding and loss counted as layers when that divides (Llama 3 405B: 126 + 2 on 16 x 8),
    which unloads the two stages that also hold the embedding and the head."""
    if pp > 1 and num_layers % (pp * vp) and (num_layers + 2) % (pp * vp) == 0:
        return Uneven(embedding=True, loss=True)
    return EVEN


def check_split(num_layers: int, pp: int, vp: int = 1, uneven: Uneven = EVEN) -> None:
    """Refuse a split Megatron's rules refuse (module doc), with what to change."""
    u = uneven
    where = "pipeline split"
    if u.counts_stages and u.counts_ends:
        raise TrainplanError(f"{where}: pp_first/last_stage_layers and the embedding/loss accounting cannot be "
                             "combined (Megatron refuses it); choose one")
    if u.counts_stages:
        if pp < 2:
            raise TrainplanError(f"{where}: pp_first/last_stage_layers need pp >= 2")
        for name, n in (("pp_first_stage_layers", u.first), ("pp_last_stage_layers", u.last)):
            if n < 0:
                raise TrainplanError(f"{where}: {name} must be >= 0 (0: not set), got {n}")
            if n and n % vp:
                raise TrainplanError(f"{where}: {name}={n} must divide by vp={vp} (each chunk holds {name}/vp)")
        middle = pp - (u.first > 0) - (u.last > 0)
        rest = num_layers - u.first - u.last
        if rest < 0 or bool(rest) != bool(middle):
            raise TrainplanError(f"{where}: {rest} layers left for {middle} middle stages; change "
                                 f"pp_first/last_stage_layers ({num_layers} layers)")
        if middle and (rest % middle or (rest // middle) % vp):
            raise TrainplanError(f"{where}: the {rest} middle layers must split evenly over {middle} middle "
                                 f"stages, a multiple of vp={vp} each; change pp_first/last_stage_layers")
    elif u.counts_ends:
        n = num_layers + u.embedding + u.loss
        if n % (pp * vp):
            raise TrainplanError(f"{where}: {num_layers} layers + embedding/loss = {n} must divide by pp*vp = "
                                 f"{pp * vp} with the embedding/loss in the split; change pp or vp")
    elif num_layers < pp * vp:
        raise TrainplanError(f"{where}: pp*vp = {pp * vp} pipeline chunks but only {num_layers} layers; lower pp "
                             "or vp, or count the embedding and loss in the split (pp_embedding_in_split=true "
                             "pp_loss_in_split=true)")


@functools.lru_cache(maxsize=1024)
def pipeline_chunks(num_layers: int, pp: int, vp: int = 1, uneven: Uneven = EVEN) -> tuple[range, ...]:
    """Consecutive layer ranges of the pp * vp chunks, in chunk order (c = v * pp + r)."""
    u = uneven
    if u.counts_stages:
        middle = pp - (u.first > 0) - (u.last > 0)
        per_middle = (num_layers - u.first - u.last) // middle if middle else 0

        def size(c: int) -> int:
            r = c % pp
            n = u.first if r == 0 and u.first else u.last if r == pp - 1 and u.last else per_middle
            return n // vp

        sizes = [size(c) for c in range(pp * vp)]
    elif u.counts_ends:
        per = (num_layers + u.embedding + u.loss) // (pp * vp)
        sizes = [per] * (pp * vp)
        sizes[0] -= u.embedding
        sizes[-1] -= u.loss
    else:
        base, extra = divmod(num_layers, pp * vp)
        sizes = [base + (1 if c < extra else 0) for c in range(pp * vp)]
    out, start = [], 0
    for n in sizes:
        out.append(range(start, start + n))
        start += n
    assert start == num_layers, "check_split refuses splits that do not cover the layers"
    return tuple(out)


def chunk_layers(num_layers: int, chunks: int) -> tuple[range, ...]:
    """The even split of the layers into `chunks` consecutive ranges (first ones longer)."""
    return pipeline_chunks(num_layers, chunks, 1)


def rank_chunks(pp_rank: int, pp: int, vp: int = 1) -> list[int]:
    """The chunks pipeline rank `pp_rank` runs: r, r + pp, ... (loop placement)."""
    return [pp_rank + v * pp for v in range(vp)]


@functools.lru_cache(maxsize=1024)
def stage_layers(num_layers: int, pp: int, vp: int = 1, uneven: Uneven = EVEN) -> tuple[tuple[int, ...], ...]:
    """Per pipeline rank, the layer indices it holds, in the order it runs its chunks."""
    chunks = pipeline_chunks(num_layers, pp, vp, uneven)
    return tuple(tuple(i for c in rank_chunks(r, pp, vp) for i in chunks[c]) for r in range(pp))


def max_stage_layers(num_layers: int, pp: int, vp: int = 1, uneven: Uneven = EVEN) -> int:
    """Layers on the fullest pipeline rank (ceil(num_layers / pp) for the even split, any vp)."""
    return max(len(s) for s in stage_layers(num_layers, pp, vp, uneven))
