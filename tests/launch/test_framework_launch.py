"""`launch sagemaker|slurm|k8s` of a plan whose stack has an exporter runs that framework (issue #22
item 4): its image, its entry with every exported argument, the exported files shipped with the job,
and its checkpoint directory pointed at the target's checkpoint storage. Facts from
launch/frameworks.toml; the exporters' own tests check the exported arguments themselves."""

from __future__ import annotations

import json
import shlex
import subprocess

import pytest
from framework_plans import megatron_moe_plan, megatron_plan, plan_of, torchtitan_plan
from launch_fixtures import assert_no_credentials, check_golden

from trainplan.errors import TrainplanError
from trainplan.export import exporter
from trainplan.export.megatron_read import read as read_megatron
from trainplan.launch import find_target, framework, k8s, render, sagemaker_entry, slurm
from trainplan.launch.k8s import K8sOptions
from trainplan.launch.sagemaker import CHECKPOINT_DIR, CODE_DIR, FRAMEWORK_ENTRY, SageMakerOptions
from trainplan.launch.slurm import SlurmOptions

ROLE = "arn:aws:iam::123456789012:role/SageMakerTrainingRole"
SM = SageMakerOptions(role=ROLE, region="us-west-2", bucket="my-bucket")
FSX = "/fsx/jobs/plan.json"


def _spec(plan) -> dict:
    return framework.data()[exporter(plan.layout.stack).FRAMEWORK]


def _exported_args(plan) -> list[str]:
    """The exporter's own argument file as argv (what every target must pass on unchanged)."""
    return framework.framework_run(plan).exported_args()


def _sm_entry(rendered) -> list[str]:
    return json.loads(rendered.files[FRAMEWORK_ENTRY])["entry"]


# ---- SageMaker ---------------------------------------------------------------------------------

def test_sagemaker_megatron_job_ships_the_export_and_runs_pretrain_gpt():
    plan = megatron_moe_plan()
    r = render("sagemaker", plan, SM)
    spec = _spec(plan)
    entry = _sm_entry(r)
    assert entry[0] == spec["entry_script"]
    # every exported argument, in order, then the checkpoint directory SageMaker syncs to S3
    assert entry[1:-4] == _exported_args(plan)
    assert entry[-4:] == ["--save", CHECKPOINT_DIR, "--load", CHECKPOINT_DIR]
    assert "--exit-signal-handler" in entry  # SIGTERM (stop, spot) makes Megatron save
    assert set(exporter(plan.layout.stack).export(plan)) <= set(r.files)
    assert r.request["hyperparameters"]["framework-entry"] == f"{CODE_DIR}/{FRAMEWORK_ENTRY}"
    assert r.request["source_code"]["command"].endswith("exec python3 trainplan_entry.py")
    assert spec["clone"] in r.request["source_code"]["command"]
    assert r.files["requirements.txt"] == "".join(f"{x}\n" for x in spec["requirements"])
    assert ".dkr.ecr.us-west-2.amazonaws.com/pytorch-training:" in r.request["training_image"]
    assert r.request["environment"][spec["checkout_env"]] == spec["checkout"]
    assert_no_credentials([r.files[FRAMEWORK_ENTRY], json.dumps(r.request)])


def test_the_launched_megatron_command_reads_back_as_the_plan():
    """Megatron's own argument names (megatron.toml at the pinned release) for every word of the
    launched command, --save / --load included: read back, it is the layout that was costed."""
    plan = megatron_moe_plan()
    entry = _sm_entry(render("sagemaker", plan, SM))
    c = plan.job.cluster
    text = f"torchrun --nnodes {c.nodes} --nproc-per-node {c.node.gpus_per_node} pretrain_gpt.py " + shlex.join(entry[1:])
    L = read_megatron(text, "launch").layout
    for field in ("precision", "ac", "micro_batch", "dp_shard", "tp", "pp", "cp", "ep", "sharding"):
        assert getattr(L, field) == getattr(plan.layout, field), field


def test_sagemaker_torchtitan_job_points_the_checkpoint_folder_at_opt_ml_checkpoints():
    plan = torchtitan_plan()
    r = render("sagemaker", plan, SM)
    entry = _sm_entry(r)
    assert entry[:2] == ["-m", "torchtitan.train"]
    assert entry[entry.index("--checkpoint.folder") + 1] == CHECKPOINT_DIR
    assert "trainplan_job.py" in r.files
    assert r.request["environment"]["PYTHONPATH"] == CODE_DIR  # the config module is imported by name
    assert "torchtitan==0.3.0\n" in r.files["requirements.txt"]
    assert r.request["source_code"]["command"] == "exec python3 trainplan_entry.py"


def test_image_given_replaces_the_default():
    image = "123456789012.dkr.ecr.us-west-2.amazonaws.com/megatron:core_v0.16.1"
    r = render("sagemaker", megatron_plan(), SageMakerOptions(role=ROLE, region="us-west-2", bucket="b-1x", image=image))
    assert r.request["training_image"] == image
    assert render("k8s", megatron_plan(), K8sOptions(image=image)).request["items"][-1]["spec"][
        "pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["image"] == image


def test_sagemaker_data_channel_and_steps_replace_the_exported_ones():
    plan = megatron_plan()
    r = render("sagemaker", plan, SageMakerOptions(role=ROLE, region="us-west-2", bucket="my-bucket",
                                                     data=("s3://my-bucket/tokens",), steps=50))
    entry = _sm_entry(r)
    assert "--mock-data" not in entry and entry.count("--train-iters") == 1
    assert entry[entry.index("--data-path") + 1] == "/opt/ml/input/data/train"
    assert entry[entry.index("--train-iters") + 1] == "50"
    assert r.request["input_data"] == [{"channel_name": "train", "data_source": "s3://my-bucket/tokens"}]


def test_sagemaker_entry_runs_the_framework_entry_file(tmp_path):
    """Container side: the entry reads framework_entry.json and expands the checkout variable."""
    f = tmp_path / FRAMEWORK_ENTRY
    f.write_text(json.dumps({"entry": ["$MEGATRON_LM/pretrain_gpt.py", "--num-layers", "2"]}))
    env = {"SM_HPS": json.dumps({"framework-entry": str(f), "nproc-per-node": 8}), "SM_HOST_COUNT": "2",
           "SM_CURRENT_HOST_RANK": "1", "SM_MASTER_ADDR": "algo-1", "SM_MASTER_PORT": "7777", "SM_NUM_GPUS": "8",
           "MEGATRON_LM": "/workspace/Megatron-LM"}
    argv = sagemaker_entry.command(env)
    assert argv[:1] == ["torchrun"] and "--node-rank" in argv
    assert argv[-3:] == ["/workspace/Megatron-LM/pretrain_gpt.py", "--num-layers", "2"]


@pytest.mark.slow
def test_sagemaker_framework_jobs_pass_the_create_training_job_schema(monkeypatch):
    """The SDK builds the request offline and botocore's ParamValidator + service-2.json limits hold."""
    pytest.importorskip("sagemaker.train")
    from launch_fixtures import FAKE_KEY, FAKE_SECRET

    from trainplan.launch.sagemaker_sdk import capture

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", FAKE_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", FAKE_SECRET)
    for plan in (megatron_moe_plan(), torchtitan_plan()):
        rendered = render("sagemaker", plan, SM)
        checked = find_target("sagemaker").check(rendered)
        api = checked.extra["create_training_job"]
        assert api["HyperParameters"]["framework-entry"] == f"{CODE_DIR}/{FRAMEWORK_ENTRY}"
        assert api["CheckpointConfig"]["LocalPath"] == CHECKPOINT_DIR
        _, uploads = capture(rendered)
        shipped = next(files for files in uploads.values() if FRAMEWORK_ENTRY in files)
        assert json.loads(shipped[FRAMEWORK_ENTRY])["entry"] == _sm_entry(rendered)
        assert_no_credentials([json.dumps(api)], list(shipped.values()))


# ---- Slurm -------------------------------------------------------------------------------------

def test_slurm_megatron_script_golden():
    # pyxis image syntax (https://github.com/NVIDIA/pyxis: --container-image=[REGISTRY#]IMAGE[:TAG]),
    # Megatron's SIGTERM save 120 s before the limit, the export written beside the script.
    r = render("slurm", megatron_plan(), SlurmOptions(plan_path=FSX, partition="p6", time_limit="2-00:00:00"))
    check_golden("slurm_megatron_llama8b_p6.sbatch", r.files["trainplan.sbatch"])
    check_golden("slurm_megatron_llama8b_p6_node.sh", r.files["trainplan_node.sh"])


def test_slurm_scripts_are_valid_bash():
    for plan in (megatron_moe_plan(), torchtitan_plan()):
        r = render("slurm", plan, SlurmOptions(plan_path=FSX))
        for name in ("trainplan.sbatch", "trainplan_node.sh"):
            done = subprocess.run(["bash", "-n"], input=r.files[name], text=True, capture_output=True, check=False)
            assert done.returncode == 0, (name, done.stderr)


def test_slurm_node_script_passes_every_exported_argument_and_the_shared_checkpoint_dir():
    plan = megatron_moe_plan()
    r = render("slurm", plan, SlurmOptions(plan_path=FSX))
    words = shlex.split(r.files["trainplan_node.sh"].split("exec torchrun", 1)[1].replace("\\\n", " "))
    i = words.index("$MEGATRON_LM/pretrain_gpt.py")
    assert words[i + 1:-4] == _exported_args(plan)
    assert words[-4:] == ["--save", "$CHECKPOINT_DIR", "--load", "$CHECKPOINT_DIR"]
    assert "export CHECKPOINT_DIR=/fsx/jobs/checkpoints/trainplan-mixtral-8x7b" in r.files["trainplan.sbatch"]
    assert "#SBATCH --signal=TERM@120" in r.files["trainplan.sbatch"]
    assert "--container-image=nvcr.io#nvidia/pytorch:25.12-py3" in r.files["trainplan.sbatch"].replace("'", "")


def test_slurm_torchtitan_installs_it_and_gets_no_early_signal():
    r = render("slurm", torchtitan_plan(), SlurmOptions(plan_path=FSX))
    assert "--signal=" not in r.files["trainplan.sbatch"]  # torchtitan 0.3.0 has no signal handler
    assert "pip install torchtitan==0.3.0\n" in r.files["trainplan_node.sh"]
    assert "export PYTHONPATH=/fsx/jobs\n" in r.files["trainplan.sbatch"]
    assert '--checkpoint.folder "$CHECKPOINT_DIR"' in r.files["trainplan_node.sh"]
    assert "trainplan_job.py" in r.files


def test_slurm_submit_writes_every_file_beside_the_plan(tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr(subprocess, "run", lambda argv, **k: ran.append(argv) or subprocess.CompletedProcess(argv, 0))
    r = render("slurm", megatron_plan(), SlurmOptions(plan_path=str(tmp_path / "plan.json")))
    code, _ = slurm.submit(r, tmp_path)
    assert code == 0 and ran == [["sbatch", str(tmp_path / "trainplan.sbatch")]]
    for name, text in r.files.items():
        assert (tmp_path / name).read_text() == text


def test_pyxis_image():
    assert slurm.pyxis_image("nvcr.io/nvidia/pytorch:25.12-py3") == "nvcr.io#nvidia/pytorch:25.12-py3"
    assert slurm.pyxis_image("pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime") == "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"
    assert slurm.pyxis_image("localhost:5000/x:1") == "localhost:5000#x:1"


# ---- Kubernetes --------------------------------------------------------------------------------

def test_k8s_megatron_job_has_the_export_in_its_configmap_and_saves_on_the_pvc():
    plan = megatron_moe_plan()
    r = render("k8s", plan, K8sOptions())
    config = next(i for i in r.request["items"] if i["kind"] == "ConfigMap")["data"]
    assert set(exporter(plan.layout.stack).export(plan)) <= set(config)
    job = next(i for i in r.request["items"] if i["kind"] == "PyTorchJob")
    c = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert c["image"] == _spec(plan)["image"]
    assert c["command"][:2] == ["bash", "-c"]
    line = c["command"][2].replace("$$", "$")  # Kubernetes' escape of a literal '$'
    words = shlex.split(line.split("exec ", 1)[1])
    assert words[0] == "torchrun" and "--rdzv-endpoint" in words
    i = words.index("$MEGATRON_LM/pretrain_gpt.py")
    ckpt = f"{k8s.CHECKPOINT_MOUNT}/trainplan-mixtral-8x7b"
    assert words[i + 1:] == [*_exported_args(plan), "--save", ckpt, "--load", ckpt]


def test_k8s_torchtitan_reads_its_config_module_from_the_configmap():
    r = render("k8s", torchtitan_plan(), K8sOptions())
    c = r.request["items"][-1]["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    assert {"name": "PYTHONPATH", "value": k8s.PLAN_MOUNT} in c["env"]
    assert "trainplan_job.py" in r.request["items"][0]["data"]


# ---- what does not launch ----------------------------------------------------------------------

def test_a_stack_that_does_not_launch_is_refused_naming_the_ones_that_do():
    # nemo exports (--to nemo, --to hyperpod) but launch/frameworks.toml says nothing about starting it;
    # composer has no exporter at all
    plan = plan_of("bf16 ac=full mb=1 ga=1 dp=1x8(fsdp) stack=nemo")
    with pytest.raises(TrainplanError, match=r"stack nemo yet \(it exports: trainplan export --to nemo or --to "
                                             r"hyperpod\).*trainplan \(its own trainer\), torchtitan, megatron") as e:
        render("slurm", plan, SlurmOptions(plan_path=FSX))
    assert "\n" not in str(e.value)
    plan = plan_of("bf16 ac=full mb=1 ga=1 dp=1x8(fsdp) stack=composer")
    with pytest.raises(TrainplanError, match=r"stack composer yet; launch runs the stacks trainplan"):
        render("k8s", plan)


def test_torchtitan_takes_one_dataset_path():
    with pytest.raises(TrainplanError, match="one dataset path"):
        render("slurm", torchtitan_plan(), SlurmOptions(plan_path=FSX, data=("/fsx/a", "/fsx/b")))


def test_every_launch_entry_is_a_framework_that_exports():
    # the launch facts are per export target (a stack's first target is what launch starts); a stack
    # whose target has no entry is refused in one line (test_a_stack_that_does_not_launch_...)
    import importlib

    from trainplan.export import exporters

    known = exporters()
    for name in framework.data():
        assert name in known and importlib.import_module(known[name]).FRAMEWORK == name


@pytest.fixture
def titan():
    """torchtitan 0.3.0's ConfigManager, as tests/export/test_torchtitan_loader.py loads it on CPU."""
    import sys
    import types

    try:
        import triton  # noqa: F401
    except ImportError:
        kernels = "torchtitan.distributed.minimal_async_ep.kernels"
        stand_in = types.ModuleType(kernels)
        stand_in.__getattr__ = lambda name: (lambda *a, **k: None) if not name.startswith("__") else None
        sys.modules.setdefault(kernels, stand_in)
    pytest.importorskip("torchtitan", reason="needs the torchtitan extra: pip install -e '.[torchtitan]'")
    from torchtitan.config import ConfigManager

    return ConfigManager


def test_torchtitan_parses_the_launched_arguments(titan, tmp_path, monkeypatch):
    """The launch's overrides are torchtitan 0.3.0's own: its ConfigManager takes the entry's
    arguments and points the checkpoint folder and dump folder where the target keeps them."""
    import sys

    plan = torchtitan_plan()
    r = render("sagemaker", plan, SM)
    for name, text in exporter(plan.layout.stack).export(plan).items():
        (tmp_path / name).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("trainplan_job", None)
    config = titan().parse_args(_sm_entry(r)[2:])
    assert config.checkpoint.folder == CHECKPOINT_DIR and config.dump_folder == "/opt/ml/model"
    assert config.checkpoint.interval == plan.train.checkpoint_every


def test_frameworks_toml_names_files_the_exporters_write():
    """The argument file megatron's entry reads, and the config module torchtitan's --module names."""
    m, t = megatron_plan(), torchtitan_plan()
    assert _spec(m)["args_file"] in exporter(m.layout.stack).export(m)
    args = _spec(t)["args"]
    assert f"{args[args.index('--module') + 1]}.py" in exporter(t.layout.stack).export(t)


def test_megatron_sets_one_connection_where_the_exporters_script_does():
    """CUDA_DEVICE_MAX_CONNECTIONS=1 exactly where the exporter's own pretrain_gpt.sh sets it (not for
    Megatron-FSDP, which refuses it)."""
    for plan in (megatron_plan(), plan_of("bf16 ac=selective mb=1 ga=4 dp=1x8(fsdp) stack=megatron")):
        script = exporter(plan.layout.stack).export(plan)["pretrain_gpt.sh"]
        env = render("slurm", plan, SlurmOptions(plan_path=FSX)).env
        assert ("CUDA_DEVICE_MAX_CONNECTIONS" in env) == ("CUDA_DEVICE_MAX_CONNECTIONS=1" in script), plan.layout.sharding
