"""bench/results cannot go stale unnoticed (bench/run_all.py states the rule): every result at its
top level is stamped (bench/_stamp.py) by a benchmark run_all lists, at a commit that is an ancestor
of HEAD, and every listed benchmark has a result. Cheap: reads the files and asks git, times nothing.
A failure here is fixed by regenerating the results (`make bench`) and committing them."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
RESULTS = sorted((BENCH / "results").glob("*.json"))  # top level only: results/archive/ is history
REGENERATE = "regenerate with `make bench` (python bench/run_all.py) and commit bench/results"


def _benches() -> dict[str, list[str]]:
    spec = importlib.util.spec_from_file_location("run_all", BENCH / "run_all.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.BENCHES


SCRIPTS = {f"bench/{name}.py" for name in _benches()}


def _stamps() -> dict[str, dict | None]:
    out = {}
    for f in RESULTS:
        s = json.loads(f.read_text()).get("stamp")
        out[f.name] = s if isinstance(s, dict) else None
    return out


def test_the_listed_benchmarks_are_the_scripts_that_write_results():
    writers = {f"bench/{p.name}" for p in BENCH.glob("[!_]*.py") if "_stamp.write(" in p.read_text()}
    assert writers == SCRIPTS, f"bench/run_all.py BENCHES lists {sorted(SCRIPTS)}; these write results: {sorted(writers)}"


def test_every_result_is_stamped_by_a_listed_benchmark():
    bad = []
    for name, s in _stamps().items():
        if s is None or not re.fullmatch(r"[0-9a-f]{40}", str(s.get("commit"))) or not s.get("measured_at"):
            bad.append(f"{name}: no stamp (commit, measured_at)")
        elif s.get("script") not in SCRIPTS:
            bad.append(f"{name}: written by {s.get('script')!r}, which bench/run_all.py does not run "
                       "(history belongs in bench/results/archive/)")
    assert RESULTS, f"bench/results holds no results; {REGENERATE}"
    assert not bad, "\n".join(bad) + f"\n{REGENERATE}"


def test_every_listed_benchmark_has_a_result():
    written = {s.get("script") for s in _stamps().values() if s}
    missing = sorted(SCRIPTS - written)
    assert not missing, f"no stamped result in bench/results for {', '.join(missing)}; {REGENERATE}"


def test_every_result_was_measured_at_an_ancestor_of_head():
    inside = subprocess.run(["git", "rev-parse", "--is-inside-work-tree"], cwd=ROOT, capture_output=True,
                            text=True, check=False)
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        pytest.skip(f"{ROOT} is not a git checkout: the results' commits cannot be compared with HEAD")
    bad = []
    for name, s in _stamps().items():
        commit = (s or {}).get("commit")
        if not commit:
            bad.append(f"{name}: no commit")
            continue
        r = subprocess.run(["git", "merge-base", "--is-ancestor", commit, "HEAD"], cwd=ROOT, capture_output=True,
                           text=True, check=False)
        if r.returncode == 1:
            bad.append(f"{name}: measured at {commit[:12]}, which is not an ancestor of HEAD")
        elif r.returncode:
            bad.append(f"{name}: commit {commit[:12]} is unknown to this clone ({r.stderr.strip()})")
    assert not bad, "\n".join(bad) + f"\n{REGENERATE}"
