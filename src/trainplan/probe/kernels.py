"""Time one kernel of each kind with torch and return its achieved rate.

Timing: `warmup` runs, then the median of `repeats` runs, each synchronised (CUDA events on a GPU,
perf_counter on CPU). FLOPs are those the kernel does: a GEMM 2mnk, causal attention half the
s x s work (forward 2 x 2 s^2 h d / 2, backward 2.5x the forward, FlashAttention-2 sec. 3.1);
element-wise bytes are one read of each input and one write of each output.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F

from trainplan.precision import torch_dtype_name


def torch_dtype(compute_dtype: str) -> torch.dtype:
    # the names are the recipe registry's (precision.py); runtime/dtypes.py is out of probe's reach
    # (probe and runtime are sibling layers, tests/core/test_layering.py)
    return getattr(torch, torch_dtype_name(compute_dtype))


def _timer(device: str, fn, repeats: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if device == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return max(statistics.median(times), 1e-9)


def gemm_tflops(m: int, n: int, k: int, dtype: str, device: str, repeats: int) -> float | None:
    """bf16/fp16 through torch.matmul (cuBLASLt); fp8 through torch._scaled_mm, tensorwise scales
    (None where this torch or device has no fp8 GEMM)."""
    if dtype == "fp8":
        if device != "cuda" or not hasattr(torch, "_scaled_mm"):
            return None
        a = torch.randn(m, k, device=device).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device=device).to(torch.float8_e4m3fn).t()
        one = torch.ones((), device=device)
        try:
            t = _timer(device, lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
                       repeats)
        except RuntimeError:
            return None
    else:
        a = torch.randn(m, k, device=device, dtype=torch_dtype(dtype))
        b = torch.randn(k, n, device=device, dtype=torch_dtype(dtype))
        t = _timer(device, lambda: a @ b, repeats)
    return 2.0 * m * n * k / t / 1e12


def grouped_gemm_tflops(experts: int, tokens: int, n: int, k: int, device: str, repeats: int) -> dict[str, float]:
    """Forward, dgrad and wgrad of `experts` equal-sized expert GEMMs as one batched matmul (the
    balanced-routing case of a grouped GEMM)."""
    dt = torch_dtype("bf16")
    x = torch.randn(experts, tokens, k, device=device, dtype=dt)
    w = torch.randn(experts, k, n, device=device, dtype=dt)
    dy = torch.randn(experts, tokens, n, device=device, dtype=dt)
    flops = 2.0 * experts * tokens * n * k
    runs = {"fwd": lambda: torch.bmm(x, w), "dgrad": lambda: torch.bmm(dy, w.transpose(1, 2)),
            "wgrad": lambda: torch.bmm(x.transpose(1, 2), dy)}
    return {p: flops / _timer(device, fn, repeats) / 1e12 for p, fn in runs.items()}


def attention_tflops(seq: int, heads: int, kv_heads: int, head_dim: int, device: str, repeats: int) -> dict[str, float]:
    """Causal scaled_dot_product_attention (flash kernel on a GPU), forward and backward, batch 1."""
    dt = torch_dtype("bf16")
    q = torch.randn(1, heads, seq, head_dim, device=device, dtype=dt, requires_grad=True)
    k = torch.randn(1, kv_heads, seq, head_dim, device=device, dtype=dt, requires_grad=True)
    v = torch.randn(1, kv_heads, seq, head_dim, device=device, dtype=dt, requires_grad=True)
    gqa = {"enable_gqa": True} if kv_heads != heads else {}

    def fwd():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, **gqa)

    out = fwd()
    grad = torch.randn_like(out)
    t_fwd = _timer(device, fwd, repeats)
    t_bwd = _timer(device, lambda: torch.autograd.grad(fwd(), (q, k, v), grad), repeats) - t_fwd
    flops = 2 * 2.0 * seq * seq * heads * head_dim / 2  # causal: half of QK^T and PV
    return {"fwd": flops / t_fwd / 1e12, "bwd": 2.5 * flops / max(t_bwd, 1e-9) / 1e12}


def elementwise_gbps(elems: int, device: str, repeats: int) -> dict[str, float]:
    """RMSNorm, SwiGLU, rotary embedding and cross-entropy as eager torch runs them; bytes = one read
    of each input, one write of each output (bf16; the loss reads fp32 logits)."""
    dt = torch_dtype("bf16")
    h = 4096 if elems >= 4096 * 16 else 64
    rows = max(1, elems // h)
    x = torch.randn(rows, h, device=device, dtype=dt)
    g = torch.randn(rows, h, device=device, dtype=dt)
    w = torch.ones(h, device=device, dtype=dt)
    cos, sin = torch.randn(rows, h // 2, device=device, dtype=dt), torch.randn(rows, h // 2, device=device, dtype=dt)
    vocab = 32768 if elems >= 32768 * 16 else 256
    logits = torch.randn(max(1, elems // vocab), vocab, device=device, dtype=torch.float32)
    target = torch.randint(0, vocab, (logits.shape[0],), device=device)
    e = rows * h * 2

    def rope():
        a, b = x[:, : h // 2], x[:, h // 2:]
        return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)

    kernels = {
        "norm": (lambda: F.rms_norm(x, (h,), w), 2 * e),
        "swiglu": (lambda: F.silu(x) * g, 3 * e),
        "rotary": (rope, 2 * e + 2 * cos.numel() * 2),
        "cross_entropy": (lambda: F.cross_entropy(logits, target), logits.numel() * 4),
    }
    return {name: nbytes / _timer(device, fn, repeats) / 1e9 for name, (fn, nbytes) in kernels.items()}
