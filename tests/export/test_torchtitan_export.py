"""Export to torchtitan 0.3.0: what is written for a plan, what is refused (one line naming the
setting), and export -> read -> estimate giving the plan's own numbers."""

import pytest
from tt_plans import known_answer_plans, plan_of

from trainplan.errors import TrainplanError
from trainplan.estimate import estimate
from trainplan.export import torchtitan as tt
from trainplan.hardware import Cluster
from trainplan.job import Job, Workload
from trainplan.models import resolve
from trainplan.models.stages import Uneven, pipeline_chunks

GOOD = "fp8_rowwise ac=selective mb=1 ga=16 dp=1x2(fsdp) tp=2 pp=2 interleaved/v2 torch_compile=true stack=torchtitan"


def _round_trip(plan):
    im = tt.read(tt.export(plan)["trainplan_job.py"], "trainplan_job.py")
    job = Job(resolve(im.model), Cluster(plan.job.cluster.node, plan.job.cluster.nodes),
              Workload(seq_len=im.seq_len, global_batch=im.global_batch))
    return im, job


def test_every_known_answer_plan_exports_and_reads_back_to_the_same_estimate():
    # the search proposes only what torchtitan runs (search/capability.py reads tt.refusal), so the
    # chosen, runner-up and Pareto plans of a torchtitan search all export
    plans = known_answer_plans()
    for plan in plans:
        im, job = _round_trip(plan)
        assert im.model == plan.job.model.name and im.notes == ()  # every costed key written, none defaulted
        assert estimate(job, im.layout).to_dict() == estimate(plan.job, plan.layout).to_dict()
    assert len(plans) >= 8


def test_written_keys_are_what_the_plan_costed():
    text = tt.export(plan_of(GOOD, checkpoint_every=111, data="/fsx/c4"))["trainplan_job.py"]
    for line in ("'8B'", "recipe_name='rowwise'", "model_compile_enabled=True", "local_batch_size=16",
                 "global_batch_size=32", "seq_len=8192", "data_parallel_shard_degree=2", "tensor_parallel_degree=2",
                 "pipeline_parallel_schedule='Interleaved1F1B'", "pipeline_parallel_microbatch_size=1",
                 "pipeline_parallel_first_stage_less_layers=0", "SelectiveAC.Config()", "components=['model']",
                 "interval=111", "dataset_path='/fsx/c4'", "disable_cuda_graphs=True", "global_vocab_size=128256",
                 "from torchtitan.models.llama3 import model_registry"):
        assert line in text, line
    compile(text, "trainplan_job.py", "exec")  # valid Python


@pytest.mark.parametrize("text,says", [
    ("fp8_tensorwise ac=full mb=1 ga=1 dp=1x8(fsdp) stack=torchtitan", "precision fp8_tensorwise"),
    ("bf16 ac=full mb=1 ga=1 dp=1x8(zero1) stack=torchtitan", "sharding zero1"),
    ("fp8_rowwise ac=full mb=1 ga=1 dp=1x8(fsdp) fp8_allgather=true stack=torchtitan", "fp8_allgather"),
    ("bf16 ac=partial(2) mb=1 ga=1 dp=1x8(fsdp) stack=torchtitan", "ac partial"),
    ("bf16 ac=offload mb=1 ga=1 dp=1x8(fsdp) stack=torchtitan", "ac offload"),
    ("bf16 ac=full mb=1 ga=1 dp=1x4(fsdp) cp=2 stack=torchtitan cp_comm=p2p", "cp_comm=p2p"),
    ("bf16 ac=full mb=1 ga=1 dp=1x8(fsdp) optimizer_offload=true stack=torchtitan", "optimizer_offload"),
    ("bf16 ac=full mb=1 ga=1 dp=8x1(none) stack=torchtitan", "sharding none: torchtitan 0.3.0 always wraps"),
    ("bf16 ac=full mb=1 ga=4 dp=1x4(fsdp) pp=2 interleaved stack=torchtitan", "with vp=1"),
    ("bf16 ac=full mb=1 ga=1 dp=1x8(fsdp) stack=trainplan", "stack trainplan runs"),
    ("bf16 ac=full mb=1 ga=1 dp=1x8(fsdp) stack=megatron", "stack megatron runs"),
])
def test_what_torchtitan_cannot_run_as_costed_is_refused_naming_the_setting(text, says):
    with pytest.raises(TrainplanError) as e:
        tt.export(plan_of(text))
    assert says in str(e.value) and "\n" not in str(e.value)


def test_a_model_torchtitan_has_no_flavor_for_is_refused():
    with pytest.raises(TrainplanError, match="model mistral-7b: torchtitan 0.3.0 builds models by flavor"):
        tt.export(plan_of("bf16 ac=full mb=1 ga=1 dp=1x8(fsdp) stack=torchtitan", model="mistral-7b"))


@pytest.mark.parametrize("layers,pp,vp,uneven,less", [
    (32, 4, 1, Uneven(), (0, 0)), (30, 4, 1, Uneven(), (0, 0)), (32, 2, 4, Uneven(), (0, 0)),
    (126, 16, 8, Uneven(embedding=True, loss=True), (1, 1)), (30, 4, 2, Uneven(embedding=True, loss=True), (1, 1)),
])
def test_torchtitans_split_rule_reproduces_the_costed_split(layers, pp, vp, uneven, less):
    # torchtitan distributed/pipeline_parallel.py _generate_llm_fqn_per_model_part (0.3.0): the
    # loader test checks this rule against torchtitan's own function where it is installed
    want = [len(c) for c in pipeline_chunks(layers, pp, vp, uneven)]
    assert tt._tt_stage_sizes(pp * vp, layers, *less) == want
    assert tt._tt_stage_sizes(pp * vp, layers, 1, 1) != want or less == (1, 1)  # torchtitan's default differs


def test_checkpoint_interval_is_the_plans_and_steps_come_from_the_token_budget_when_unset():
    plan = plan_of("bf16 ac=full mb=1 ga=4 dp=1x8(fsdp) stack=torchtitan", steps=0, checkpoint_every=0)
    plan = type(plan)(job=Job(plan.job.model, plan.job.cluster, Workload(seq_len=8192, global_batch=32,
                                                                         tokens=10 * 32 * 8192 + 1)),
                      layout=plan.layout, train=plan.train)
    text = tt.export(plan)["trainplan_job.py"]
    assert "steps=11," in text and "interval=11," in text  # 0: only the last step's checkpoint
