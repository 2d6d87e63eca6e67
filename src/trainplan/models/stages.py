"""Which decoder layers each pipeline stage holds: one split for the memory model and the trainer.

The model is cut into pp * vp chunks of consecutive layers; when the layers do not divide evenly
the first chunks get one layer more. Pipeline rank r holds chunks r, r + pp, r + 2 pp, ... (the
"loop" placement of Narayanan et al. 2021, section 2.2, which the interleaved schedule needs).
Rank r then holds ceil-or-floor(num_layers / pp) layers, the same count with or without virtual
stages, but with vp > 1 they are not consecutive: DeepSeek's first dense layers sit on rank 0's
first chunk only.

costs/states.py (parameters and layer kinds per stage), costs/memory.py (activations per stage)
and runtime/pipeline.py (the modules each rank builds) all call `stage_layers` / `chunk_layers`.
Uneven splits (Megatron's --decoder-first/last-pipeline-num-layers, fewer layers on the stages
that also hold the embedding or the head) would enter here as chunk sizes; they are not built.
"""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=1024)
def chunk_layers(num_layers: int, chunks: int) -> tuple[range, ...]:
    """Consecutive layer ranges of `chunks` pipeline chunks, the first ones one layer longer when
    the layers do not divide evenly."""
    base, extra = divmod(num_layers, chunks)
    out, start = [], 0
    for c in range(chunks):
        n = base + (1 if c < extra else 0)
        out.append(range(start, start + n))
        start += n
    return tuple(out)


def rank_chunks(pp_rank: int, pp: int, vp: int = 1) -> list[int]:
    """The chunks pipeline rank `pp_rank` runs: r, r + pp, ... (loop placement)."""
    return [pp_rank + v * pp for v in range(vp)]


@functools.lru_cache(maxsize=1024)
def stage_layers(num_layers: int, pp: int, vp: int = 1) -> tuple[tuple[int, ...], ...]:
    """Per pipeline rank, the layer indices it holds, in the order it runs its chunks."""
    chunks = chunk_layers(num_layers, pp * vp)
    return tuple(tuple(i for c in rank_chunks(r, pp, vp) for i in chunks[c]) for r in range(pp))


def max_stage_layers(num_layers: int, pp: int) -> int:
    """Layers on the fullest pipeline rank (rank 0): ceil(num_layers / pp), for any vp."""
    return -(-num_layers // pp)
