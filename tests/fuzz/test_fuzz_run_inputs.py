"""The inputs of issue #27's "checked at the edge" list under fuzzing, each with an oracle: a value
known to be wrong (a bad data file, a directory under a file, a tampered estimate, a Slurm time
sbatch cannot read, an empty comma list, a report into a missing directory, heads that do not
divide the hidden size, a non-object rope_scaling, a warmup longer than the run) must be refused
in one line with exit 2, never accepted; every other answer is 0 or a one-line error.

`train` runs with --dry-run (the input checks run before it prints the torchrun line) and
`--device cpu`, so nothing imports torch or starts a process."""

import json
import math

import numpy as np
import pytest
from fuzz_helpers import EXTREME, check_answer, fuzz_settings, json_value, planned, run_cli
from hypothesis import event, given
from hypothesis import strategies as st

from trainplan.errors import TrainplanError
from trainplan.models import hf_config, spec_from_config
from trainplan.plan import plan_from_dict, train_from_dict


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """(path, bad) pairs: data files, directories and paths, each known to be usable or not."""
    d = tmp_path_factory.mktemp("inputs")
    (d / "afile").write_text("x")
    (d / "empty-dir").mkdir()
    (d / "good-dir").mkdir()
    (d / "good-dir" / "a.txt").write_text("some text")
    (d / "tok-dir").mkdir()

    def put(name, content):
        f = d / name
        if isinstance(content, np.ndarray):
            np.save(f, content)
        else:
            f.write_bytes(content if isinstance(content, bytes) else content.encode())
        return str(f)

    data = [
        (put("ok.jsonl", '{"text": "a"}\n{"text": "b"}\n'), False), (put("ok.txt", "hello"), False),
        (put("ok.npy", np.arange(50, dtype=np.int64)), False), (put("ok.bin", np.arange(9, dtype=np.uint16).tobytes()), False),
        (str(d / "good-dir"), False),
        (str(d / "missing.jsonl"), True), (str(d / "empty-dir"), True), (put("x.csv", "a,b"), True),
        (put("bad.jsonl", "{not json}\n"), True), (put("nokey.jsonl", '{"t": 1}\n'), True),
        (put("list.jsonl", "[1, 2]\n"), True), (put("num.jsonl", '{"text": 3}\n'), True),
        (put("grid.npy", np.zeros((3, 3), dtype=np.int64)), True), (put("f.npy", np.zeros(4)), True),
        (put("big.npy", np.array([0, 1 << 40], dtype=np.int64)), True), (put("junk.npy", b"\x00\x01junk"), True),
        (put("junk.parquet", b"PAR1 not really"), True), ("", True), (",", True), (" , ,", True),
        (f"{d / 'ok.txt'},,{d / 'ok.txt'}", True), (f"{d / 'ok.txt'},{d / 'missing.txt'}", True),
        ("channel:nochannel", True),
    ]
    dirs = [(str(d / "runs" / "new"), False), (str(d / "good-dir"), False), (str(d / "afile"), True),
            (str(d / "afile" / "under"), True), ("", True), ("/proc/trainplan-x", True)]
    tokenizers = [(str(d / "none.json"), True), (str(d / "tok-dir"), True), ("", True), (str(d / "afile"), True)]
    return {"--data": data, "--out": dirs, "--tensorboard": dirs, "--tokenizer": tokenizers}


@fuzz_settings(150)
@given(data=st.data())
def test_train_inputs_known_bad_are_refused(files, data):
    argv = ["train", "--dry-run", "--device", "cpu", "--steps", "2"]
    bad = False
    for flag in data.draw(st.lists(st.sampled_from(sorted(files)), min_size=1, max_size=3, unique=True), label="flags"):
        value, is_bad = data.draw(st.sampled_from(files[flag]), label=flag)
        argv += [flag, value]
        bad |= is_bad
    code, out, err = run_cli(argv)
    event(f"bad={bad} exit {code}")
    check_answer(argv, code, out, err)
    if bad:
        assert code == 2, (argv, out)


@fuzz_settings(100)
@given(data=st.data())
def test_train_demo_layouts_are_answered_before_any_process(data):
    argv = ["train", "--dry-run", "--device", "cpu"]
    for flag in data.draw(st.lists(st.sampled_from(["--tp", "--ep", "--etp", "--nproc", "--model", "--steps"]),
                                   max_size=4, unique=True), label="flags"):
        values = {"--model": ["tiny-moe", "demo-llama-tiny", "nope", ""], "--etp": ["1", "2", "0"]}.get(
            flag, ["1", "2", "3", "4", "8", "0", "-1", "x", "99999"])
        argv += [flag, data.draw(st.sampled_from(values), label=flag)]
    check_answer(argv, *run_cli(argv))


# ---- plan.json's estimate ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def base_plan(tmp_path_factory) -> dict:
    return planned(tmp_path_factory.mktemp("est"), "--model", "qwen3-30b-a3b", "--instance", "ml.p5.48xlarge",
                   "--nodes", "2")


def _leaves(o, path=()):
    items = o.items() if isinstance(o, dict) else enumerate(o) if isinstance(o, list) else ()
    for k, v in items:
        yield path + (k,), v
        yield from _leaves(v, path + (k,))


@fuzz_settings(200)
@given(data=st.data())
def test_a_tampered_estimate_is_refused(base_plan, data):
    """Every key the planner writes is required and every number is >= 0: deleting a key or making
    a number negative, NaN-as-text, null or of another type is always refused."""
    d = json.loads(json.dumps(base_plan))
    est = d["estimate"]
    numbers = [p for p, v in _leaves(est) if isinstance(v, (int, float)) and not isinstance(v, bool)]
    keys = [p for p, _ in _leaves(est) if isinstance(p[-1], str)]
    op = data.draw(st.sampled_from(["delete", "negative", "text", "null", "list"]), label="op")
    path = data.draw(st.sampled_from(keys if op == "delete" else numbers), label="path")
    parent = est
    for k in path[:-1]:
        parent = parent[k]
    if op == "delete":
        del parent[path[-1]]
    else:
        old = parent[path[-1]]
        parent[path[-1]] = {"negative": -abs(old) - data.draw(st.floats(1e-9, 1e12), label="by"),
                            "text": data.draw(st.sampled_from(["NaN", "inf", "-5", "", "1e400"])),
                            "null": None, "list": [old]}[op]
    if op == "null" and path in (("cost_per_hour",), ("usd_per_million_tokens",), ("hours_to_tokens",),
                                 ("usd_to_tokens",)):
        return  # null is what the planner writes when the instance has no price or there is no budget
    event(op)
    with pytest.raises(TrainplanError) as e:
        plan_from_dict(d)
    assert "\n" not in str(e.value)


# ---- launch slurm --time, comma lists, --html ----------------------------------------------------
@fuzz_settings(150)
@given(text=st.one_of(st.text(alphabet="0123456789:- .hmsdx", max_size=12), st.text(max_size=8),
                      st.sampled_from(["banana", "2-00:00:00", "90", "1:75:00", "-5", "１:00", "1-", "1--2"])))
def test_slurm_time_is_read_in_sbatch_formats_only(tmp_path_factory, base_plan, text):
    f = tmp_path_factory.getbasetemp() / "slurm-plan.json"
    if not f.exists():
        f.write_text(json.dumps(base_plan))
    argv = ["launch", "slurm", "--plan", str(f), "--dry-run", "--time", text, "--warn-before", "1"]
    code, out, err = run_cli(argv)
    check_answer(argv, code, out, err)
    if any(c not in "0123456789:-" for c in text.strip()) or not text.strip():
        assert code == 2, (text, out[-200:])
    if code == 0:
        assert f"#SBATCH --time={text.strip()}\n" in out


@fuzz_settings(60)
@given(text=st.text(alphabet=", \t", max_size=6), command=st.sampled_from(["compare", "plan"]))
def test_an_empty_comma_list_is_refused(text, command):
    flag = "--instances" if command == "compare" else "--instance"
    argv = [command, "--model", "llama-3.2-1b", flag, text]
    code, out, err = run_cli(argv)
    check_answer(argv, code, out, err)
    assert code == 2 and "comma" in err


@fuzz_settings(40)
@given(parts=st.lists(st.text(alphabet="abcxyz-_", min_size=1, max_size=5), min_size=1, max_size=3))
def test_html_never_creates_directories(tmp_path_factory, parts):
    root = tmp_path_factory.mktemp("html")
    target = root.joinpath("missing", *parts, "r.html")
    argv = ["plan", "--model", "llama-3.2-1b", "--nodes", "1", "--html", str(target)]
    code, out, err = run_cli(argv)
    check_answer(argv, code, out, err)
    assert code == 2 and not (root / "missing").exists()


# ---- config.json ------------------------------------------------------------------------------
LLAMA = hf_config("llama-3.1-8b")  # hidden 4096, no head_dim


@fuzz_settings(150)
@given(heads=st.one_of(st.integers(1, 5000), st.sampled_from([3, 5, 7, 33, 96, 4095])))
def test_heads_that_do_not_divide_the_hidden_size_are_refused(heads):
    cfg = dict(LLAMA, num_attention_heads=heads, num_key_value_heads=heads)
    try:
        spec = spec_from_config(cfg, name="x", where="config.json")
    except TrainplanError as e:
        assert "\n" not in str(e)
        return
    assert 4096 % heads == 0 and spec.head_dim * heads == 4096


@fuzz_settings(150)
@given(value=st.one_of(json_value, st.sampled_from(EXTREME), st.fixed_dictionaries(
    {"rope_type": st.sampled_from(["llama3", "yarn", "linear", "dynamic", "longrope", "default", "su", ""])},
    optional={"factor": st.sampled_from(EXTREME + [8.0, 1.0]), "low_freq_factor": st.sampled_from([1.0, "x", None]),
              "high_freq_factor": st.sampled_from([4.0, [], -1]), "short_factor": st.sampled_from([[1.0], [], "x"]),
              "long_factor": st.sampled_from([[1.0], [None]])})))
def test_rope_scaling_of_another_shape_is_refused(value):
    cfg = dict(LLAMA, rope_scaling=value)
    try:
        spec_from_config(cfg, name="x", where="config.json")
    except TrainplanError as e:
        assert "\n" not in str(e)
        return
    assert value is None or isinstance(value, dict), value  # accepted: null or an object
    if isinstance(value, dict) and value:
        kind = value.get("rope_type", value.get("type", "default"))
        assert kind in ("default", "linear", "dynamic", "yarn", "longrope", "llama3"), value
        factor = value.get("factor")
        assert factor is None or (isinstance(factor, (int, float)) and math.isfinite(factor) and factor >= 1), value


@fuzz_settings(150)
@given(steps=st.one_of(st.integers(-5, 10**4), st.sampled_from(EXTREME)),
       warmup=st.one_of(st.integers(-5, 10**4), st.sampled_from(EXTREME)))
def test_warmup_longer_than_the_run_is_refused(steps, warmup):
    try:
        t = train_from_dict({"steps": steps, "warmup_steps": warmup}, "train")
    except TrainplanError as e:
        assert "\n" not in str(e)
        return
    assert t.steps >= 0 and t.warmup_steps >= 0
    assert t.steps == 0 or t.warmup_steps <= t.steps
