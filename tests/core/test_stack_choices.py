"""What a stack can run (stacks.toml [NAME.choices]) is data with a source per entry, separate from
its preset: the preset's value is one of the choices, every value parses as the setting's own."""

import pytest

from trainplan.errors import TrainplanError
from trainplan.layout import Layout
from trainplan.stacks import BOOLEAN, CONDITIONS, _load_choices, check_value, stack, stacks


@pytest.mark.parametrize("name", list(stacks()))
def test_each_choice_has_a_source_and_holds_the_preset(name):
    s = stack(name)
    for key, c in s.choices.items():
        assert c.source.strip(), (name, key)
        assert getattr(s.execution, key) in c.values, (name, key)
        assert all(check_value(key, v, "test") == v for v in c.values)
        assert c.only_if is None or (key in BOOLEAN and c.only_if in CONDITIONS)


def test_megatron_can_overlap_what_its_argparse_defaults_leave_off():
    s = stack("megatron")
    for key in ("tp_comm_overlap", "grad_reduce_overlap", "param_gather_overlap"):
        assert not getattr(s.execution, key) and True in s.choices[key].values


def test_a_choice_true_only_where_the_framework_runs_it():
    tp = stack("megatron").choices["tp_comm_overlap"]
    assert tp.allows(Layout(tp=4), True) and not tp.allows(Layout(tp=1), True)
    assert not tp.allows(Layout(tp=4, sequence_parallel=False), True) and tp.allows(Layout(tp=1), False)
    gather = stack("megatron").choices["param_gather_overlap"]
    shard = Layout(dp_shard=8).with_stack("megatron", grad_reduce_overlap=True)
    assert gather.allows(shard, True)
    assert not gather.allows(shard.with_stack("megatron"), True)  # without --overlap-grad-reduce
    assert not gather.allows(Layout(dp_replicate=8, sharding="none").with_stack("megatron", grad_reduce_overlap=True),
                             True)


@pytest.mark.parametrize("raw, message", [
    ({"tp_overlap": {"values": [True], "source": "x"}}, "unknown key 'tp_overlap'"),
    ({"cp_comm": {"values": ["ring"], "source": "x"}}, "cp_comm must be p2p | a2a | allgather | a2a+p2p"),
    ({"cp_comm": {"values": ["p2p"]}}, "source"),
])
def test_bad_choices_are_one_line_errors(raw, message):
    with pytest.raises(TrainplanError) as e:
        _load_choices(raw, stack("megatron").execution.to_dict(), "stacks.toml [x].choices")
    assert message in str(e.value) and "\n" not in str(e.value)
