"""The hardware catalog: every number sourced, units converted once, lookups and errors."""

import json

import pytest

from trainplan.errors import TrainplanError
from trainplan.hardware import find_gpu, find_node, nodes
from trainplan.hardware.catalog import _apply_price_overrides
from trainplan.units import GiB

# ids used by trainplan-validation/1 (shared/validation/published_dev.json hardware.gpu)
VALIDATION_GPU_IDS = ["a100-sxm-40gb", "a100-sxm-80gb", "b200-180gb", "gb200-186gb",
                      "h100-sxm-80gb", "h100-sxm-96gb", "h200-sxm-141gb"]
ISSUE_INSTANCES = ["ml.p4d.24xlarge", "ml.p4de.24xlarge", "ml.p5.48xlarge", "ml.p5e.48xlarge",
                   "ml.p5en.48xlarge", "ml.p6-b200.48xlarge", "ml.p6-b300.48xlarge",
                   "ml.p6e-gb200.36xlarge", "ml.g6e.48xlarge"]


@pytest.mark.parametrize("name", VALIDATION_GPU_IDS + ["b300-288gb", "l40s-48gb"])
def test_every_gpu_number_has_a_source(name):
    g = find_gpu(name)
    for field in ("memory_gib", "hbm_tbps", "peak_tflops", "matmul_ceiling", "nvlink_gb_per_s", "power_w"):
        assert g.sources.get(field), f"{name}: {field} has no source"


@pytest.mark.parametrize("name", ISSUE_INSTANCES)
def test_every_instance_is_sourced_and_sagemaker(name):
    n = find_node(name)
    assert n.sagemaker and n.sources["hardware"] and n.sources["price"]
    assert n.price_kind  # says whether the price is EC2 or SageMaker


def test_b200_facts_from_hardware_facts_table_1_1():
    # HARDWARE_FACTS.md 1.1: B200 dense BF16 2250, FP8 4500, FP4 9000 TFLOPS; 8.0 TB/s; AWS 179 GiB
    g = find_gpu("b200-180gb")
    assert g.peak("bf16") == 2250e12 and g.peak("fp8") == 4500e12 and g.peak("fp4") == 9000e12
    assert g.hbm_bandwidth == 8.0e12
    assert g.memory_bytes == 179 * GiB
    assert g.supports("fp4") and not find_gpu("h100").supports("fp4")
    assert not find_gpu("a100").supports("fp8")


def test_p6_b200_network_per_gpu_is_50_gb_per_s():
    # HARDWARE_FACTS.md 5.3 guidance: p6-b200 per-GPU EFA 50 GB/s (3200 Gbps / 8)
    assert find_node("ml.p6-b200.48xlarge").inter_node_bandwidth_per_gpu == 50e9


def test_lookup_by_alias_and_case():
    assert find_node("P6-B200").name == "ml.p6-b200.48xlarge"
    assert find_gpu("H100").name == "h100-sxm-80gb"


def test_unknown_instance_suggests_the_nearest_and_lists_known():
    with pytest.raises(TrainplanError) as e:
        find_node("p6-b20")
    msg = str(e.value)
    assert "did you mean 'ml.p6-b200.48xlarge'" in msg and "ml.p5.48xlarge" in msg
    assert "\n" not in msg


def test_price_override_inline_and_json(tmp_path):
    table = nodes()
    out = _apply_price_overrides(table, "p5=40.5")
    assert out["ml.p5.48xlarge"].price_per_hour == 40.5
    assert out["ml.p5.48xlarge"].price_kind == "user override"
    f = tmp_path / "prices.json"
    f.write_text(json.dumps({"ml.p6-b200.48xlarge": 99.0}))
    assert _apply_price_overrides(table, str(f))["ml.p6-b200.48xlarge"].price_per_hour == 99.0
    with pytest.raises(TrainplanError, match="must be a positive, finite number"):
        _apply_price_overrides(table, "p5=-1")


@pytest.mark.parametrize("spec, message", [
    ("abc", "'abc' is not name=price"),
    ("/tmp", "'/tmp' is not name=price"),
    ("=5", "'=5' is not name=price"),
    ("p5=nan", "price for 'p5' must be a positive, finite number of dollars per hour (at most 1e+06), got 'nan'"),
    ("p5=inf", "must be a positive, finite number"),
    ("p5=1e300", "must be a positive, finite number"),
    ("p5=fast", "price for 'p5' is not a number: 'fast'"),
    ('{"p5": NaN}', "NaN is not a JSON number"),
    ('{"p5": true}', "price for 'p5' is not a number: True"),
    ('{"p5": [1]}', "price for 'p5' is not a number: [1]"),
    ("missing.json", "TRAINPLAN_PRICES file 'missing.json' does not exist or is not a file"),
])
def test_bad_price_overrides_are_one_line_errors(spec, message):
    with pytest.raises(TrainplanError) as e:
        _apply_price_overrides(nodes(), spec)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_hardware_cli_lists_and_shows_json(cli):
    code, out, _ = cli("hardware")
    assert code == 0 and "ml.p6-b200.48xlarge" in out and "b200-180gb" in out
    code, out, _ = cli("hardware", "p6-b200", "--json")
    d = json.loads(out)
    assert d["gpus_per_node"] == 8 and d["inter_node_gbps"] == 3200 and d["gpu"] == "b200-180gb"
    code, out, _ = cli("hardware", "b200", "--json")
    assert json.loads(out)["peak_tflops_dense"]["bf16"] == 2250
    assert {"mxfp8", "nvfp4"} <= set(json.loads(out)["precision_recipes"])  # the registry's archs
    code, out, _ = cli("hardware", "h100", "--json")
    assert "fp8_tensorwise" in json.loads(out)["precision_recipes"] and "mxfp8" not in out


def test_hardware_cli_unknown_name_is_one_line_exit_2(cli):
    code, out, err = cli("hardware", "tpu-v5")
    assert code == 2 and out == "" and err.count("\n") == 1 and "unknown GPU or instance 'tpu-v5'" in err


def test_malformed_price_override_is_one_line(tmp_path):
    with pytest.raises(TrainplanError, match="TRAINPLAN_PRICES is not valid JSON"):
        _apply_price_overrides(nodes(), "{p5: 3")
    f = tmp_path / "prices.json"
    f.write_text("[1, 2]")
    with pytest.raises(TrainplanError, match="expected a JSON object"):
        _apply_price_overrides(nodes(), str(f))
    with pytest.raises(TrainplanError, match="does not exist"):
        _apply_price_overrides(nodes(), str(tmp_path / "missing.json"))
