"""The precision reason quotes the GEMM and attention rate the two estimates price (search/reasons.
precision_reason), not the datasheet ceilings: on B200 fp8 is priced from bf16's measured rows x a
cited per-shape ratio, which gains less than the ceilings' +97%."""

import re

from trainplan.hardware import find_node
from trainplan.models import resolve
from trainplan.precision import recipe
from trainplan.search import Query, search
from trainplan.search.evaluator import Counting, model_evaluator


def test_the_precision_rate_is_the_estimates_compute_ratio():
    r = search(Query(resolve("llama-3.1-70b"), (find_node("ml.p6-b200.48xlarge"),), nodes=1))
    best = r.chosen
    assert best.layout.precision != "bf16"  # the premise: a low-precision recipe won
    (line,) = [x for x in r.reasons if x.startswith("precision ")]
    rate = float(re.search(r"([+-][\d.]+)% GEMM and attention rate and [+-][\d.]+% tokens/s vs bf16", line).group(1))
    ev = Counting(model_evaluator())
    bf16 = best.layout.with_(precision="bf16", fp8_allgather=False)
    priced = ev.detail(best.job, bf16).time.compute / ev.detail(best.job, best.layout).time.compute - 1
    assert abs(rate - 100 * priced) < 1  # printed to the percent
    gpu = best.job.cluster.gpu  # the ceilings' ratio (+97% on B200) is what the reason used to print
    ceiling = recipe(best.layout.precision).matmul_ceiling(gpu) / recipe("bf16").matmul_ceiling(gpu) - 1
    assert priced < ceiling
