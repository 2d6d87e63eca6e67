import os
from pathlib import Path

import pytest

from trainplan.cli import main

# Published runs to validate against: the packaged copy (src/trainplan/validation/data, the shared
# file plus the annotated execution settings) is always there; the shared tree beside the checkout
# holds the original, which tests that still read it skip without on a laptop; in CI its absence is
# an error, not a silent skip.
DEV_DATASET = Path(__file__).resolve().parents[1] / "src" / "trainplan" / "validation" / "data" / "published_dev.json"
SHARED_DEV_DATASET = Path(__file__).resolve().parents[2] / "shared" / "validation" / "published_dev.json"


def pytest_sessionstart(session):
    if os.environ.get("CI") and not SHARED_DEV_DATASET.is_file():
        raise pytest.UsageError(f"CI: {SHARED_DEV_DATASET} is missing; the validation tests would skip")


@pytest.fixture
def cli(capsys):
    """Run the CLI in-process: returns (exit code, stdout, stderr); argparse's exits included."""

    def run(*argv: str):
        try:
            code = main(list(argv))
        except SystemExit as e:  # argparse: usage errors (2), --help and --version (0)
            code = e.code
        out, err = capsys.readouterr()
        return code, out, err

    return run
