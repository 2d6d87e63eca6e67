"""Target slurm: the sbatch script, its quoting, and what srun/torchrun receive when it runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from launch_fixtures import check_golden

from trainplan.launch import render
from trainplan.launch.slurm import SlurmOptions

WEIRD_NAME = "it's my $(touch pwned) job"
WEIRD_PATH = 'plans/with space/"q" $(touch pwned)/plan.json'


def test_sbatch_golden(plan4):
    # Checked by hand against the sbatch/srun man pages (one task per node, --exclusive) and
    # torchrun's c10d rendezvous on the first host of `scontrol show hostnames`.
    opts = SlurmOptions(plan_path="/fsx/plans/llama.json", partition="p6", account="ml",
                         time_limit="2-00:00:00", venv="/fsx/venv", steps=100)
    r = render("slurm", plan4, opts)
    check_golden("slurm_p6-b200_x4.sbatch", r.text)
    assert r.files == {"trainplan.sbatch": r.text}
    assert "#SBATCH --nodes=4" in r.text and "--nproc-per-node 8" in r.text
    assert "export FI_PROVIDER=efa" in r.text and "export FI_EFA_USE_DEVICE_RDMA=1" in r.text
    # GPUs asked for, and SIGUSR1 to the steps 120 s before the limit (sbatch(1) --gpus-per-node, --signal)
    assert "#SBATCH --gpus-per-node=8\n" in r.text and "#SBATCH --signal=USR1@120\n" in r.text


def test_warning_lead_is_the_shutdown_timeout(plan4):
    r = render("slurm", plan4, SlurmOptions(warn_s=600))
    assert "#SBATCH --signal=USR1@600\n" in r.text and "export TORCH_ELASTIC_SHUTDOWN_TIMEOUT=600\n" in r.text


def test_script_is_valid_bash(plan4, tmp_path):
    r = render("slurm", plan4, SlurmOptions(job_name=WEIRD_NAME, plan_path=WEIRD_PATH, out_dir=WEIRD_PATH,
                                             checkpoint_dir=WEIRD_PATH + "ckpt", venv="/v e/n"))
    script = tmp_path / "s.sh"
    script.write_text(r.text)
    subprocess.run(["bash", "-n", str(script)], check=True)


@pytest.mark.skipif(not shutil.which("bash"), reason="needs bash")
def test_running_the_script_hands_torchrun_the_literal_strings(plan4, tmp_path):
    """Run the script with fake scontrol, srun and torchrun: spaces, quotes and $() must arrive
    verbatim and nothing in them may execute."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/sh\nprintf 'node-a\\nnode-b\\nnode-c\\nnode-d\\n'\n")
    # srun: record its own options, then run the step command (everything from 'bash' on).
    (bin_dir / "srun").write_text(
        f"#!{sys.executable}\nimport json, os, subprocess, sys\n"
        "i = sys.argv.index('bash')\n"
        "json.dump(sys.argv[1:i], open(os.environ['SRUN_OUT'], 'w'))\n"
        "sys.exit(subprocess.run(sys.argv[i:]).returncode)\n")
    (bin_dir / "torchrun").write_text(
        f"#!{sys.executable}\nimport json, os, sys\njson.dump(sys.argv[1:], open(os.environ['ARGS_OUT'], 'w'))\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    ckpt = "ckpt dir/$(touch pwned)'"
    r = render("slurm", plan4, SlurmOptions(job_name=WEIRD_NAME, plan_path=WEIRD_PATH, out_dir=WEIRD_PATH,
                                             checkpoint_dir=ckpt, steps=7, auto_resume=True))
    script = tmp_path / "job.sbatch"
    script.write_text(r.text)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "ARGS_OUT": str(tmp_path / "args.json"),
           "SRUN_OUT": str(tmp_path / "srun.json"), "SLURM_JOB_NODELIST": "node-[a-d]", "SLURM_JOB_ID": "77"}
    subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, check=True)
    srun = json.loads((tmp_path / "srun.json").read_text())
    assert srun == ["--auto-resume=1", "--nodes=4", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    t = json.loads((tmp_path / "args.json").read_text())
    assert t[:4] == ["--nnodes", "4", "--nproc-per-node", "8"]
    assert t[t.index("--signals-to-handle") + 1] == "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1"
    assert t[t.index("--rdzv-endpoint") + 1] == "node-a:29500"
    assert t[t.index("--rdzv-id") + 1] == "77"
    assert t[t.index("-m") + 1] == "trainplan.runtime"
    assert t[t.index("--plan") + 1] == WEIRD_PATH
    assert t[t.index("--out") + 1] == WEIRD_PATH
    assert t[t.index("--checkpoint-dir") + 1] == ckpt
    assert t[-2:] == ["--steps", "7"]
    assert not (tmp_path / "pwned").exists()
    assert (tmp_path / ckpt).is_dir()  # the script made the directory it was given, literally
    assert "#SBATCH --job-name='it'\"'\"'s my $(touch pwned) job'" in r.text


def test_no_efa_environment_off_aws(tmp_path):
    from launch_fixtures import make_plan

    r = render("slurm", make_plan("dgx-h100", nodes=2), SlurmOptions(plan_path="/p.json"))
    assert "FI_PROVIDER" not in r.text and "NCCL_SOCKET_IFNAME" in r.text


@pytest.mark.torch
@pytest.mark.slow
@pytest.mark.skipif(not (shutil.which("bash") and sys.platform.startswith("linux")), reason="bash and /proc")
def test_the_early_warning_reaches_every_rank_through_torchrun(tmp_path):
    """The rendered script as Slurm runs it, with a fake srun and scontrol but the real torchrun: the
    SIGUSR1 that `--signal=USR1@120` sends to the step's task (torchrun, exec'd by bash) reaches
    every rank, which saves and exits, and the step ends (torchrun itself then exits 1: it re-raises
    the signal it handled, torch/distributed/elastic/multiprocessing/api.py SignalException). Ranks
    are a stand-in trainer (signal_fixtures.py); the real trainer's SIGUSR1 save is runtime/trainer.py's."""
    pytest.importorskip("torch")
    import signal
    import socket

    from launch_fixtures import make_plan
    from signal_fixtures import kill_all, shadow_runtime, wait_for

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/sh\necho 127.0.0.1\n")
    # srun: run the step command, noting its pid (the task Slurm signals), and wait for it.
    (bin_dir / "srun").write_text(
        f"#!{sys.executable}\nimport os, subprocess, sys\n"
        "i = sys.argv.index('bash')\n"
        "p = subprocess.Popen(sys.argv[i:])\n"
        "open(os.environ['TASK_PID'], 'w').write(str(p.pid))\n"
        "sys.exit(p.wait())\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    plan = make_plan("ml.p6e-gb200.36xlarge", nodes=1)  # one node of 4 GPUs: 4 ranks
    r = render("slurm", plan, SlurmOptions(plan_path="plan.json"))
    # The one change to the script: a free rendezvous port (other tests may hold 29500).
    script = tmp_path / "job.sbatch"
    script.write_text(r.text.replace("export RDZV_PORT=29500", f"export RDZV_PORT={port}"))
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    env = {**os.environ, "PATH": f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}",
           "PYTHONPATH": str(shadow_runtime(tmp_path)), "STANDIN_DIR": str(ranks),
           "TASK_PID": str(tmp_path / "task.pid"), "SLURM_JOB_NODELIST": "n1", "SLURM_JOB_ID": "77"}
    job = subprocess.Popen(["bash", str(script)], cwd=tmp_path, env=env)
    try:
        wait_for(lambda: len(list(ranks.glob("ready-*"))) == 4, what="4 ranks to start")
        os.kill(int((tmp_path / "task.pid").read_text()), signal.SIGUSR1)
        job.wait(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
        kill_all(int(f.read_text()) for f in ranks.glob("ready-*"))  # nothing outlives the test
    assert sorted(f.read_text() for f in ranks.glob("saved-*")) == ["SIGUSR1"] * 4


def test_data_reaches_the_ranks_quoted(plan4):
    r = render("slurm", plan4, SlurmOptions(data=("/fsx/tok ens", "/fsx/more")))
    assert "export DATA='/fsx/tok ens,/fsx/more'\n" in r.text and '--data "$DATA"' in r.text
