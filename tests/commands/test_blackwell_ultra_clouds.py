"""Blackwell Ultra wherever it is rented (issue #26): Google Cloud's A4X Max and Azure's ND GB300 v6 are GB300
NVL72 racks rented as VMs of 4 GPUs; `plan` keeps tensor parallelism on the 72-GPU NVLink domain across VMs, and
`compare` puts them beside AWS's p6-b200 for a 405B run of 15T tokens."""

import json

ULTRA = "ml.p6-b200.48xlarge,a4x-maxgpu-4g-metal,Standard_ND128isr_GB300_v6"


def test_plan_on_a4x_max_keeps_tp_beyond_one_vm_on_nvlink(cli):
    # megatron's preset is the stack that picks tp=8 for 405B here (trainplan's own trainer picks FSDP, tp=1)
    code, out, err = cli("plan", "--model", "llama-3.1-405b", "--instance", "a4x-maxgpu-4g-metal",
                         "--stack", "megatron", "--json")
    assert code == 0, err
    plan = json.loads(out)["plan"]
    tp = plan["layout"]["tp"]
    assert tp > 4  # more than the 4 GPUs of one bare-metal instance ...
    tiers = {c["tier"] for c in plan["estimate"]["comm"] if c["dimension"] == "tp"}
    assert tiers == {"nvlink"}  # ... and still on NVLink (GCP-A4XMAX: 18 instances = one 72-GPU domain)
    assert all(c["network_bytes"] == 0 for c in plan["estimate"]["comm"] if c["dimension"] in ("tp", "ep"))


def test_compare_405b_on_three_clouds_prints_a_table(cli):
    code, out, err = cli("compare", "--model", "llama-3.1-405b", "--instances", ULTRA, "--tokens", "15e12")
    assert code == 0, err
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80
    for name, cloud in (("a4x-maxgpu-4g-metal", "gcp"), ("Standard_ND128isr_GB300_v6", "azure")):
        rows = [line for line in lines if line.startswith(name + " ")]
        assert rows and all(f" {cloud} " in line and "%" in line for line in rows), name
    # neither cloud publishes a price: the row says where none was found instead of a number
    assert any(line.startswith("a4x-maxgpu-4g-metal: not sold on demand") for line in lines)
