"""Machine profiles (trainplan-machine/1) under fuzzing: a valid profile with 1-3 values changed, keys
removed or added, loaded directly and through `estimate --machine`. Every outcome is a profile whose
lookups return finite positive rates, or a one-line TrainplanError."""

import json
import math

from fuzz_helpers import check_answer, fuzz_settings, mutate, run_cli
from hypothesis import given
from hypothesis import strategies as st

from trainplan.errors import TrainplanError
from trainplan.machine.profile import machine_from_dict

BASE = {
    "schema": "trainplan-machine/1", "name": "fuzz", "gpu": "h100-sxm-80gb",
    "provenance": {"kind": "probe", "source": "trainplan probe", "machine": "m", "date": "2026-01-01",
                   "software": {"torch": "2.13"}},
    "tables": [
        {"kind": "gemm", "dtype": "bf16", "axes": ["m", "n", "k"], "source": "s",
         "points": [[1024, 1024, 1024, 400.0], [4096, 4096, 4096, 700.0]]},
        {"kind": "attention", "pass": "fwd", "causal": True, "kernel": "sdpa", "axes": ["seq"], "source": "s",
         "points": [[2048, 300.0]]},
        {"kind": "collective", "op": "all_gather", "tier": "nvlink", "axes": ["bytes", "ranks"], "source": "s",
         "latency_us": 10.0, "points": [[1e6, 8, 100.0], [1e9, 8, 350.0]]},
    ],
}


@fuzz_settings(200)
@given(data=st.data())
def test_mutated_profile_loads_or_is_refused_in_one_line(data):
    d = mutate(data, BASE)
    try:
        m = machine_from_dict(d, where="m.json")
    except TrainplanError as e:
        assert "\n" not in str(e)
        return
    for t in m.tables:
        q = {a: 3000.0 for a in t.grid.axes}
        v = t.lookup(**q).value
        assert math.isfinite(v) and v > 0


@fuzz_settings(40)
@given(data=st.data())
def test_mutated_profile_through_estimate(tmp_path_factory, data):
    f = tmp_path_factory.mktemp("fuzz-machine") / "m.json"
    f.write_text(json.dumps(mutate(data, BASE)))
    argv = ["estimate", "--model", "llama-3.2-1b", "--instance", "ml.p5.48xlarge", "--seq-len", "2048",
            "--json", "--machine", str(f)]
    check_answer(argv, *run_cli(argv))
