"""`trainplan trace` on the Llama-3.1-8B config (tests/trace/llama-3.1-8b-config.json, the published
meta-llama/Llama-3.1-8B config.json): the issue's done-when commands, and bad input."""

import json
import re
from pathlib import Path

import pytest

from trainplan.commands.trace import render

pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.torch

LLAMA = str(Path(__file__).with_name("llama-3.1-8b-config.json"))
S, H, KV, F, NH = 8192, 4096, 1024, 14336, 32


def _trace(cli, *extra):
    code, out, err = cli("trace", "--model", LLAMA, "--seq-len", str(S), "--micro-batch", "1", *extra, "--json")
    assert code == 0, err
    return json.loads(out)


def test_trace_llama_8b_no_checkpointing(cli):
    d = _trace(cli, "--ac", "none")
    for key in ("activation_bytes_per_layer", "peak_bytes", "flops_per_step"):
        assert key in d["traced"]
    assert {"activation_bytes_per_layer", "flops_per_step"} <= set(d["analytic"])
    assert set(d["relative_difference"]) >= {"activation_bytes_per_layer", "flops_per_step"}
    assert d["extrapolated"] and d["traced_layers"] == 2 and d["full_layers"] == 32
    assert "extrapolated" in d["note"]
    # Llama 3.1 8B: 8,030,261,248 parameters (the HF model card's 8.03B), exactly
    assert d["traced"]["params"] == d["analytic"]["params"] == 8_030_261_248
    # Per token and layer, HF eager Llama keeps (bytes): two RMSNorms with an fp32 input copy,
    # fp32 1/rms, bf16 normalised copy and bf16 output (2 x (4h + 4 + 2h + 2h)), q (2h), k and v
    # (2 x 2kv), the attention output (2h) and its fp32 log-sum-exp (4 per head), and the SwiGLU
    # gate, up, silu and product (4 x 2f).
    per_token = 2 * (8 * H + 4) + 2 * H + 4 * KV + 2 * H + 4 * NH + 8 * F
    assert d["traced"]["activation_bytes_per_layer"] == per_token * S
    assert d["relative_difference"]["flops_matmul"] == 0.0
    assert d["traced"]["peak_phase"] in ("forward", "backward", "optimizer")


def test_trace_llama_8b_full_checkpointing_keeps_the_layer_input(cli):
    d = _trace(cli, "--ac", "full")
    assert d["traced"]["activation_bytes_per_layer"] == 2 * H * S  # one bf16 hidden state
    assert d["relative_difference"]["activation_bytes_per_layer"] == 0.0
    # recompute adds forward work, so a step does more FLOPs than without checkpointing
    assert d["traced"]["flops_per_step"] > d["traced_slice"]["forward_flops"] * 3
    _each_percentage_is_the_difference_of_its_own_numbers(render(LLAMA, d))


def _printed(text: str) -> tuple[float, float]:
    """A number as printed and half a unit of its last digit (`8,030`, `0.062`, `6.1076e+14`)."""
    mantissa, _, exponent = text.replace(",", "").partition("e")
    decimals = len(mantissa.partition(".")[2])
    scale = 10.0 ** int(exponent or 0)
    return float(mantissa) * scale, 0.5 * 10.0**-decimals * scale


def _each_percentage_is_the_difference_of_its_own_numbers(text: str) -> None:
    """On every line comparing a traced number with an analytic one, the percentage printed is
    (analytic - traced) / traced of those two numbers. Under full checkpointing the step's total
    matmul FLOPs (with recompute) are 23% above the model's: printed beside the model's analytic
    count with the model-only difference, the line read "(+0.00%)"."""
    compared = 0
    for line in text.splitlines():
        m = re.search(r"([\d.,e+]+)(?: GiB)?\s+(?:analytic|planner) ([\d.,e+]+)(?: GiB)? \(([+-][\d.]+)%\)", line)
        if not m:
            continue
        (t, dt), (a, da) = _printed(m[1]), _printed(m[2])
        # the printed numbers are rounded: allow what their last digits and the percentage's hide
        slack = 100 * (dt * a / t**2 + da / t) + 0.005
        assert abs(float(m[3]) - 100 * (a - t) / t) <= slack, line
        compared += 1
    assert compared >= 5, text


def test_unknown_model_type_is_named(cli, tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "llamaa", "num_hidden_layers": 2}))
    code, _out, err = cli("trace", "--model", str(p), "--seq-len", "64")
    assert code == 2
    assert "llamaa" in err and "Traceback" not in err


def test_fsdp_shards_states_but_not_activations(cli, tmp_path):
    """FSDP2 over 8 fake ranks: parameters, gradients and AdamW states per rank are 1/8 of the
    unsharded fp32 ones (FSDP2 keeps fp32 shards as master weights), activations are unchanged."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
                               "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 4,
                               "vocab_size": 1024}))
    one = json.loads(cli("trace", "--model", str(cfg), "--seq-len", "128", "--json")[1])["traced"]
    code, out, err = cli("trace", "--model", str(cfg), "--seq-len", "128", "--fsdp", "8", "--json")
    assert code == 0, err
    eight = json.loads(out)["traced"]
    assert eight["activation_bytes_per_layer"] == one["activation_bytes_per_layer"]
    assert eight["param_bytes"] * 8 == one["master_param_bytes"]  # fp32 shards
    assert eight["grad_bytes"] * 8 == one["grad_bytes"]
    assert eight["optimizer_state_bytes"] * 8 == one["optimizer_state_bytes"]


@pytest.mark.parametrize("ac", ["none", "full"])
def test_two_traced_layers_extrapolate_to_a_full_trace(ac):
    """A 2-layer trace extrapolated to 6 layers equals the trace of all 6 layers: parameters,
    activations and FLOPs exactly; the peak (linear from 2 and 3 traced layers) within 1% without
    checkpointing and as an upper bound within 15% with full recompute (its growth per layer is
    larger between 2 and 3 layers than further on)."""
    from trainplan.trace import TraceSettings, trace_config

    cfg = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4,
           "num_key_value_heads": 2, "num_hidden_layers": 6, "vocab_size": 1024}
    two = trace_config(cfg, TraceSettings(seq_len=512, ac=ac, layers=2)).full()
    six = trace_config(cfg, TraceSettings(seq_len=512, ac=ac, layers=6)).full()
    for key in ("params", "activation_bytes", "flops_per_step", "grad_bytes", "optimizer_state_bytes"):
        assert two[key] == six[key], key
    ratio = two["peak_bytes"] / six["peak_bytes"]
    assert (0.99 <= ratio <= 1.01) if ac == "none" else (1.0 <= ratio <= 1.15), ratio


def test_text_compares_activations_with_what_the_planner_uses_and_says_so(cli):
    """The activations `trace` prints next to the traced ones are the planner's (the memory model
    that `plan` and `estimate` run for this layout), not the HF-eager calibration, which is shown
    apart as not used."""
    from trainplan.commands.trace import render
    from trainplan.estimate import estimate
    from trainplan.hardware import cluster
    from trainplan.job import Job, Workload
    from trainplan.layout import Layout
    from trainplan.models import resolve

    d = _trace(cli, "--ac", "none", "--fsdp", "2")
    spec = resolve(LLAMA)
    job = Job(spec, cluster("ml.p6-b200.48xlarge", 1), Workload(S, 2))
    mem = estimate(job, Layout(ac="none", micro_batch=1, grad_accum=1, dp_shard=2)).memory
    per_layer = mem.activations / mem.microbatches_in_flight / spec.num_layers
    assert d["analytic"]["activation_bytes_per_layer_planner"] == round(per_layer)
    assert d["analytic"]["activation_bytes_per_layer_calibrated"] != round(per_layer)  # none: calibrated
    lines = render("llama", d).splitlines()
    act = next(i for i, line in enumerate(lines) if line.startswith("  activations / layer"))
    assert f"planner {per_layer / 2**30:.3f} GiB" in lines[act]
    assert "the memory model plan and estimate use" in lines[act + 1]
    assert "calibrated to HF eager code, not used by the planner" in lines[act + 2]
