"""The hardware catalog: every number sourced, units converted once, lookups and errors."""

import json

import pytest

from trainplan.errors import TrainplanError
from trainplan.hardware import find_gpu, find_node, gpus, nodes
from trainplan.hardware.catalog import _apply_price_overrides
from trainplan.units import GiB

# ids used by trainplan-validation/1 (shared/validation/published_dev.json hardware.gpu)
VALIDATION_GPU_IDS = ["a100-sxm-40gb", "a100-sxm-80gb", "b200-180gb", "gb200-186gb",
                      "h100-sxm-80gb", "h100-sxm-96gb", "h200-sxm-141gb"]
ISSUE_INSTANCES = ["ml.p4d.24xlarge", "ml.p4de.24xlarge", "ml.p5.48xlarge", "ml.p5e.48xlarge",
                   "ml.p5en.48xlarge", "ml.p6-b200.48xlarge", "ml.p6-b300.48xlarge",
                   "ml.p6e-gb200.36xlarge", "ml.p6e-gb300.36xlarge", "ml.g6e.48xlarge"]
GPU_NUMBERS = ("memory_gib", "hbm_tbps", "peak_tflops", "matmul_ceiling", "nvlink_gb_per_s", "pcie_gb_per_s",
               "power_w")


@pytest.mark.parametrize("name", sorted(gpus()))
def test_every_gpu_number_has_a_source(name):
    g = find_gpu(name)
    for field in GPU_NUMBERS:
        assert g.sources.get(field), f"{name}: {field} has no source"


@pytest.mark.parametrize("name", sorted(gpus()))
def test_an_estimated_number_says_so_in_its_source(name):
    # gpus.toml `estimated`: a conversion, an inference or an assumption, never a measurement; the reader of
    # the source line must see which it is
    g = find_gpu(name)
    for field in g.estimated:
        assert any(w in g.sources[field] for w in ("estimate", "assum", "taken")), f"{name}: {field}"


def test_gb300_facts_from_hardware_facts_table_1_1():
    # HARDWARE_FACTS.md 1.1, GB300 row (dense): 288 GB, 8.0 TB/s, TF32 1250, BF16 2500, FP8 5000, FP4 15000, 1400 W;
    # NVIDIA GB300 NVL72 reference architecture: 130 TB/s NVLink over 72 GPUs = 900 GB/s per GPU per direction
    g = find_gpu("gb300")
    assert g.name == "gb300-288gb" and g.arch == "blackwell" and g.supports("fp4")
    assert [g.peak(d) / 1e12 for d in ("tf32", "bf16", "fp8", "fp4")] == [1250, 2500, 5000, 15000]
    assert g.hbm_bandwidth == 8.0e12 and g.power_w == 1400 and g.nvlink_bandwidth == 900e9
    assert g.memory_bytes == int(288e9 / GiB) * GiB  # 288 GB as GiB: the 268 EC2 exposes for B300's stacks
    # no GB300 MAMF is published: the ceiling is B300's measured one x GB200/B200's measured gain
    assert "matmul_ceiling" in g.estimated and "memory_gib" in g.estimated
    assert g.matmul_ceiling["bf16"] == pytest.approx(1769.0 * 1822.0 / 1745.0 / 2500, abs=5e-4)
    assert g.matmul_ceiling["fp8"] == pytest.approx(3353.3 * 3615.6 / 3432.5 / 5000, abs=5e-4)


def test_p6e_gb300_is_modelled_as_p6e_gb200():
    # AWS PCS "Configure UltraServer instances": p6e-gb300 UltraServers join 18 4-GPU instances over NVLink
    # (IMEX), as p6e-gb200; Grace hosts, no Spot, UltraServer placement
    gb3, gb2 = find_node("p6e-gb300"), find_node("p6e-gb200")
    assert gb3.name == "ml.p6e-gb300.36xlarge" and gb3.gpu.name == "gb300-288gb"
    assert (gb3.gpus_per_node, gb3.nvlink_domain_gpus) == (4, 72) == (gb2.gpus_per_node, gb2.nvlink_domain_gpus)
    assert gb3.nvlink_domain_gpus // gb3.gpus_per_node == 18  # u-p6e-gb300x72
    for f in ("cpu_arch", "spot", "sagemaker", "placement", "price_per_hour"):
        assert getattr(gb3, f) == getattr(gb2, f), f
    assert gb3.network.kind == "efa" and gb3.network.interfaces is None  # the EFA device count is not published
    assert "inter_node_gbps" in gb3.sources["estimated"]  # taken from p6e-gb200, and said so


def test_gb300_nvl72_reference_system():
    # NVIDIA GB300 NVL72 reference architecture: 4 ConnectX-8 (800 Gb/s) per 4-GPU compute tray; DGX GB300 is it
    n = find_node("dgx-gb300")
    assert n.name == "gb300-nvl72" and not n.sagemaker and n.cpu_arch == "arm64"
    assert n.inter_node_bandwidth_per_gpu == 800e9 / 8 and n.nvlink_domain_gpus == 72


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


def test_hardware_cli_lists_gb300_and_says_which_numbers_are_estimates(cli):
    code, out, _ = cli("hardware")
    assert code == 0 and "ml.p6e-gb300.36xlarge" in out and "gb300-288gb" in out and "gb300-nvl72" in out
    code, out, _ = cli("hardware", "gb300", "--json")
    d = json.loads(out)
    assert d["peak_tflops_dense"]["fp4"] == 15000 and "matmul_ceiling" in d["estimated"]
    assert "mxfp8" in d["precision_recipes"] and "nvfp4" in d["precision_recipes"]
    code, out, _ = cli("hardware", "p6e-gb300", "--json")
    d = json.loads(out)
    assert (d["gpus_per_node"], d["nvlink_domain_gpus"], d["cpu_arch"], d["spot"], d["placement"]) == (
        4, 72, "arm64", False, "ultraserver")


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
