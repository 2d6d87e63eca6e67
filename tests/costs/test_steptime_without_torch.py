"""estimate, validate and the calibration fit run with torch made unimportable (pure planner core)."""

import subprocess
import sys
import textwrap
from pathlib import Path

DEV = Path(__file__).resolve().parents[3] / "shared" / "validation" / "published_dev.json"


def test_estimate_and_validate_without_torch():
    code = textwrap.dedent(f"""
        import sys
        sys.modules["torch"] = None
        from trainplan.cli import main
        from trainplan.calibration import fitting, build  # noqa: F401
        assert main(["estimate", "--model", "mixtral-8x7b", "--ep", "8", "--json"]) == 0
        if {DEV.exists()!r}:
            assert main(["validate", "--dataset", {str(DEV)!r}, "--json"]) == 0
        assert "torch" not in [m for m in sys.modules if sys.modules[m] is not None]
    """)
    r = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
