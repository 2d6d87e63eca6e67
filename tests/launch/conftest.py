"""Fixtures for the launch tests; the plans themselves are in launch_fixtures.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from launch_fixtures import make_plan

from trainplan.plan import Plan


@pytest.fixture
def plan4() -> Plan:
    """Llama-3.1-8B, FSDP over 4 x ml.p6-b200.48xlarge (32 GPUs)."""
    return make_plan()


@pytest.fixture
def plan_file(tmp_path, plan4) -> Path:
    p = tmp_path / "plan.json"
    p.write_text(plan4.to_json())
    return p
