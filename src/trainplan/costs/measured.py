"""Kernel rates read from a machine profile (trainplan/machine), where it has a table for the kernel.

Each function returns None where the profile has no table, and the caller (costs/compute.py) uses its
formula; a lookup beyond a table's range returns the table's edge and a note (machine/interp.py),
which the estimate reports. The calibration profile's residuals (`machine_compute`, `machine_hbm`)
scale what the tables say: they are corrections, not the model.

GEMM passes of a linear layer with forward Y[M,N] = X[M,K] W[K,N] (M tokens):
  forward  M x K x N
  dgrad    dX = dY W^T:  M x N x K   (m=M, n=K, k=N)
  wgrad    dW = X^T dY:  the output dimension against the tokens: (m=N, n=K, k=M) as Transformer
           Engine and SimuMax name it
so a table measured over real shapes prices each pass at its own shape.

A low-precision GEMM (fp8, mxfp8, nvfp4) with no rows of its own, in a profile that has rows of the
recipe's compute dtype (bf16) and a `gemm_ratio` table dtype:bf16, runs each pass at the bf16 table's
rate x the ratio at that pass's shape, capped at the dtype's measured best-shape rate: both dtypes are
then priced from one measured footing. The estimate says so and widens its band by the ratio table's
leave-one-out error (PassTimes.derived, derived_error). Without a ratio the formula applies.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainplan.memo import memoised

TFLOPS = 1e12
GBPS = 1e9


@dataclass(frozen=True, slots=True)
class PassTimes:
    fwd: float
    bwd: float  # dgrad + wgrad
    notes: tuple[str, ...] = ()
    # priced through a gemm_ratio table (dtype:over x the `over` dtype's measured rows), one line per
    # table, and the largest of those tables' leave-one-out errors (machine/interp.Grid.loo_error)
    derived: tuple[str, ...] = ()
    derived_error: float = 0.0


@dataclass(frozen=True, slots=True)
class Ratio:
    """A low-precision GEMM priced from the `base` dtype's rows: rate = base rate x table, never above
    `ceiling_tflops` (the dtype's measured best-shape rate, precision.Recipe.matmul_ceiling)."""

    table: object  # machine.profile.Table of kind gemm_ratio
    ceiling_tflops: float

    def line(self) -> str:
        """What the estimate prints (the table's source is in the machine profile)."""
        t = self.table
        d, o = t.selector("dtype"), t.selector("over")
        return f"{d} GEMMs priced as {o} measured x cited {d}:{o} ratio (band +{t.grid.loo_error:.1%})"


def _desc(t) -> str:
    return " ".join([t.kind, *(f"{k}={v}" for k, v in t.select)])


def _notes(t, lk) -> tuple[str, ...]:
    return tuple(f"{_desc(t)}: {o}" for o in lk.outside)


def ratio_for(machine, dtype: str, base: str, ceiling_flops: float) -> Ratio | None:
    """The profile's dtype:base ratio, where it has one and dtype has no rows of its own."""
    if machine is None or dtype == base:
        return None
    t = machine.find("gemm_ratio", dtype=dtype, over=base)
    return None if t is None else Ratio(t, ceiling_flops / TFLOPS)


def _rates(tabs, queries, ratio: Ratio | None, residual: float) -> tuple[list[float], tuple[str, ...]]:
    """FLOP/s of each pass (table i at queries[i]; with a ratio, its value at the pass's (m, n, k)),
    and the notes of lookups beyond a table's range."""
    out, notes = [], ()
    for t, (q, mnk) in zip(tabs, queries, strict=True):
        lk = t.lookup(**q)
        v, notes = lk.value, notes + _notes(t, lk)
        if ratio is not None:
            rk = ratio.table.lookup(**mnk)
            v, notes = min(v * rk.value * residual, ratio.ceiling_tflops), notes + _notes(ratio.table, rk)
        else:
            v *= residual
        out.append(v * TFLOPS)
    return out, notes


def _times(flops: float, rates: list[float], notes, ratio: Ratio | None) -> PassTimes:
    derived = () if ratio is None else (ratio.line(),)
    err = 0.0 if ratio is None else ratio.table.grid.loo_error
    return PassTimes(flops / rates[0], flops / rates[1] + flops / rates[2], notes, derived, err)


def dense_gemm(machine, dtype: str, flops: float, m: float, k: float, n: float, residual: float,
               ratio: Ratio | None = None) -> PassTimes | None:
    """Seconds of the three passes of a linear layer whose forward does `flops` (= 2 m k n), from the
    `dtype` table; with `ratio`, `dtype` is the ratio's base and each pass runs at base x ratio."""
    t = machine.find("gemm", dtype=dtype) if machine is not None else None
    if t is None:
        return None
    rates, notes = _dense_rates(t, m=m, k=k, n=n, residual=residual, ratio=ratio)
    return _times(flops, rates, notes, ratio)


@memoised()  # by shape: the search prices the same GEMM shapes in many layouts
def _dense_rates(t, *, m: float, k: float, n: float, residual: float, ratio: Ratio | None):
    shapes = [{"m": m, "n": n, "k": k}, {"m": m, "n": k, "k": n}, {"m": n, "n": k, "k": m}]
    rates, notes = _rates([t] * 3, [(s, s) for s in shapes], ratio, residual)
    return tuple(rates), notes


def grouped_gemm(machine, dtype: str, flops: float, experts: float, tokens_per_expert: float, k: float, n: float,
                 residual: float, ratio: Ratio | None = None) -> PassTimes | None:
    """Seconds of a routed-expert layer's passes, from grouped-GEMM tables of all three passes (each
    named by the forward's shape; a ratio is read at the pass's own GEMM shape, as dense_gemm's)."""
    if machine is None:
        return None
    tabs = [machine.find("grouped_gemm", dtype=dtype, **{"pass": p}) for p in ("fwd", "dgrad", "wgrad")]
    if any(t is None for t in tabs):
        return None
    rates, notes = _grouped_rates(*tabs, experts=experts, tokens_per_expert=tokens_per_expert, k=k, n=n,
                                  residual=residual, ratio=ratio)
    return _times(flops, rates, notes, ratio)


@memoised()
def _grouped_rates(fwd, dgrad, wgrad, *, experts: float, tokens_per_expert: float, k: float, n: float,
                   residual: float, ratio: Ratio | None):
    tpe = max(tokens_per_expert, 1.0)
    q = {"experts": max(experts, 1.0), "tokens_per_expert": tpe, "n": n, "k": k}
    shapes = [{"m": tpe, "n": n, "k": k}, {"m": tpe, "n": k, "k": n}, {"m": n, "n": k, "k": tpe}]
    rates, notes = _rates([fwd, dgrad, wgrad], [(q, s) for s in shapes], ratio, residual)
    return tuple(rates), notes


def attention_rates(machine, te_attention: bool, slower_kernel: float, seq: float, heads: float, kv_heads: float,
                    head_dim: float, residual: float) -> tuple[float, float, tuple[str, ...]] | None:
    """(forward FLOP/s, backward FLOP/s, notes) of causal flash attention; FLOPs as the kernel does
    them (causal: half the s x s work). A table of Transformer Engine's kernel prices an SDPA (FA2)
    run at `slower_kernel` of it (costs/compute.FA2_ON_NEWER, 1.0 where FA2 is native); a table
    measured with SDPA does not describe TE's kernel (None: the formula applies)."""
    if machine is None:
        return None
    want = "te" if te_attention else "sdpa"
    for kernel, factor in [(want, 1.0)] + ([("te", slower_kernel)] if want == "sdpa" else []):
        f = machine.find("attention", kernel=kernel, causal=True, **{"pass": "fwd"})
        b = machine.find("attention", kernel=kernel, causal=True, **{"pass": "bwd"})
        if f is None or b is None:
            continue
        q = {"seq": seq, "heads": max(heads, 1.0), "kv_heads": max(kv_heads, 1.0), "head_dim": head_dim}
        lf, lb = f.lookup(**q), b.lookup(**q)
        r = TFLOPS * residual * factor
        return lf.value * r, lb.value * r, _notes(f, lf) + _notes(b, lb)
    return None


def elementwise_bandwidth(machine, kernel: str, residual: float) -> float | None:
    """Achieved bytes/s of memory-bound element-wise kernels of `kernel` class (else the "default"
    class), size-independent lookups at the table's largest measured size."""
    if machine is None:
        return None
    t = machine.find("elementwise", kernel=kernel) or machine.find("elementwise", kernel="default")
    if t is None:
        return None
    size = {"bytes": t.grid.hi(0)} if t.grid.axes else {}
    return t.lookup(**size).value * GBPS * residual
