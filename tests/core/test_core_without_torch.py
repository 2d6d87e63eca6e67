"""The planner core must import and run with torch unavailable (DESIGN.md: pure core)."""

import subprocess
import sys
import textwrap

CORE = ["trainplan.hardware", "trainplan.models", "trainplan.layout", "trainplan.job",
        "trainplan.precision", "trainplan.plan", "trainplan.cli", "trainplan.costs",
        "trainplan.costs.memory", "trainplan.costs.fit", "trainplan.costs.steptime",
        "trainplan.search", "trainplan.estimate", "trainplan.validation.run",
        "trainplan.profile", "trainplan.launch", "trainplan.supports"]


def test_core_imports_with_torch_made_unimportable():
    code = textwrap.dedent(f"""
        import importlib, sys
        sys.modules["torch"] = None  # any `import torch` now raises ImportError
        for name in {CORE!r}:
            importlib.import_module(name)
        from trainplan.cli import main  # builds every subcommand's parser
        assert main(["hardware", "--json"]) == 0
        assert main(["fit", "--model", "llama-3.1-8b", "--instance", "ml.p5.48xlarge", "--json"]) == 0
        assert "torch" not in [m for m in sys.modules if sys.modules[m] is not None]
    """)
    r = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
