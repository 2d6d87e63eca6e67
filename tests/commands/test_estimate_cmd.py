"""`trainplan estimate`: dense and MoE models on every catalog instance; output; errors."""

import json

import pytest

from trainplan.hardware import nodes

INSTANCES = sorted(n for n, x in nodes().items() if x.price_per_hour is not None or x.sagemaker)


@pytest.mark.parametrize("instance", INSTANCES)
@pytest.mark.parametrize("model,extra", [("llama-3.1-8b", ()), ("qwen3-30b-a3b", ("--ep", "2"))])
def test_dense_and_moe_on_every_instance(cli, instance, model, extra):
    code, out, err = cli("estimate", "--model", model, "--instance", instance, "--nodes", "2",
                         "--seq-len", "4096", "--tokens", "1B", "--json", *extra)
    assert code == 0, err
    e = json.loads(out)["estimate"]
    assert e["step_time_s"] > 0 and 0 < e["mfu"] < 1
    assert e["tokens_per_s_per_gpu"] * nodes()[instance].gpus_per_node * 2 == pytest.approx(e["tokens_per_s"])
    assert e["comm"], "two nodes always communicate"


def test_text_output_has_every_section(cli):
    code, out, _ = cli("estimate", "--model", "llama-3.1-70b", "--nodes", "2", "--tp", "8", "--pp", "2",
                       "--global-batch", "16", "--tokens", "15T", "--price", "100")
    assert code == 0
    for s in ("step time breakdown", "communication per step", "exposed tp comm", "bubble", "MFU",
              "cost: 200.00 USD/h (user override)", "to 15,000,000,000,000 tokens", "memory per GPU"):
        assert s in out


@pytest.mark.parametrize("args,msg", [
    (("--tp", "3"), "tp=3 does not divide the 64 attention heads of llama-3.1-70b"),
    (("--tp", "2", "--dp-shard", "2"), "= 4 GPUs but the cluster has 8"),
    (("--global-batch", "12"), "global batch 12 is not a multiple of micro_batch*dp = 1*8"),
    (("--precision", "fp8_rowwise", "--instance", "ml.p4d.24xlarge"), "needs fp8 tensor cores"),
    (("--ep", "2",), "ep=2 but llama-3.1-70b has no experts"),
])
def test_bad_layouts_are_one_line_errors(cli, args, msg):
    code, out, err = cli("estimate", *args)
    assert code == 2 and msg in err and "Traceback" not in err and out == ""


def test_tp_overlap_setting_exposes_what_it_hides_and_the_json_names_the_settings(cli):
    # issue 11's done-when: the TP communication that tp_comm_overlap=true hides is exposed with false
    base = ("estimate", "--model", "llama-3.1-70b", "--instance", "ml.p6-b200.48xlarge", "--tp", "8",
            "--stack", "megatron", "--json")
    off = json.loads(cli(*base, "--set", "tp_comm_overlap=false")[1])
    on = json.loads(cli(*base, "--set", "tp_comm_overlap=true")[1])
    assert off["stack"] == "megatron" and off["execution"]["tp_comm_overlap"] is False
    assert on["execution"]["tp_comm_overlap"] is True and on["layout"]["execution"] == on["execution"]
    tp_off = [c for c in off["estimate"]["comm"] if c["dimension"] == "tp"]
    assert off["estimate"]["time_s"]["tp"] == pytest.approx(sum(c["seconds"] for c in tp_off))
    assert on["estimate"]["time_s"]["tp"] < off["estimate"]["time_s"]["tp"]
    assert on["estimate"]["step_time_s"] < off["estimate"]["step_time_s"]
    # and it says what the setting costs, in seconds per step
    gap = off["estimate"]["step_time_s"] - on["estimate"]["step_time_s"]
    (why,) = [r for r in off["setting_reasons"] if r.startswith("tp communication not overlapped")]
    assert f"+{gap:.2g} s per step" in why
    assert not [r for r in on["setting_reasons"] if r.startswith("tp communication")]


@pytest.mark.parametrize("args,msg", [
    (("--set", "tp_comm_overlap=maybe"), "tp_comm_overlap must be true or false, got 'maybe'"),
    (("--set", "nope=1"), "unknown execution setting 'nope'; allowed: tp_comm_overlap, grad_reduce_overlap"),
    (("--stack", "deepspeed"), "unknown stack 'deepspeed'; known: trainplan, torchtitan, megatron"),
])
def test_bad_stack_flags_are_one_line_errors(cli, args, msg):
    code, _, err = cli("estimate", "--tp", "8", *args)
    assert code == 2 and msg in err and err.strip().count("\n") == 0


def test_layout_text_replaces_the_layout_flags_and_refuses_to_mix_with_them(cli):
    text = "fp8_tensorwise ac=full mb=1 ga=1 dp=1x8(fsdp) fp8_allgather=true"
    code, out, err = cli("estimate", "--model", "llama-3.1-8b", "--instance", "ml.p5.48xlarge", "--layout", text)
    assert code == 0, err
    assert f"layout: {text}" in out and "DOES NOT FIT" not in out
    code, _, err = cli("estimate", "--model", "llama-3.1-8b", "--instance", "ml.p5.48xlarge", "--layout", text,
                       "--ac", "selective")
    assert code == 2 and "leave out --ac" in err


def test_llama3_405b_on_16k_gpus_as_megatron_splits_it_reports_goodput(cli):
    # Meta's layout (Llama 3 paper sec. 3.3.2): tp 8, pp 16 interleaved, 126 layers with the
    # embedding and the loss counted in the split (16 x 8 chunks of 1 layer, the two ends without).
    argv = ("estimate", "--model", "llama-3.1-405b", "--instance", "dgx-h100", "--nodes", "2048", "--seq-len", "8192",
            "--global-batch", "2048", "--tp", "8", "--pp", "16", "--vp", "8", "--pp-embedding-in-split",
            "--pp-loss-in-split", "--sharding", "zero2", "--ac", "selective", "--stack", "megatron")
    code, out, err = cli(*argv)
    assert code == 0, err
    assert "goodput" in out and "checkpoint every" in out
    code, out, _ = cli(*argv, "--json", "--storage-tib", "400")
    g = json.loads(out)["estimate"]["goodput"]
    assert 0 < g["goodput"] < 1 and g["checkpoint_interval_steps"] >= 1
    assert g["storage_bytes_per_s"] == pytest.approx(400e9)  # 1000 MB/s per TiB x 400 TiB
    # without the split the 128 chunks cannot hold 126 layers
    code, _, err = cli(*[a for a in argv if a not in ("--pp-embedding-in-split", "--pp-loss-in-split")])
    assert code == 2 and "pp_embedding_in_split" in err


def test_etp_flag_reaches_the_layout_and_the_folding_check(cli):
    base = ("estimate", "--model", "qwen3-30b-a3b", "--nodes", "1", "--tp", "2", "--ep", "4", "--seq-len", "4096",
            "--json", "--stack", "megatron")
    code, out, err = cli(*base, "--etp", "1")
    assert code == 0, err
    assert json.loads(out)["layout"]["etp"] == 1
    code, out, err = cli(*base, "--etp", "2")
    assert code == 0 and json.loads(out)["layout"]["etp"] == 2
    code, out, err = cli("estimate", "--model", "qwen3-30b-a3b", "--nodes", "1", "--tp", "4", "--etp", "2")
    assert code == 2 and "etp=2 with tp=4" in err and err.count("\n") == 1
