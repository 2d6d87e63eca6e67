"""Target sagemaker, inside the container: the SDK's own container scripts, as a training job runs
them, stop the trainer with a checkpoint when SageMaker sends SIGTERM.

The job is the one `launch sagemaker` renders, built by the SDK offline (capture); the container is
simulated on this machine: new PID and mount namespaces (so the SDK's ContainerEntrypoint and
ContainerArguments run as process 1, exactly as in the job), a temporary directory mounted at
/opt/ml holding what SageMaker would put there (config JSON from the request, the SDK's sm_drivers
channel, the code channel, a data channel), and this machine's Python with the torch extra as the
image. SageMaker stops a job with SIGTERM to process 1 (API_StopTrainingJob); the test sends it there.
Without trainplan's entry the first process is a bash that drops SIGTERM (a namespace's init only
gets the signals it handles) and the job runs on until it is killed: with the command left without
`exec`, this test times out waiting for the job to end (checked by hand, 2026-12-01).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("sagemaker.train")
pytest.importorskip("torch")
pytestmark = [pytest.mark.slow, pytest.mark.torch, pytest.mark.distributed]

from launch_fixtures import FAKE_KEY, FAKE_SECRET, FAKE_TOKEN, TINY
from signal_fixtures import alive, descendants, kill_all, wait_for

from trainplan.hardware import Cluster, find_node
from trainplan.job import Job, Workload
from trainplan.launch import render
from trainplan.launch.sagemaker import SageMakerOptions
from trainplan.launch.sagemaker_sdk import capture, staged_source
from trainplan.layout import Layout
from trainplan.plan import Plan, TrainSettings

ROLE = "arn:aws:iam::123456789012:role/SageMakerTrainingRole"
# --kill-child: if the test kills unshare, the namespace and every process in it go too.
UNSHARE = ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc"]


def _namespaces_work() -> bool:
    if not sys.platform.startswith("linux") or not shutil.which("unshare"):
        return False
    p = subprocess.run([*UNSHARE, "sh", "-c", "mount -t tmpfs none /opt && echo $$"], capture_output=True,
                       text=True, timeout=30, check=False)
    return p.returncode == 0 and p.stdout.strip() == "1"


pytestmark.append(pytest.mark.skipif(not _namespaces_work(), reason="needs unshare (PID and mount namespaces)"))


@pytest.fixture
def job(tmp_path, monkeypatch):
    """The request and uploads the SDK builds for a tiny plan on one ml.p6-b200.48xlarge, with an
    S3 data channel."""
    for k, v in (("AWS_ACCESS_KEY_ID", FAKE_KEY), ("AWS_SECRET_ACCESS_KEY", FAKE_SECRET),
                 ("AWS_SESSION_TOKEN", FAKE_TOKEN)):
        monkeypatch.setenv(k, v)
    tiny = replace(TINY, vocab_size=320)  # above the byte tokenizer's 259
    plan = Plan(Job(tiny, Cluster(find_node("ml.p6-b200.48xlarge"), 1), Workload(seq_len=32, global_batch=8)),
                Layout(micro_batch=1, dp_shard=8), TrainSettings(steps=100000, warmup_steps=1, checkpoint_every=0))
    rendered = render("sagemaker", plan, SageMakerOptions(role=ROLE, region="us-east-1", bucket="my-bucket",
                                                          data=("s3://my-bucket/corpus",)))
    request, uploads = capture(rendered)
    return rendered, request, uploads


def _opt_ml(root: Path, rendered, request, uploads) -> Path:
    """What SageMaker puts under /opt/ml for this job (one host, no GPU)."""
    ml = root / "ml"
    config = ml / "input" / "config"
    config.mkdir(parents=True)
    (config / "resourceconfig.json").write_text(json.dumps({
        "current_host": "algo-1", "hosts": ["algo-1"], "network_interface_name": "eth0",
        "current_instance_type": request["ResourceConfig"]["InstanceType"]}))
    channels = [c["ChannelName"] for c in request["InputDataConfig"]]
    (config / "inputdataconfig.json").write_text(json.dumps({c: {"TrainingInputMode": "File"} for c in channels}))
    hps = dict(request["HyperParameters"])
    # This machine has 2 CPU cores and no GPU: two ranks, the plan's data parallelism fitted to them,
    # on CPU (the trainer refuses a GPU plan on CPU unless asked).
    hps.update({"nproc-per-node": "2", "fit-world": "true", "device": "cpu"})
    (config / "hyperparameters.json").write_text(json.dumps(hps))
    data = ml / "input" / "data"
    drivers = next(files for uri, files in uploads.items() if uri.endswith("/sm_drivers"))
    for name, text in drivers.items():
        if "__pycache__" in name:  # the SDK copies its installed package, bytecode and all
            continue
        assert not text.startswith("<"), f"{name} was not captured as text"
        (data / "sm_drivers" / name).parent.mkdir(parents=True, exist_ok=True)
        (data / "sm_drivers" / name).write_text(text)
    with staged_source(rendered) as src:
        shutil.copytree(src, data / "code")
    # The image already holds the torch extra; pip must neither download nor touch this machine's
    # environment (PIP_NO_INDEX below), so the requirements are the ones already installed.
    (data / "train").mkdir()
    (data / "train" / "corpus.txt").write_text("the quick brown fox jumps over the lazy dog\n" * 200)
    for d in ("model", "output/data", "checkpoints"):
        (ml / d).mkdir(parents=True)
    return ml


def test_sigterm_to_the_first_process_reaches_the_trainer_which_saves(tmp_path, job):
    rendered, request, uploads = job
    ml = _opt_ml(tmp_path, rendered, request, uploads)
    spec = request["AlgorithmSpecification"]
    container = [*spec["ContainerEntrypoint"], *spec["ContainerArguments"]]
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path),
           "TRAINING_JOB_NAME": "trainplan-tiny-test", "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
           "CUDA_VISIBLE_DEVICES": "", **request["Environment"]}
    # Process 1 of the new namespaces mounts /opt/ml, then becomes the container's command.
    boot = 'mount -t tmpfs none /opt && mkdir /opt/ml && mount --bind "$0" /opt/ml && exec "$@"'
    log = (tmp_path / "job.log").open("w")
    p = subprocess.Popen([*UNSHARE, "/bin/sh", "-c", boot, str(ml), *container], env=env, stdout=log,
                         stderr=subprocess.STDOUT)
    started: set[int] = set()
    try:
        measurements = ml / "model" / "measurements.jsonl"
        wait_for(lambda: measurements.exists() and measurements.read_text().count("\n") >= 1, limit_s=300,
                 what=f"the first step; log: {tmp_path / 'job.log'}")
        started = descendants(p.pid)
        (init,) = [int(c) for t in Path(f"/proc/{p.pid}/task").glob("*") for c in (t / "children").read_text().split()]
        # Process 1 is trainplan's entry: sm_train.sh ran as process 1 and exec'ed it.
        assert "trainplan_entry.py" in Path(f"/proc/{init}/cmdline").read_text().replace("\0", " ")
        os.kill(init, signal.SIGTERM)  # what StopTrainingJob and a spot interruption do
        p.wait(timeout=180)
        wait_for(lambda: not any(alive(q) for q in started), limit_s=60, what="every process of the job to exit")
    finally:
        if p.poll() is None:
            p.kill()
        kill_all(q for q in started if alive(q))
        log.close()
    text = (tmp_path / "job.log").read_text()
    assert "passing SIGTERM to torchrun" in text, text[-3000:]
    summary = json.loads((ml / "model" / "summary.json").read_text())
    assert summary["stopped_by"] == "SIGTERM", text[-3000:]
    # The checkpoint is where SageMaker syncs it to S3 (and restores it on a spot restart).
    saved = summary["checkpoint"]
    assert saved.startswith("/opt/ml/checkpoints/") and (ml / "checkpoints" / Path(saved).name).is_dir()
    assert not (ml / "output" / "failure").exists()  # a stop, not a failure
