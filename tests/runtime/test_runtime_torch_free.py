"""The commands that read runs and render launches must work without torch installed."""

import subprocess
import sys

CODE = """
import sys
sys.modules['torch'] = None  # any `import torch` now raises ImportError
import trainplan.commands.train, trainplan.commands.compare_run, trainplan.runtime, trainplan.runtime.world
from trainplan.cli import main
sys.exit(main(['train', '--dry-run', '--nproc', '2']))
"""


def test_train_and_compare_run_import_without_torch():
    p = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 0, p.stderr
    assert "-m torch.distributed.run --standalone --nproc-per-node=2 -m trainplan.runtime --demo" in p.stdout
