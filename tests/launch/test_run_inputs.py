"""What `launch` checks on this machine before anything starts: Slurm's --time formats, empty
--data, and for `launch local` (the ranks run here) the run's inputs and the host-memory
preflight (runtime/host_memory.py): ranks that cannot hold their model are refused in one line,
with what would fit."""

import argparse
from dataclasses import replace

import pytest
from launch_fixtures import TINY, make_plan

from trainplan.commands.launch import check_local_run
from trainplan.errors import TrainplanError
from trainplan.launch.local import LocalOptions
from trainplan.launch.slurm import slurm_time, time_limit_s
from trainplan.models import resolve
from trainplan.models.params import count_params
from trainplan.runtime import host_memory
from trainplan.runtime.world import fit_to_world


# ---- Slurm --time: sbatch's six formats (https://slurm.schedmd.com/sbatch.html#OPT_time) -------
@pytest.mark.parametrize("text, seconds", [
    ("90", 90 * 60), ("0", 0), ("30:15", 30 * 60 + 15), ("2:00:00", 7200), ("1-12", 36 * 3600),
    ("1-12:30", 36 * 3600 + 1800), ("2-00:00:00", 2 * 86400), ("100:00:00", 100 * 3600),
])
def test_slurm_time_formats(text, seconds):
    assert slurm_time(text) == text and time_limit_s(text) == seconds


@pytest.mark.parametrize("text", ["banana", "", " ", "-5", "1e3", "1.5", "2h", "1:2:3:4", "1-2-3", "1-25",
                                  "1:60:00", "10:75", "1-00:00:99", "inf", "nan", "２", "1:"])
def test_slurm_time_refuses_what_sbatch_does_not_read(text):
    with pytest.raises(argparse.ArgumentTypeError):
        slurm_time(text)


def test_slurm_time_is_refused_on_the_command_line(cli, plan_file):
    code, out, err = cli("launch", "slurm", "--plan", str(plan_file), "--time", "banana", "--dry-run")
    assert code == 2 and out == "" and err.count("\n") == 1 and "argument --time" in err
    code, out, err = cli("launch", "slurm", "--plan", str(plan_file), "--time", "1", "--dry-run")
    assert code == 2 and "leaves no time to train before the SIGUSR1 --warn-before 120 s" in err
    code, out, _ = cli("launch", "slurm", "--plan", str(plan_file), "--time", "1-00:00", "--dry-run")
    assert code == 0 and "#SBATCH --time=1-00:00\n" in out


@pytest.mark.parametrize("target", ["local", "slurm", "k8s"])
def test_empty_data_is_refused(cli, plan_file, target):
    image = ["--image", "i:1"] if target == "k8s" else []
    code, out, err = cli("launch", target, "--plan", str(plan_file), "--data", " ", *image, "--dry-run")
    assert code == 2 and out == "" and "--data ' ' is empty" in err


# ---- launch local: the ranks' inputs, checked here ---------------------------------------------
def test_local_checks_the_data_its_ranks_will_read(cli, plan_file, tmp_path):
    argv = ["launch", "local", "--plan", str(plan_file), "--device", "cpu", "--nnodes", "1", "--nproc-per-node", "2",
            "--fit-world", "--dry-run"]
    code, _, err = cli(*argv, "--data", str(tmp_path / "none.jsonl"))
    assert code == 2 and err.count("\n") == 1 and "does not exist" in err
    (tmp_path / "afile").write_text("x")
    code, _, err = cli(*argv, "--out", str(tmp_path / "afile" / "out"))
    assert code == 2 and "which is a file" in err


def test_other_targets_leave_node_paths_to_the_nodes(cli, plan_file):
    code, _, err = cli("launch", "slurm", "--plan", str(plan_file), "--data", "/fsx/not/here", "--dry-run")
    assert code == 0, err


def test_starting_a_plan_on_other_processes_needs_fit_world():
    plan = make_plan(nodes=1, model=replace(TINY, vocab_size=512), seq_len=128)  # 8 GPUs; the byte tokenizer's 259 fit
    options = LocalOptions(nnodes=1, nproc_per_node=2, device="cpu")
    with pytest.raises(TrainplanError, match="pass --fit-world"):
        check_local_run(plan, options, starting=True)
    check_local_run(plan, options, starting=False)  # a dry run only notes it


# ---- host memory ------------------------------------------------------------------------------
GiB = 2**30


def _cpu_plan(model_name: str, ranks: int, seq_len: int = 1024):
    return fit_to_world(make_plan(nodes=1, model=resolve(model_name), seq_len=seq_len), ranks)


def test_a_rank_holds_its_shard_not_a_full_copy():
    one, two = (host_memory.model_bytes_per_rank(_cpu_plan("llama-3.1-8b", n)) for n in (1, 2))
    p = count_params(resolve("llama-3.1-8b")).total
    # bf16 mixed under FSDP2: fp32 parameters and gradients, two fp32 AdamW moments: 16 bytes a parameter
    assert one >= 16 * p and two >= 16 * p / 2
    assert two < 0.75 * one  # the states halve; activations and the one full parameter do not


def test_the_405b_plan_on_two_cpu_ranks_is_refused_with_what_fits():
    plan = _cpu_plan("llama-3.1-405b", 2)
    with pytest.raises(TrainplanError) as e:
        host_memory.check_host_memory(plan, 2, "cpu", steps=10, data_tokens=10**6, available=21 * GiB)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("llama-3.1-405b needs ~") and "for 2 rank(s)" in msg
    assert "21.00 GiB available" in msg and "parameters fit this way" in msg


def test_the_largest_catalog_model_that_fits_is_named():
    small, bigger = _cpu_plan("llama-3.2-1b", 2), _cpu_plan("llama-3.2-3b", 2)
    stream = host_memory.stream_bytes_per_rank(small, 10, 10**6)
    room = 2 * (host_memory.model_bytes_per_rank(small) + stream)
    assert room < 2 * (host_memory.model_bytes_per_rank(bigger) + stream)  # 3B does not fit, 1B does
    with pytest.raises(TrainplanError, match="the largest catalog model that fits is llama-3.2-1b"):
        host_memory.check_host_memory(_cpu_plan("llama-3.1-70b", 2), 2, "cpu", 10, 10**6, available=int(room))


def test_a_gpu_run_counts_only_the_token_stream_on_the_host():
    plan = _cpu_plan("llama-3.1-405b", 2)
    host_memory.check_host_memory(plan, 2, "cuda", steps=10, data_tokens=10**6, available=1 * GiB)
    with pytest.raises(TrainplanError, match="the token stream"):
        host_memory.check_host_memory(plan, 2, "cuda", steps=10**6, data_tokens=10**9, available=1 * GiB)


def test_the_stream_stops_where_the_data_ends():
    plan = _cpu_plan("llama-3.2-1b", 2)
    assert host_memory.stream_bytes_per_rank(plan, 10**6, 1000) == host_memory.STREAM_BYTES_PER_TOKEN * 1000


def test_launch_local_refuses_ranks_that_do_not_fit(monkeypatch):
    monkeypatch.setattr(host_memory, "available_bytes", lambda: 1 * GiB)
    plan = make_plan(nodes=1, model=resolve("llama-3.1-8b"), seq_len=1024)
    options = LocalOptions(nnodes=1, nproc_per_node=2, device="cpu", fit_world=True, steps=2)
    with pytest.raises(TrainplanError, match="llama-3.1-8b needs ~.* for 2 rank"):
        check_local_run(plan, options, starting=True)
    check_local_run(plan, options, starting=False)  # a dry run does not ask this machine


def test_available_memory_reads_meminfo_and_the_cgroup_limit(tmp_path):
    (tmp_path / "meminfo").write_text("MemTotal: 100 kB\nMemAvailable:   2048 kB\n")
    cg = tmp_path / "cg"
    cg.mkdir()
    assert host_memory.available_bytes(tmp_path / "meminfo", cg) == 2048 * 1024
    (cg / "memory.max").write_text("1500000\n")
    (cg / "memory.current").write_text("500000\n")
    assert host_memory.available_bytes(tmp_path / "meminfo", cg) == 1_000_000
    (cg / "memory.max").write_text("max\n")
    assert host_memory.available_bytes(tmp_path / "meminfo", cg) == 2048 * 1024


def test_largest_parameter_counts_stacked_experts():
    m = resolve("deepseek-v3")
    assert host_memory.largest_parameter(m) == max(m.vocab_size * m.hidden_size,
                                                   m.moe.num_experts * m.moe.expert_ffn_size * m.hidden_size)
    assert host_memory.largest_parameter(replace(m, moe=None)) == m.vocab_size * m.hidden_size
