"""Memoisation of the cost model's pure functions, for the search's inner loop.

A search prices thousands of layouts of one job, and most of them share their expensive parts: the
micro-batch compute of a stage depends on the GEMM shapes (tp, tokens, layers on the stage,
recipe...), not on the data-parallel degree or the gradient accumulation that tell candidates
apart. `memoised` caches such a function by its arguments:

  * the leading positional arguments are the job's large objects (model spec, FLOP tables, GPU,
    profile): keyed by identity, because hashing a model spec field by field costs more than a
    cache hit saves, and because a Profile compares equal to the same coefficients with other
    machine tables (its dict and machine fields are compare=False). The cache holds them alive, so
    an id cannot be reused by another object while its entry exists;
  * the keyword arguments are the shape: keyed by value (they must be hashable).

The cache is bounded: when it holds `maxsize` entries it is emptied (a search touches far fewer; a
long-lived process running many searches does not grow without bound). `cache_clear()` empties it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def memoised(maxsize: int = 16384) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Cache fn(*objects, **shape) by (identity of objects, value of shape); see the module doc."""

    def decorate(fn: Callable[..., T]) -> Callable[..., T]:
        cache: dict[tuple, tuple[tuple, T]] = {}

        @functools.wraps(fn)
        def wrapper(*objects, **shape):
            key = (*map(id, objects), *shape.items())  # call sites keep their order: a new order only misses
            hit = cache.get(key)
            if hit is not None:
                return hit[1]
            value = fn(*objects, **shape)
            if len(cache) >= maxsize:
                cache.clear()
            cache[key] = (objects, value)  # objects held: their ids stay theirs while the entry lives
            return value

        wrapper.cache_clear = cache.clear  # type: ignore[attr-defined]
        wrapper.cache_len = cache.__len__  # type: ignore[attr-defined]
        return wrapper

    return decorate
