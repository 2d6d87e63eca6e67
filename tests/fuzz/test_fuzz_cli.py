"""The command line under fuzzing: each command with a few of its flags set to boundary, absurd or
garbage values (and, for `plan` and `estimate`, a TRAINPLAN_PRICES to go with them). Whatever
the argv, main() returns or exits 0 or 2, an error is one line, and --json is strict JSON.

Kept bounded: small models and one instance type for the searching commands, no `train` or
`launch` without --dry-run, no `trace` or `validate` (torch, and the whole dataset: their inputs
are fuzzed at their loaders)."""

from pathlib import Path

import pytest
from fuzz_helpers import EXTREME_TEXT, check_answer, environment, fuzz_settings, run_cli
from hypothesis import event, given
from hypothesis import strategies as st

from trainplan.hardware import nodes

VALUE = st.one_of(st.sampled_from(EXTREME_TEXT), st.integers(-2, 10**6).map(str),
                  st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=6),
                  st.floats(allow_nan=True, allow_infinity=True).map(repr))
NUMBERS = ["1", "2", "4", "8", "16", "64", "1024", "4096", "8192", "131072", "1000000"]
PLAUSIBLE = {
    "--precision": ["bf16", "fp8", "fp8_tensorwise", "mxfp8", "fp16", "bf16_pure"],
    "--ac": ["none", "selective", "full", "partial", "offload"], "--sharding": ["none", "zero1", "zero2", "fsdp"],
    "--pp-schedule": ["1f1b", "interleaved", "gpipe"], "--priority": ["throughput", "communication", "context"],
    "--stack": ["trainplan", "megatron", "torchtitan", "nemo"], "--global-batch": ["64", "256", "8:64", "512"],
    "--tokens": ["1T", "300B", "15T", "1e12"], "--price": ["98.3", "1", "0.01"], "--budget": ["1000", "1e6"],
    "--tolerance": ["0", "0.05", "0.5"], "--capacity-gib": ["40", "80", "192"],
    "--layout": ["bf16 ac=full mb=1 ga=1 dp=1x8(fsdp)", "fp8_tensorwise ac=none mb=2 ga=4 dp=1x4(zero1) tp=2"],
    "--max-runtime": ["36h", "2d", "90m"], "--max-wait": ["3d"], "--keep-alive": ["60"], "--tag": ["team=ml", "a="],
    "--ultraserver": ["u-1:2", "u:0"], "--job-name": ["run", "a" * 70, "-x-"], "--out": ["runs/x", "/tmp"],
    "--time": ["2-00:00:00", "90", "1:30:00", "banana", "1:75:00"], "--warn-before": ["120", "60s", "3h"],
    "--data": ["/nonexistent.jsonl", "", ",", "/tmp", "/etc/hostname"], "--tokenizer": ["/nonexistent.json", "", "/tmp"],
    "--tensorboard": ["/proc/tb", "", "/etc/hostname/tb"],
}


def value(flag: str):
    """Mostly a plausible value for `flag` (so that runs get past the flags), else any of VALUE."""
    plausible = st.sampled_from(PLAUSIBLE.get(flag, NUMBERS))
    return st.one_of(plausible, plausible, VALUE)


def mostly(good: list[str], bad: list[str]):
    return st.one_of(st.sampled_from(good), st.sampled_from(good), st.sampled_from(good), st.sampled_from(bad))


MODEL = mostly(["llama-3.2-1b", "qwen3-30b-a3b", "gpt3-175b", "mixtral-8x7b"], ["nope", "", "./none.json"])
INSTANCE = mostly(["ml.p5.48xlarge", "p6-b200", "ml.p4d.24xlarge", "dgx-h100"], ["tpu", "p5,p4d", " "])
LAYOUT_FLAGS = ["--nodes", "--seq-len", "--global-batch", "--precision", "--ac", "--ac-layers", "--micro-batch",
                "--dp-replicate", "--dp-shard", "--sharding", "--tp", "--pp", "--pp-schedule", "--vp", "--cp",
                "--ep", "--stack", "--layout"]
SWITCHES = ["--allow-long-context", "--chunked-loss", "--fp8-allgather", "--torch-compile", "--no-flash-attention",
            "--allow-risk", "--allow-long-context", "--chunked-loss", "--bogus"]
# command -> (fixed argv, flags that take a value)
COMMANDS = {
    "estimate": (["estimate", "--json"], [*LAYOUT_FLAGS, "--tokens", "--price"]),
    "fit": (["fit", "--json"], [*LAYOUT_FLAGS, "--capacity-gib"]),
    "plan": (["plan", "--json", "--nodes", "1"], ["--seq-len", "--global-batch", "--precision", "--tolerance",
                                                  "--tokens", "--budget", "--price", "--top", "--priority",
                                                  "--stack"]),
    "model": (["model", "--json"], []),
    "hardware": (["hardware", "--json"], []),
    "launch": (["launch", "--dry-run", "--json"], ["--steps", "--nnodes", "--nproc-per-node", "--max-runtime",
                                                   "--max-wait", "--keep-alive", "--volume-gib", "--tag",
                                                   "--ultraserver", "--job-name", "--efa-devices", "--time",
                                                   "--warn-before", "--data"]),
    "train": (["train", "--dry-run"], ["--steps", "--nproc", "--out", "--data", "--tokenizer", "--tensorboard"]),
}


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory):
    f = tmp_path_factory.mktemp("cli") / "plan.json"
    code, _, err = run_cli(["plan", "--model", "llama-3.2-1b", "--instance", "ml.p5.48xlarge", "--nodes", "1",
                            "--out", str(f)])
    assert code == 0, err
    return str(f)


@st.composite
def argvs(draw, plan_file: str):
    name = draw(st.sampled_from(sorted(COMMANDS)), label="command")
    argv, flags = COMMANDS[name]
    argv = list(argv)
    if name in ("estimate", "fit", "plan"):
        argv += ["--model", draw(MODEL), "--instance", draw(INSTANCE)]
    elif name == "model":
        argv.insert(1, draw(MODEL))
    elif name == "hardware":
        argv.insert(1, draw(st.sampled_from(["b200", "ml.p5.48xlarge", "x", ""])))
    elif name == "launch":
        argv.insert(1, draw(st.sampled_from(["local", "slurm", "k8s", "ray"])))
        argv += ["--plan", plan_file, "--image", "img:1"]
    elif name == "train":
        argv += ["--plan", plan_file, "--fit-world"]
    for flag in draw(st.lists(st.sampled_from(flags), max_size=3, unique=True), label="flags") if flags else []:
        argv += [flag, draw(value(flag), label=flag)]
    argv += draw(st.lists(st.sampled_from(SWITCHES), max_size=2, unique=True), label="switches")
    if name not in ("estimate", "fit", "plan"):
        argv = [a for a in argv if a not in SWITCHES[:-1]]  # theirs only; --bogus stays, for every command
    if name == "plan" and "--priority" in argv:
        # cost and time search every priced instance type: seconds per example; one is enough
        i = argv.index("--priority") + 1
        if argv[i] in ("cost", "time"):
            argv[i] = "communication"
    return argv


@fuzz_settings(300)
@given(data=st.data())
def test_any_argv_is_answered_in_one_line(plan_file, data):
    argv = data.draw(argvs(plan_file), label="argv")
    code, out, err = run_cli(argv)
    event(f"{argv[0]} exit {code}")
    check_answer(argv, code, out, err)


@fuzz_settings(60)
@given(prices=st.one_of(st.sampled_from(["abc", "/tmp", "ml.p5.48xlarge=nan", "ml.p5.48xlarge=inf", "p5=1e400",
                                         '{"p5": 1e400}', "p5=0", "p5=-3", "p5=55.04", "=1", "p5="]),
                        st.text(max_size=12)),
       command=st.sampled_from([["estimate", "--json", "--model", "llama-3.2-1b", "--instance", "p5", "--tokens", "1T"],
                                ["hardware", "--json", "p5"]]))
def test_trainplan_prices_from_the_environment(prices, command):
    nodes.cache_clear()  # the table is read once per process; read it with this environment
    try:
        with environment(TRAINPLAN_PRICES=prices.replace("\x00", "")):
            code, out, err = run_cli(command)
    finally:
        nodes.cache_clear()
    check_answer(command, code, out, err)


LOGS = Path(__file__).resolve().parents[1] / "ingest" / "fixtures"


@fuzz_settings(60)
@given(data=st.data())
def test_ingest_answers_any_log_and_flags_in_one_line(tmp_path_factory, data):
    # a real fixture, a garbled copy of one, or a path that is not a log; any --format / --gpu; a fresh
    # --out (or one that exists): exit 0 or 2, one line when it fails, strict JSON with --json
    where = tmp_path_factory.mktemp("ingest")
    log = data.draw(st.sampled_from(["torchtitan-0.3.0.log", "megatron-core_v0.16.1.log", "garbled", "/etc",
                                     "/nonexistent.log"]), label="log")
    if log == "garbled":
        text = (LOGS / data.draw(st.sampled_from(sorted(p.name for p in LOGS.iterdir())))).read_text()
        cut = data.draw(st.integers(0, len(text)), label="cut")
        path = where / "garbled.log"
        path.write_text(text[:cut] + data.draw(st.text(max_size=40), label="noise").replace("\x00", "") + text[cut:])
        log = str(path)
    elif not log.startswith("/"):
        log = str(LOGS / log)
    out = str(where / "run") if data.draw(st.booleans(), label="fresh out") else str(where)
    argv = ["ingest", log, "--json", "--out", out,
            "--format", data.draw(st.sampled_from(["torchtitan", "megatron", "nemo", "", "x" * 200]), label="format")]
    if data.draw(st.booleans(), label="gpu"):
        argv += ["--gpu", data.draw(st.sampled_from(["h100", "b200", "tpu", ""]), label="gpu value")]
    code, out_text, err = run_cli(argv)
    check_answer(argv, code, out_text, err)
