"""trainplan.models is pure Python: it works with torch and transformers made unimportable."""

import subprocess
import sys
import textwrap


def test_models_work_without_torch_or_transformers():
    code = textwrap.dedent("""
        import sys
        sys.modules["torch"] = None  # `import torch` now raises ImportError
        sys.modules["transformers"] = None
        from trainplan.models import catalog, count_params, resolve
        from trainplan.models.library import CATALOG_DIR
        assert len(catalog()) == len(list(CATALOG_DIR.glob("*.json")))  # every entry builds without torch
        assert count_params(resolve("deepseek-v3")).total == 671_026_404_352
        from trainplan.cli import main
        assert main(["models", "--json"]) == 0
        assert main(["model", "gpt-oss-120b", "--json"]) == 0
        loaded = [m for m in sys.modules if sys.modules[m] is not None]
        assert not [m for m in loaded if m.split(".")[0] in ("torch", "transformers")], loaded
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
