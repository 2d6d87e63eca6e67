"""Runtime tests need torch (the `torch` extra)."""

import pytest

pytest.importorskip("torch")
