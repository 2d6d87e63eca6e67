"""The shapes a probe measures. `full` on a GPU covers the shapes of 1B-400B dense models and MoE
experts at the micro-batches plans use (about 15 minutes on one GPU); `quick` a coarser grid of the
same kinds (about 3 minutes); on CPU a tiny grid that runs the same code in seconds (CI)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Grid:
    gemm_mnk: tuple[tuple[int, int, int], ...]
    dtypes: tuple[str, ...]
    grouped: tuple[tuple[int, int, int, int], ...]  # experts, tokens per expert, n, k
    attention: tuple[tuple[int, int, int, int], ...]  # seq, heads, kv heads, head dim
    elementwise_elems: tuple[int, ...]  # tokens x hidden elements per element-wise kernel
    message_bytes: tuple[int, ...]
    repeats: int


def _cube(values) -> tuple[tuple[int, int, int], ...]:
    return tuple((m, n, k) for m in values for n in values for k in values)


def grid(device: str, quick: bool) -> Grid:
    if device == "cpu":
        return Grid(gemm_mnk=_cube((32, 64)), dtypes=("bf16",), grouped=((4, 16, 32, 32),),
                    attention=((64, 2, 1, 16),), elementwise_elems=(1 << 12,),
                    message_bytes=(1 << 10, 1 << 14), repeats=2)
    if quick:
        return Grid(gemm_mnk=_cube((1024, 4096, 16384)), dtypes=("bf16", "fp8"),
                    grouped=((8, 1024, 4096, 4096), (64, 256, 2048, 4096)),
                    attention=tuple((s, h, 8, 128) for s in (2048, 8192) for h in (8, 32)),
                    elementwise_elems=(1 << 24, 1 << 28), message_bytes=tuple(1 << p for p in range(20, 34, 3)),
                    repeats=10)
    return Grid(gemm_mnk=_cube((512, 1024, 2048, 4096, 8192, 16384, 32768)), dtypes=("bf16", "fp8"),
                grouped=tuple((e, t, n, 4096) for e in (8, 32, 128) for t in (128, 512, 2048) for n in (1536, 4096)),
                attention=tuple((s, h, kv, d) for s in (1024, 4096, 16384) for h in (8, 32, 64)
                                for kv in (8,) for d in (64, 128)),
                elementwise_elems=(1 << 20, 1 << 24, 1 << 28), message_bytes=tuple(1 << p for p in range(16, 35, 2)),
                repeats=20)
