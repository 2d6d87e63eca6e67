"""`trainplan compare` across clouds (issue #26): instances as each cloud spells them, a --cloud
filter, each row's price with its date and source and its plan's goodput, in the table and HTML."""

import json

FEW = ("--model", "llama-3.1-8b", "--tokens", "100B", "--max-nodes", "2")
THREE = "ml.p6-b200.48xlarge,a4-highgpu-8g,Standard_ND128isr_GB200_v6"


def test_three_clouds_side_by_side_with_sourced_prices(cli, tmp_path):
    page = tmp_path / "compare.html"
    code, out, err = cli("compare", *FEW, "--instances", THREE, "--json", "--html", str(page))
    assert code == 0, err
    rows = json.loads(out)["instances"]
    by = {r["instance"]: r for r in rows if r["choice"] == "cheapest"}
    assert {r["cloud"] for r in by.values()} == {"aws", "gcp", "azure"}
    aws, gcp, azure = (by[n] for n in THREE.split(","))
    # a published price carries its date and source; a cloud that publishes none gets plans, no dollars
    assert aws["price_usd_per_hour"] and aws["price_date"] and aws["price_source"]
    assert aws["usd_per_million_tokens"] is not None
    for r in (gcp, azure):
        assert r["fits"] and r["tokens_per_s"] > 0 and r["hours_to_tokens"] > 0
        assert r["price_usd_per_hour"] is None and r["usd_per_million_tokens"] is None and r["price_source"]
    assert all(0 < r["goodput"] < 1 for r in rows)
    assert (gcp["checkpoint_storage"], azure["checkpoint_storage"]) == ("gcp-managed-lustre-1000",
                                                                        "azure-managed-lustre-500")
    html = page.read_text()
    assert "Prices and where they come from" in html and aws["price_date"] in html and "azure" in html


def test_the_terminal_table_shows_cloud_price_date_and_goodput_in_80_columns(cli):
    code, out, err = cli("compare", *FEW, "--instances", THREE)
    assert code == 0, err
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80
    where = [line for line in lines if line.startswith("a4-highgpu-8g ")]
    assert where and any(" gcp " in line and "%" in line for line in where)
    assert any(line.startswith("p6-b200.48xlarge: EC2 on-demand") for line in lines)


def test_cloud_filter_without_instances_takes_that_clouds_catalog(cli):
    code, out, err = cli("compare", *FEW, "--cloud", "azure", "--json")
    assert code == 0, err
    rows = json.loads(out)["instances"]
    assert rows and {r["cloud"] for r in rows} == {"azure"}
    assert {"Standard_ND128isr_GB200_v6", "Standard_ND96isr_H100_v5"} <= {r["instance"] for r in rows}


def test_cloud_filter_keeps_that_clouds_instances_and_refuses_an_empty_list(cli):
    code, out, err = cli("compare", *FEW, "--instances", THREE, "--cloud", "gcp", "--json")
    assert code == 0, err
    assert {r["instance"] for r in json.loads(out)["instances"]} == {"a4-highgpu-8g"}
    code, _, err = cli("compare", *FEW, "--instances", "ml.p5.48xlarge", "--cloud", "azure")
    assert code == 2
    assert err.strip() == ("trainplan compare: error: --cloud azure: none of ml.p5.48xlarge is rented on azure; "
                           "leave out --instances to compare every azure instance")
