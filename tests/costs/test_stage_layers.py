"""A pipeline stage costs the sum of its own layers when the layers differ (costs/steptime.py
slowest_stage, costs/flops.py stage_flops): dense layers, chunked or windowed attention cost less
than MoE or global layers, and the slowest stage sets the pace."""

import pytest

from trainplan.costs.flops import model_flops, stage_flops
from trainplan.costs.steptime import slowest_stage, step_time
from trainplan.hardware import Cluster, find_node
from trainplan.job import Job, Workload
from trainplan.layout import Layout
from trainplan.models import resolve
from trainplan.models.stages import stage_layers
from trainplan.profile import Profile


def test_stage_flops_add_up_to_the_model():
    for name in ("deepseek-v3", "gpt-oss-120b", "llama-4-maverick", "glm-4.5"):
        m = resolve(name)
        whole = model_flops(m)
        stages = [stage_flops(m, held) for held in stage_layers(m.num_layers, 4)]
        assert sum(s.linear_per_token() for s in stages) == whole.linear_per_token()
        assert sum(s.attention_per_token(8192) for s in stages) == pytest.approx(whole.attention_per_token(8192))


def test_the_dense_first_layers_make_deepseeks_first_stage_lighter():
    m = resolve("deepseek-v3")
    first, second = (stage_flops(m, held) for held in stage_layers(m.num_layers, 4)[:2])
    assert len(stage_layers(m.num_layers, 4)[0]) == len(stage_layers(m.num_layers, 4)[1]) + 1  # 16, 15
    per_layer = [s.linear_per_token() / s.num_layers for s in (first, second)]
    assert per_layer[0] < per_layer[1]  # 3 dense of 16 layers vs 15 MoE


def test_the_slowest_stage_is_the_one_with_more_global_attention():
    # gpt-oss alternates sliding (even layers) and full attention: 36 layers on 4 stages of 9; stages
    # 1 and 3 start on an odd layer and hold 5 full-attention layers, stages 0 and 2 hold 4
    m = resolve("gpt-oss-120b")
    held = stage_layers(m.num_layers, 4)
    full = [sum(k.count for k in stage_flops(m, h).layers if k.window is None) for h in held]
    assert full == [4, 5, 4, 5]
    job = Job(m, Cluster(find_node("ml.p6-b200.48xlarge"), 4), Workload(32768, 64))
    L = Layout(dp_shard=4, tp=2, pp=4, micro_batch=1, grad_accum=16, ep=8)
    assert stage_flops(m, held[1]).attention_per_token(32768) > stage_flops(m, held[0]).attention_per_token(32768)
    # the step prices the slowest stage: one of 9 layers (the last also holds the head)
    assert slowest_stage(job, L, Profile()).layers == 9 and step_time(job, L, Profile()).time.total > 0



def test_the_expert_all_to_all_runs_on_the_stages_moe_layers_only():
    # Llama 4 Maverick: MoE on every other layer, 12 layers per stage on 4 stages: 6 MoE layers each;
    # DeepSeek-V3's last stage (15 layers, all MoE) pays for 15, not for its 58/61 share
    job = Job(resolve("llama-4-maverick"), Cluster(find_node("ml.p6-b200.48xlarge"), 4), Workload(8192, 64))
    L = Layout(dp_shard=2, tp=2, pp=4, micro_batch=1, grad_accum=32, ep=2)
    assert slowest_stage(job, L, Profile()).moe_layers == 6
    job = Job(resolve("deepseek-v3"), Cluster(find_node("ml.p6-b200.48xlarge"), 4), Workload(4096, 64))
    L = Layout(dp_shard=4, tp=2, pp=4, micro_batch=1, grad_accum=16, ep=8, ac="full")
    st = slowest_stage(job, L, Profile())
    held = stage_layers(61, 4)
    assert st.moe_layers in {sum(i >= 3 for i in h) for h in held} and st.moe_layers == int(st.moe_layers)
