"""`trainplan probe --device cpu --quick` writes a machine profile that loads, and `estimate
--machine` prices a layout with it; a profile of another GPU type (estimate, plan, compare) is a
one-line error."""

import json

import pytest

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    from trainplan.cli import main

    out = tmp_path_factory.mktemp("probe") / "m.json"
    assert main(["probe", "--device", "cpu", "--quick", "--gpu", "h100-sxm-80gb", "--out", str(out)]) == 0
    return out


def test_probe_writes_a_profile_with_provenance_and_every_kernel_kind(probed):
    from trainplan.machine.profile import load_machine

    m = load_machine(probed)
    assert m.gpu == "h100-sxm-80gb"
    prov = m.provenance
    assert prov["kind"] == "probe" and prov["date"] and prov["software"]["torch"]
    assert "measured on cpu" in prov["note"]
    kinds = {t.kind for t in m.tables}
    assert kinds == {"gemm", "grouped_gemm", "attention", "elementwise"}  # one process: no collectives
    assert {t.selector("kernel") for t in m.tables if t.kind == "elementwise"} == {
        "norm", "swiglu", "rotary", "cross_entropy"}


def test_estimate_with_machine_uses_it(cli, probed):
    args = ("estimate", "--model", "llama-3.2-1b", "--instance", "ml.p5.48xlarge", "--seq-len", "2048", "--json")
    code, out, err = cli(*args, "--machine", str(probed))
    assert code == 0, err
    e = json.loads(out)["estimate"]
    assert e["machine"]["profile"] == "probe-h100-sxm-80gb"
    code, out, _ = cli(*args, "--machine", "none")
    bare = json.loads(out)["estimate"]
    assert bare["machine"]["profile"] is None
    # a CPU's GEMMs are thousands of times slower than an H100's: the profile is really read
    assert e["step_time_s"] > 100 * bare["step_time_s"]


def test_a_machine_profile_of_another_gpu_is_refused(cli, probed):
    code, _, err = cli("estimate", "--model", "llama-3.2-1b", "--instance", "ml.p6-b200.48xlarge",
                       "--machine", str(probed))
    assert code == 2
    assert "measures 'h100-sxm-80gb', this job runs on 'b200-180gb'" in err and "Traceback" not in err


def test_plan_and_compare_refuse_a_machine_profile_of_none_of_their_gpus(cli, probed):
    # the search would price no candidate with it: the profile would silently do nothing
    for argv in (("plan", "--model", "llama-3.2-1b", "--instance", "ml.p6-b200.48xlarge"),
                 ("compare", "--model", "llama-3.2-1b", "--instances", "ml.p6-b200.48xlarge,ml.p5e.48xlarge")):
        code, _, err = cli(*argv, "--machine", str(probed))
        assert code == 2, (argv, err)
        assert "measures 'h100-sxm-80gb', this job runs on 'b200-180gb'" in err and "Traceback" not in err


def test_validate_plan_and_compare_take_machine(cli, probed):
    for argv in (("validate", "--machine", "none", "--json"),
                 ("compare", "--model", "llama-3.2-1b", "--instances", "ml.p5.48xlarge", "--machine", str(probed),
                  "--json")):
        code, _, err = cli(*argv)
        assert code == 0, (argv, err)
    code, _, err = cli("plan", "--model", "llama-3.2-1b", "--instance", "ml.p5.48xlarge", "--machine", "/nonexistent.json")
    assert code == 2 and "nonexistent" in err


def test_estimate_text_says_which_rates_priced_it(cli):
    code, out, _ = cli("estimate", "--model", "llama-3.2-1b", "--instance", "ml.p6-b200.48xlarge", "--seq-len", "2048")
    assert code == 0 and "rates: machine profile b200-published where it has tables" in out
    code, out, _ = cli("estimate", "--model", "llama-3.2-1b", "--instance", "ml.p6-b200.48xlarge", "--seq-len", "2048",
                       "--machine", "none")
    assert code == 0 and "rates: formulas" in out


def test_json_prints_the_profile_it_writes_as_strict_json(cli, tmp_path):
    out = tmp_path / "m.json"
    code, text, err = cli("probe", "--device", "cpu", "--quick", "--gpu", "h100-sxm-80gb", "--out", str(out), "--json")
    assert code == 0, err
    printed = json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))
    assert printed == json.loads(out.read_text()) and printed["tables"]
