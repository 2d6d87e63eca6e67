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
"""

from __future__ import annotations

from dataclasses import dataclass

TFLOPS = 1e12
GBPS = 1e9


@dataclass(frozen=True, slots=True)
class PassTimes:
    fwd: float
    bwd: float  # dgrad + wgrad
    notes: tuple[str, ...] = ()


def _desc(t) -> str:
    return " ".join([t.kind, *(f"{k}={v}" for k, v in t.select)])


def _notes(t, lk) -> tuple[str, ...]:
    return tuple(f"{_desc(t)}: {o}" for o in lk.outside)


def dense_gemm(machine, dtype: str, flops: float, m: float, k: float, n: float, residual: float) -> PassTimes | None:
    """Seconds of the three passes of a linear layer whose forward does `flops` (= 2 m k n)."""
    t = machine.find("gemm", dtype=dtype) if machine is not None else None
    if t is None:
        return None
    f = t.lookup(m=m, n=n, k=k)
    d = t.lookup(m=m, n=k, k=n)
    w = t.lookup(m=n, n=k, k=m)
    r = TFLOPS * residual
    return PassTimes(flops / (f.value * r), flops / (d.value * r) + flops / (w.value * r),
                     _notes(t, f) + _notes(t, d) + _notes(t, w))


def grouped_gemm(machine, dtype: str, flops: float, experts: float, tokens_per_expert: float, k: float, n: float,
                 residual: float) -> PassTimes | None:
    """Seconds of a routed-expert layer's passes, from grouped-GEMM tables of all three passes."""
    if machine is None:
        return None
    tabs = [machine.find("grouped_gemm", dtype=dtype, **{"pass": p}) for p in ("fwd", "dgrad", "wgrad")]
    if any(t is None for t in tabs):
        return None
    q = {"experts": max(experts, 1.0), "tokens_per_expert": max(tokens_per_expert, 1.0), "n": n, "k": k}
    lks = [t.lookup(**q) for t in tabs]
    r = TFLOPS * residual
    notes = sum((_notes(t, lk) for t, lk in zip(tabs, lks, strict=True)), ())
    return PassTimes(flops / (lks[0].value * r), flops / (lks[1].value * r) + flops / (lks[2].value * r), notes)


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
