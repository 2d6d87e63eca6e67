"""`trainplan validate`: the dev file end to end, JSON shape, errors."""

import json

import pytest

from trainplan.validation.dataset import DEV_DATASET as DEV

needs_dev = pytest.mark.skipif(not DEV.exists(), reason="published_dev.json not available")


@needs_dev
def test_json_shape_and_every_record_listed(cli):
    code, out, err = cli("validate", "--dataset", str(DEV), "--json")
    assert code == 0, err
    d = json.loads(out)
    assert len(d["records"]) == 114
    for r in d["records"]:
        assert {"id", "predicted", "error", "skipped_reason"} <= set(r)
        if r["skipped_reason"] is None:
            assert set(r["predicted"]) == {"peak_mem_gib", "step_time_s", "tokens_per_s_per_gpu", "mfu"}
            assert r["predicted"]["tokens_per_s_per_gpu"] > 0
    s = d["summary"]
    assert s["cross_validated"] is True
    assert s["skipped"] == sum(1 for r in d["records"] if r["skipped_reason"])
    full = s["tokens_per_s_per_gpu"]["by_quality"]["full"]
    assert full["count"] >= 50
    assert {"count", "median_abs", "p90_abs", "max_abs", "mean_signed"} == set(full)
    assert set(s["tokens_per_s_per_gpu"]) == {"all", "by_quality", "by_gpu", "by_precision", "by_framework",
                                              "by_scale", "by_model"}
    # MoE and dense runs are reported apart, counted from the records' own expert counts
    ds = json.loads(DEV.read_text())
    moe = {r["id"] for r in ds["records"] if (r["model"].get("num_experts") or 0) > 1}
    scored = [r for r in d["records"] if r["error"] and r["error"]["tokens_per_s_per_gpu"] is not None]
    by_model = s["tokens_per_s_per_gpu"]["by_model"]
    assert by_model["moe"]["count"] == sum(1 for r in scored if r["id"] in moe) > 0
    assert by_model["dense"]["count"] == sum(1 for r in scored if r["id"] not in moe) > 0


@needs_dev
def test_mfu_error_uses_the_records_convention(cli):
    d = json.loads(cli("validate", "--dataset", str(DEV), "--json")[1])
    both = [r for r in d["records"] if r["error"] and r["error"]["mfu"] is not None
            and r["error"]["tokens_per_s_per_gpu"] is not None]
    assert both and all(r["error"]["mfu"] == pytest.approx(r["error"]["tokens_per_s_per_gpu"]) for r in both)


@needs_dev
def test_text_report_has_the_summary(cli):
    code, out, _ = cli("validate", "--dataset", str(DEV))
    assert code == 0
    assert "cross-validated (leave one source out)" in out
    assert "skipped M096: GPU not identified" in out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "tokens_per_s_per_gpu  quality=full" in out


def test_the_packaged_dataset_is_the_default(cli):
    # a fresh clone has no ../shared: `trainplan validate` reads the copy inside the package
    code, out, err = cli("validate", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert len(d["records"]) == 114 and d["summary"]["predicted"] > 80


def test_missing_and_wrong_files(cli, tmp_path):
    code, _, err = cli("validate", "--dataset", str(tmp_path / "nope.json"))
    assert code == 2 and "does not exist" in err and "Traceback" not in err
    p = tmp_path / "x.json"
    p.write_text("[]")
    code, _, err = cli("validate", "--dataset", str(p))
    assert code == 2 and "not a trainplan-validation/1 file" in err


@needs_dev
def test_large_runs_are_reported_on_their_own(cli):
    # records on >= 256 GPUs form their own group, counted from the records' own GPU counts
    code, out, _ = cli("validate", "--dataset", str(DEV), "--json")
    d = json.loads(out)
    ds = json.loads(DEV.read_text())
    gpus = {r["id"]: r["hardware"]["num_gpus"] for r in ds["records"]}
    large = [r for r in d["records"] if r["error"] and r["error"]["tokens_per_s_per_gpu"] is not None
             and gpus[r["id"]] >= 256]
    group = d["summary"]["tokens_per_s_per_gpu"]["by_scale"]["gpus>=256"]
    assert group["count"] == len(large) > 0
    code, text, _ = cli("validate", "--dataset", str(DEV))
    assert code == 0
    assert any(line.split()[1:2] == ["gpus>=256"] for line in text.splitlines() if line.strip())


def test_out_of_sample_splits_and_coverage_are_reported(cli):
    # issue 23: beside LOSO, the time split (its dates stated), family and generation splits, and
    # the band's coverage, from the packaged profile's folds
    code, out, err = cli("validate", "--json")
    assert code == 0, err
    o = json.loads(out)["out_of_sample"]
    assert o["primary"] in o["split_dates"]
    assert set(o["methods"]) == {"loso", "family", "generation", *(f"time<{d}" for d in o["split_dates"])}
    assert all(m["available"] for m in o["methods"].values())
    t = o["methods"][f"time<{o['primary']}"]
    assert o["primary"] in t["description"] and t["predicted"] > 0
    # the time split predicts only records published on or after its date; LOSO predicts them all
    assert t["predicted"] < o["methods"]["loso"]["predicted"]
    cov = o["coverage"]
    assert cov["all"]["count"] == len(o["band"]["runs"]) and 0 < cov["all"]["share"] <= 1
    assert set(cov["by_method"]) == set(o["band"]["methods"])
    text = cli("validate")[1]
    assert f"time split at {', '.join(o['split_dates'])}" in text and "band coverage:" in text
    assert max(len(line) for line in text.splitlines()) <= 80
