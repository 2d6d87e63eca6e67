"""Reading a torchtitan 0.3.0 config function back: torchtitan's own declarative shape (its
config_registry functions), its defaults for what a file leaves out, and one-line errors that
name the key or the line for anything trainplan does not read."""

import pytest

from trainplan.errors import TrainplanError
from trainplan.export import torchtitan as tt

HEAD = """
from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss
from torchtitan.config import ParallelismConfig, TrainingConfig
from torchtitan.distributed.activation_checkpoint import FullAC
from torchtitan.models.llama3 import model_registry
from torchtitan.trainer import Trainer
"""


def _file(body: str, prelude: str = "") -> str:
    return HEAD + f"\n\ndef my_job() -> Trainer.Config:\n{prelude}    return Trainer.Config(\n{body}\n    )\n"


def test_a_config_registry_style_function_reads_as_its_job_and_layout_with_torchtitans_defaults():
    # the shape of torchtitan's own llama3_8b(): a model_spec local, sections as calls
    text = _file("""        model_spec=model_spec, hf_assets_path="./assets/hf/Llama-3.1-8B",
        loss=ChunkedLossWrapper.Config(loss_fn=CrossEntropyLoss.Config(global_vocab_size=decoder_vocab_size(model_spec))),
        training=TrainingConfig(local_batch_size=2, seq_len=8192),
        parallelism=ParallelismConfig(data_parallel_shard_degree=8),
        activation_checkpoint=FullAC.Config(),""", prelude='    model_spec = model_registry("8B")\n')
    im = tt.read(text, "job.py")
    L = im.layout
    assert im.model == "llama-3.1-8b" and (im.seq_len, im.global_batch) == (8192, 16)
    assert (L.precision, L.ac, L.micro_batch, L.grad_accum, L.dp_shard, L.chunked_loss, L.stack) == (
        "bf16", "full", 2, 1, 8, True, "torchtitan")
    assert L.execution.cuda_graphs  # 0.3.0 captures them unless training.disable_cuda_graphs
    assert "TrainingConfig.disable_cuda_graphs" in im.notes[0]


@pytest.mark.parametrize("body,prelude,says", [
    ('        model_spec=model_registry("8B"), training=TrainingConfig(local_batch_sz=2),', "",
     "TrainingConfig key 'local_batch_sz' is not one trainplan reads"),
    ('        model_spec=model_registry("8B"), parallelism=ParallelismConfig(enable_fsdp_symm_mem=True),', "",
     "ParallelismConfig key 'enable_fsdp_symm_mem' is not one trainplan reads"),
    ('        model_spec=model_registry("8B"),', "",
     "data_parallel_shard_degree = -1; trainplan needs a positive integer"),
    ('        model_spec=model_registry("9B"),', "", "model_registry('9B') of torchtitan.models.llama3 is no catalog"),
    (('        model_spec=model_registry("8B"), parallelism=ParallelismConfig(data_parallel_shard_degree=8), '
     'training=TrainingConfig(enable_cpu_offload=True),'), "", "training.enable_cpu_offload = True"),
    ('        model_spec=model_registry("8B"), wandb=1,', "", "Trainer.Config key 'wandb' is not one"),
    ('        model_spec=model_registry("8B"),', "    cfg = 3\n    cfg.x = 1\n", "cannot read this statement"),
])
def test_what_trainplan_does_not_read_is_a_one_line_error_naming_it(body, prelude, says):
    with pytest.raises(TrainplanError) as e:
        tt.read(_file(body, prelude), "job.py")
    assert says in str(e.value) and "\n" not in str(e.value)


def test_a_file_that_is_not_python_or_has_two_functions_is_refused():
    with pytest.raises(TrainplanError, match="job.py:1: not Python"):
        tt.read("def (:", "job.py")
    with pytest.raises(TrainplanError, match=r"expected one config function, found 2 \(a, b\)"):
        tt.read("def a():\n    return 1\ndef b():\n    return 2\n", "job.py")


def test_a_split_torchtitan_would_make_unevenly_is_refused_not_costed_as_even():
    text = _file('''        model_spec=model_registry("8B"), parallelism=ParallelismConfig(data_parallel_shard_degree=2,
            pipeline_parallel_degree=4),''')  # default first/last_stage_less_layers 1/1: layers 8, 9, 8, 7
    with pytest.raises(TrainplanError, match="not a split trainplan costs"):
        tt.read(text, "job.py")


def test_errors_name_the_line_that_holds_what_they_name():
    text = _file('        model_spec=model_registry("8B"),\n        training=TrainingConfig(local_batch_sz=2),')
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "local_batch_sz" in t)
    with pytest.raises(TrainplanError, match=f"^job.py:{line}: TrainingConfig key 'local_batch_sz'"):
        tt.read(text, "job.py")
