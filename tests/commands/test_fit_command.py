"""`trainplan fit`: output fields, the answer it gives, and the one-line errors."""

from __future__ import annotations

import json

import pytest

ARGS = ("fit", "--model", "llama-3.1-8b", "--instance", "ml.p5.48xlarge", "--seq-len", "8192")


def test_json_fields(cli):
    code, out, err = cli(*ARGS, "--ac", "full", "--json")
    assert code == 0, err
    a = json.loads(out)
    for k in ("fits", "capacity_gib", "total_gib", "headroom_gib", "headroom_pct", "max_micro_batch",
              "max_seq_len", "memory", "layout"):
        assert k in a
    assert a["fits"] is True and a["headroom_gib"] > 0
    assert a["headroom_gib"] == pytest.approx(a["capacity_gib"] - a["total_gib"], abs=0.01)
    assert a["headroom_pct"] == pytest.approx(100 * a["headroom_gib"] / a["capacity_gib"], abs=0.05)
    assert a["layout"]["dp_shard"] == 8 and a["layout"]["grad_accum"] == 1  # dp = what is left
    m = a["memory"]
    assert m["convention"] == "fsdp2" and m["worst_stage"] == 0
    for term in ("params", "grads", "optimizer_states", "activations", "logits", "cuda_context",
                 "nccl_buffers", "fragmentation", "total_allocated", "total_reserved", "total"):
        assert term in m["gib"] and term in m["bytes"]
    assert a["max_micro_batch"] >= 1 and a["max_seq_len"] >= 8192


def test_global_batch_sets_grad_accum_and_not_fitting_is_still_exit_0(cli):
    code, out, _ = cli("fit", "--model", "llama-3.1-70b", "--instance", "ml.p5.48xlarge", "--ac", "none",
                       "--micro-batch", "4", "--global-batch", "64", "--json")
    assert code == 0
    a = json.loads(out)
    assert a["layout"]["grad_accum"] == 2
    assert a["fits"] is False and a["headroom_gib"] < 0


def test_text_output(cli):
    code, out, _ = cli(*ARGS, "--tp", "2", "--pp", "2", "--ac", "selective")
    assert code == 0
    assert "FITS" in out and "headroom" in out
    assert "largest micro-batch that fits:" in out and "longest sequence that fits:" in out
    assert "activations" in out and "= reserved" in out


@pytest.mark.parametrize("extra,message", [
    (("--tp", "3"), "tp=3 does not divide the 32 attention heads of llama-3.1-8b"),
    (("--tp", "16"), "tp=16 is larger than the NVLink domain of ml.p5.48xlarge (8 GPUs); keep tensor parallelism inside a node"),
    (("--cp", "3"), "cp=3 does not divide the sequence length 8192"),
    (("--ep", "2"), "ep=2 but llama-3.1-8b has no experts; use ep=1"),
    (("--dp-shard", "4"), "layout uses dp_replicate*dp_shard*tp*pp*cp = 1*4*1*1*1 = 4 GPUs but the cluster has 8; change the degrees or --nodes"),
    (("--global-batch", "12"), "global batch 12 is not a multiple of micro_batch*dp = 1*8; change --global-batch or --micro-batch"),
    (("--ac", "partial"), "ac 'partial' needs 1 <= ac_layers <= layers per pipeline stage (32), got 0"),
    (("--capacity-gib", "0"), "argument --capacity-gib: expected a positive number up to 1e+15, got '0' (see --help)"),
])
def test_impossible_layouts_are_one_line_errors(cli, extra, message):
    code, out, err = cli(*ARGS, *extra)
    assert code == 2 and out == ""
    assert err == f"trainplan fit: error: {message}\n"


def test_fp8_on_a100_is_refused(cli):
    code, _, err = cli("fit", "--model", "llama-3.1-8b", "--instance", "ml.p4d.24xlarge", "--precision", "fp8_tensorwise")
    assert code == 2
    assert err.strip() == ("trainplan fit: error: precision 'fp8_tensorwise' needs fp8 tensor cores, which "
                           "a100-sxm-40gb (ampere) does not have; use one of: bf16, bf16_pure, fp16")


def test_unknown_model_lists_the_known_ones(cli):
    code, _, err = cli("fit", "--model", "llama-3.1-8", "--json")
    assert code == 2 and err.count("\n") == 1
    assert "unknown model 'llama-3.1-8'" in err and "did you mean 'llama-3.1-8b'" in err


def test_the_cross_entropy_setting_changes_the_logits_memory(cli):
    base = ("fit", "--model", "llama-3.1-8b", "--seq-len", "8192", "--json")
    gib = {ce: json.loads(cli(*base, "--set", f"cross_entropy={ce}")[1])["memory"]["gib"]["logits"]
           for ce in ("plain", "fused", "chunked")}
    assert gib["chunked"] < gib["fused"] < gib["plain"]
