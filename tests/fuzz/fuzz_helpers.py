"""Shared pieces of the property-based tests: the settings every fuzz test runs under, an
in-process CLI runner, the checks every answer must pass, and strategies that mutate valid inputs.

The CLI's contract under any input: it returns or exits with 0 or 2 (never a traceback: any other
exception fails the test), an error is one line that names the command, and --json output is
strict JSON (no NaN, no Infinity). Sizes stay small and every run is bounded, so no test hangs.
"""

from __future__ import annotations

import io
import json
import os
from contextlib import contextmanager, redirect_stderr, redirect_stdout

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from trainplan.cli import main


def fuzz_settings(examples: int) -> settings:
    """Repeatable in CI (derandomize: the same inputs every run, no example database), no
    per-example deadline (a 2-core machine shared with other jobs times nothing reliably)."""
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


@contextmanager
def environment(**env: str | None):
    old = {k: os.environ.get(k) for k in env}
    try:
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """main(argv) in-process: (exit code, stdout, stderr). Exceptions other than SystemExit
    propagate, and fail the test that called it."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code
    return code, out.getvalue(), err.getvalue()


def planned(directory, *argv: str) -> dict:
    """The plan.json that `trainplan plan ARGV --out` writes in `directory`, as a dict: the valid
    plan the plan.json fuzzers mutate."""
    f = directory / "plan.json"
    code, _, err = run_cli(["plan", *argv, "--out", str(f)])
    assert code == 0, err
    return json.loads(f.read_text())


def _refuse(name: str):
    raise AssertionError(f"{name} in JSON output")


def strict_json(text: str):
    """Parse --json output as the JSON standard: NaN and Infinity fail."""
    return json.loads(text, parse_constant=_refuse)


def check_answer(argv: list[str], code: int, out: str, err: str) -> None:
    """What every CLI answer must be, whatever the input."""
    assert code in (0, 2), (argv, code, err[-500:])
    assert "Traceback" not in err, (argv, err[-2000:])
    if code == 2:
        last = err.rstrip("\n").splitlines()[-1] if err.strip() else ""
        assert last.startswith("trainplan"), (argv, err[-500:])
        assert ": error: " in last, (argv, err[-500:])
        assert "non-finite number" not in last, (argv, last)  # print_json's backstop: a bug upstream
    elif "--json" in argv and out.strip():
        strict_json(out)


# ---- values ------------------------------------------------------------------------------------
# What a person or a file might hold where a number belongs: boundaries, sizes no machine has,
# the wrong type, and the spellings of NaN and infinity.
EXTREME = [-1, 0, 1, 2, 3, 7, 2**31, 10**12, 10**30, -10**30, 1.5, 0.5, 1e308, -0.0, "", "x", "fast",
           "1e400", None, True, False, [], {}, [1, 2], {"a": 1}]
EXTREME_TEXT = ["0", "-1", "1", "3", "nan", "NaN", "inf", "-inf", "infB", "1e400", "1e30", "99999999999999999999",
                "0.5", "x", "", " ", "1_000", "15T", "2.5e12", "--", "-", "max", "1:0", "4:2", "0:0", "8:16",
                "\x00", "é", "1e-300"]

json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20),
                      st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8),
                      st.sampled_from(EXTREME))
json_value = st.recursive(json_leaf, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c,
                                                                                           max_size=3),
                          max_leaves=6)


def _paths(obj, prefix=()):
    """Every (path) to a value inside nested dicts and lists."""
    out = []
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        out.append(prefix + (k,))
        out += _paths(v, prefix + (k,))
    return out


def mutate(data, base):
    """A copy of JSON-like `base` with 1-3 changes: a value replaced (by an extreme or any JSON
    value), a key removed, or an unknown key added."""
    obj = json.loads(json.dumps(base))
    for _ in range(data.draw(st.integers(1, 3), label="changes")):
        paths = _paths(obj)
        if not paths:
            break
        path = data.draw(st.sampled_from(paths), label="path")
        parent = obj
        for k in path[:-1]:
            parent = parent[k]
        op = data.draw(st.sampled_from(["extreme", "value", "delete", "add"]), label="op")
        if op == "extreme":
            parent[path[-1]] = data.draw(st.sampled_from(EXTREME), label="extreme")
        elif op == "value":
            parent[path[-1]] = data.draw(json_value, label="value")
        elif op == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[data.draw(st.text(min_size=1, max_size=6), label="key")] = data.draw(json_leaf)
    return obj
