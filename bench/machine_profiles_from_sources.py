"""Rebuild the packaged machine profiles' tables from their public sources (run by hand, not in CI).

    python bench/machine_profiles_from_sources.py SIMUMAX_B200_JSON > src/trainplan/machine/profiles/b200-180gb.json

SIMUMAX_B200_JSON: MooreThreads/SimuMax configs/system/b200_bf16_ceperm.json @e691807 (measured B200
operator efficiencies, a fraction of the 2250 TFLOP/s bf16 dense peak and of 8000 GB/s HBM). Only that
file's measured operator data is read; SimuMax's end-to-end B200 result tables are a held-out check and
are not read here. The network points are typed in from docs cited per table, and so are the
low-precision GEMM ratios (XLA_SM100, TORCHAO_NVFP4 below): shape-resolved microbenchmarks of a
low-precision GEMM and of bf16 on the same B200, of which only the ratio is kept (the bf16 level is
SimuMax's, measured with Transformer Engine).
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections import defaultdict

PEAK_TFLOPS = 2250.0
HBM_GBPS = 8000.0
GiB = 1 << 30
SIMUMAX = "MooreThreads/SimuMax configs/system/b200_bf16_ceperm.json @e691807"


def _kv(key: str) -> dict:
    return dict(re.findall(r"(\w+)=([^,]+)", key))


def _gmean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def gemm_table(op: dict) -> dict:
    pts = defaultdict(list)
    for key, eff in op["matmul"]["accurate_efficient_factor"].items():
        f = _kv(key)
        pts[(int(f["m"]), int(f["n"]), int(f["k"]))].append(eff * PEAK_TFLOPS)
    return {"kind": "gemm", "dtype": "bf16", "axes": ["m", "n", "k"],
            "points": [[*mnk, round(_gmean(v), 1)] for mnk, v in sorted(pts.items())],
            "source": f"{SIMUMAX}: matmul accurate_efficient_factor x {PEAK_TFLOPS:g} TFLOP/s (Transformer Engine "
                      "GEMMs; the TN/NN/NT layouts of one shape averaged geometrically)"}


def grouped_tables(op: dict) -> list[dict]:
    passes = {"fwd": "fwd", "bwd_grad_act": "dgrad", "bwd_grad_w": "wgrad"}
    by_pass = defaultdict(lambda: defaultdict(list))
    for key, eff in op["group_matmul"]["accurate_efficient_factor"].items():
        f = _kv(key)
        by_pass[passes[f["stage"]]][(int(f["ng"]), int(f["M"]), int(f["N"]), int(f["K"]))].append(eff * PEAK_TFLOPS)
    return [{"kind": "grouped_gemm", "dtype": "bf16", "pass": p, "axes": ["experts", "tokens_per_expert", "n", "k"],
             "points": [[*s, round(_gmean(v), 1)] for s, v in sorted(pts.items())],
             "source": f"{SIMUMAX}: group_matmul accurate_efficient_factor x {PEAK_TFLOPS:g} TFLOP/s, stage "
                       f"{next(k for k, v in passes.items() if v == p)} (shape named by the forward GEMM)"}
            for p, pts in sorted(by_pass.items())]


def attention_tables(op: dict) -> list[dict]:
    out = []
    for name, p in (("sdp_fwd", "fwd"), ("sdp_bwd", "bwd")):
        pts = defaultdict(list)
        for key, eff in op[name]["accurate_efficient_factor"].items():
            f = _kv(key)
            if int(f["batch"]) != 1:
                continue
            shape = (int(f["seq_len"]), int(f["head_num"]), int(f["kv_head_num"]), int(f["qk_head_dim"]))
            # SimuMax counts the full s x s work of a causal kernel (simu_tools/efficency_test/
            # test_fa_efficiency.py: fwd 2*s^2*h*(dqk+dv), bwd 2.5x that); the kernel does half of it
            pts[shape].append(eff * PEAK_TFLOPS / 2)
        out.append({"kind": "attention", "pass": p, "causal": True, "kernel": "te",
                    "axes": ["seq", "heads", "kv_heads", "head_dim"],
                    "points": [[*s, round(_gmean(v), 1)] for s, v in sorted(pts.items())],
                    "source": f"{SIMUMAX}: {name} accurate_efficient_factor x {PEAK_TFLOPS:g} / 2 TFLOP/s "
                              "(TE DotProductAttention, causal, batch 1; SimuMax counts the full s x s FLOPs, the "
                              "causal kernel does half; contiguous and strided q/k/v averaged geometrically)"})
    return out


def elementwise_tables(bw: dict) -> list[dict]:
    return [{"kind": "elementwise", "kernel": "default", "axes": [],
             "points": [[round(bw["default"]["efficient_factor"] * HBM_GBPS, 1)]],
             "source": f"{SIMUMAX}: bandwidth.default efficient_factor x {HBM_GBPS:g} GB/s (memory-bound "
                       "element-wise operators; no size dependence given)"}]


def nvlink_tables(net: dict) -> list[dict]:
    out = [{"kind": "collective", "op": "all_reduce", "tier": "nvlink", "axes": ["bytes", "ranks"],
            "points": [[4 * GiB, 8, 740.6], [16 * GiB, 8, 845.7]],
            "source": "stas00/ml-engineering network/README.md @744d01e: 1x p6-b200 (8x B200) torch all_reduce_bench "
                      "busbw 740.6 GB/s @4 GiB, 845.7 @16 GiB (NCCL picks NVLS)"}]
    for op, name in (("all_gather", "all_gather"), ("reduce_scatter", "reduce_scatter"), ("all_to_all", "all2all")):
        o = net["high_intra_node"]["op"][name]
        entry = {"kind": "collective", "op": op, "tier": "nvlink", "axes": [],
                 "points": [[round(o["efficient_factor"] * net["high_intra_node"]["bandwidth"]["gbps"], 1)]],
                 "source": f"{SIMUMAX}: networks.high_intra_node.op.{name} efficient_factor x 900 GB/s "
                           "(large-message bus bandwidth of SimuMax's fit to its B200 measurements)"}
        if o.get("fixed_latency_us"):
            entry["latency_us"] = round(o["fixed_latency_us"], 1)
        out.append(entry)
    return out


EFA = [{"kind": "collective", "op": "all_reduce", "tier": "efa", "axes": ["bytes", "ranks"],
        "instances": ["ml.p6-b200.48xlarge"], "points": [[4 * GiB, 32, 377.3], [16 * GiB, 32, 381.8]],
        "latency_us": 50.6,
        "source": "stas00/ml-engineering network/README.md @744d01e: 4x p6-b200 (32 GPUs, EFA v4), nccl 2.27.7, "
                  "all-reduce busbw 377.3 GB/s @4 GiB, 381.8 @16 GiB; latency: 2x p6-b200 all-reduce 8 B "
                  "~50.6 us (dstackai/dstack PR #3961)"}]


# XLA's GPU cost model, matmul_interpolator_data.h (tensorflow/tensorflow @a305421
# third_party/xla/xla/backends/gpu/cost_model/matmul_interpolator_data.h, entries key "sm_100" = B200,
# b = 1): measured FLOP/s of "bf16xbf16->bf16" and "f8e4m3fnxf8e4m3fn->bf16" at the same (m, n, k).
# The 27 points with every dimension in 1024-4096 (the smaller ones swing +-30% between neighbours).
XLA_SOURCE = ("tensorflow/tensorflow @a305421 third_party/xla/xla/backends/gpu/cost_model/matmul_interpolator_data.h "
              "sm_100 (B200), b=1: f8e4m3fn x f8e4m3fn -> bf16 over bf16 x bf16 -> bf16 TFLOP/s at each (m, n, k)")
XLA_SM100 = [  # m, n, k, bf16 TFLOP/s, fp8 TFLOP/s
    (1024, 1024, 1024, 288.02, 332.99), (1024, 2048, 1024, 492.54, 586.02), (1024, 4096, 1024, 723.36, 863.14),
    (1024, 1024, 2048, 468.47, 575.89), (1024, 2048, 2048, 760.31, 979.47), (1024, 4096, 2048, 981.26, 1431.66),
    (1024, 1024, 4096, 675.26, 923.85), (1024, 2048, 4096, 1014.88, 1470.88), (1024, 4096, 4096, 1213.95, 1937.62),
    (2048, 1024, 1024, 496.07, 504.52), (2048, 2048, 1024, 725.38, 970.61), (2048, 4096, 1024, 911.35, 1423.94),
    (2048, 1024, 2048, 760.37, 985.08), (2048, 2048, 2048, 985.76, 1427.73), (2048, 4096, 2048, 1172.85, 2035.17),
    (2048, 1024, 4096, 1017.70, 1484.74), (2048, 2048, 4096, 1208.49, 1955.81), (2048, 4096, 4096, 1342.54, 2491.28),
    (4096, 1024, 1024, 715.65, 850.83), (4096, 2048, 1024, 913.82, 1332.19), (4096, 4096, 1024, 1075.62, 1895.40),
    (4096, 1024, 2048, 990.31, 1462.61), (4096, 2048, 2048, 1170.01, 1833.50), (4096, 4096, 2048, 1277.79, 2484.97),
    (4096, 1024, 4096, 1204.93, 1951.81), (4096, 2048, 4096, 1343.54, 2499.44), (4096, 4096, 4096, 1416.87, 2764.98),
]
# pytorch/ao PR #2427 (benchmarks/float8/bench_matmul.py --recipe nvfp4 on an NVIDIA B200): tops/sec of
# torch.bfloat16 and of the nvfp4 scaled GEMM at square M = K = N.
TORCHAO_NVFP4_SOURCE = ("pytorch/ao PR #2427 (bench_matmul.py --recipe nvfp4, NVIDIA B200): nvfp4 over torch.bfloat16 "
                        "tops/sec at square M = K = N")
TORCHAO_NVFP4 = [  # size, bf16 TFLOP/s, nvfp4 TFLOP/s
    (1024, 423, 366), (1536, 921, 1080), (2048, 1130, 1680), (3072, 1510, 3510), (4096, 1410, 4460),
    (6144, 1450, 5500), (8192, 1420, 5370),
]


def ratio_tables() -> list[dict]:
    fp8 = [[m, n, k, round(lo / bf, 4)] for m, n, k, bf, lo in XLA_SM100]
    sq = [[s, s, s, round(lo / bf, 4)] for s, bf, lo in TORCHAO_NVFP4]
    return [
        {"kind": "gemm_ratio", "dtype": "fp8", "over": "bf16", "axes": ["m", "n", "k"], "points": fp8,
         "source": XLA_SOURCE},
        # no shape-resolved MXFP8 microbenchmark was found: Blackwell runs block-scaled MXFP8 MMAs at the
        # fp8 tensor-core rate (recipes.toml [mxfp8.sources] peak), so the per-tensor fp8 ratio is taken
        {"kind": "gemm_ratio", "dtype": "mxfp8", "over": "bf16", "axes": ["m", "n", "k"], "points": fp8,
         "source": f"{XLA_SOURCE}; taken for MXFP8 (block-scaled MMAs at the fp8 rate, recipes.toml mxfp8.peak)"},
        {"kind": "gemm_ratio", "dtype": "nvfp4", "over": "bf16", "axes": ["m", "n", "k"], "points": sq,
         "source": TORCHAO_NVFP4_SOURCE},
    ]


def main(path: str) -> None:
    with open(path) as f:
        d = json.load(f)
    op, net = d["accelerator"]["op"], d["networks"]
    prof = {"schema": "trainplan-machine/1", "name": "b200-published", "gpu": "b200-180gb",
            "provenance": {"kind": "published",
                           "source": "SimuMax's measured B200 operator efficiencies (bf16), published fp8 / nvfp4 "
                                     "over bf16 GEMM ratios on B200, and published NCCL results on p6-b200; each "
                                     "table names its own source",
                           "note": "built by bench/machine_profiles_from_sources.py; fp8, mxfp8 and nvfp4 GEMMs are "
                                   "priced as the bf16 rows x the gemm_ratio tables"},
            # SimuMax's bandwidth efficiencies (bandwidth.default / ce / permute) are relative to its own count
            # of bytes per operator, not to the bytes costs/compute.py counts (a fit with them wanted
            # machine_hbm at its bound, 1.95): they are left out, elementwise_tables() shows the conversion
            "tables": [gemm_table(op), *ratio_tables(), *grouped_tables(op), *attention_tables(op), *nvlink_tables(net), *EFA]}
    print(json.dumps(prof, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
