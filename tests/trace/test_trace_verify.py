"""verify(job, layout): what `trainplan plan --verify` calls."""

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.torch


def test_verify_traces_the_layout_with_fsdp_and_reports_differences():
    from trainplan.hardware import cluster
    from trainplan.job import Job, Workload
    from trainplan.layout import Layout
    from trainplan.models import resolve
    from trainplan.trace import verify

    job = Job(resolve("llama-3.2-1b"), cluster("ml.p6-b200.48xlarge", 1), Workload(seq_len=1024, global_batch=8))
    out = verify(job, Layout(precision="bf16", ac="full", micro_batch=1, dp_shard=8, sharding="fsdp"))
    assert out["settings"]["fsdp"] == 8 and out["settings"]["ac"] == "full"
    assert out["relative_difference"]["params"] == 0.0
    assert out["relative_difference"]["activation_bytes_per_layer"] == 0.0  # the layer input, 2 bytes x h
    assert out["traced"]["activation_bytes_per_layer"] == 2 * 2048 * 1024
