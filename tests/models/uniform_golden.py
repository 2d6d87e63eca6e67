"""The estimates the per-layer description must not change: every catalog model of the first 19
(tests/models/data/uniform_estimates.json), on fixed layouts, as printed by trainplan's cost model
before models/layers.py described layers one by one (main @ 395cf1d, with the profile refitted on the time split).

Regenerate only when a change means to move these numbers:
    PYTHONPATH=src python tests/models/uniform_golden.py > tests/models/data/uniform_estimates.json
"""

import json
import sys

from trainplan.estimate import estimate
from trainplan.hardware import Cluster, find_node
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.models import count_params, resolve
from trainplan.profile import Profile

MODELS = ("deepseek-v3", "gemma-2-27b", "gemma-2-9b", "gpt-oss-120b", "gpt3-175b", "llama-3.1-405b",
          "llama-3.1-70b", "llama-3.1-8b", "llama-3.2-1b", "llama-3.2-3b", "mistral-7b", "mixtral-8x22b",
          "mixtral-8x7b", "qwen2.5-72b", "qwen2.5-7b", "qwen3-235b-a22b", "qwen3-30b-a3b", "qwen3-32b",
          "qwen3-8b")
# (nodes, layout): data parallel only; tensor + pipeline; pipeline with full checkpointing and ep
LAYOUTS = (
    (1, Layout(dp_shard=8, micro_batch=1, ac="selective")),
    (2, Layout(dp_shard=4, tp=2, pp=2, micro_batch=1, grad_accum=8, ac="none")),
    (4, Layout(dp_shard=4, tp=2, pp=4, micro_batch=1, grad_accum=8, ac="full")),
)


def rows() -> dict:
    out = {}
    for name in MODELS:
        m = resolve(name)
        per = {"params": count_params(m).total}
        for nodes, L in LAYOUTS:
            if m.moe is not None:
                L = L.with_(ep=min(8, m.moe.num_experts))
            job = Job(m, Cluster(find_node("ml.p6-b200.48xlarge"), nodes), Workload(4096, 64 * nodes))
            e = estimate(job, L, Profile())
            per[f"{nodes}n"] = {"memory_bytes": e.memory.total, "step_s": e.time.total,
                                "flops_per_step": e.flops_per_step, "hw_flops_per_step": e.hardware_flops_per_step}
        out[name] = per
    return out


if __name__ == "__main__":
    json.dump(rows(), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
