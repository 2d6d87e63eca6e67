"""trainplan.memo: the cost model's memo keys objects by identity and shapes by value."""

from dataclasses import dataclass

from trainplan.memo import memoised


@dataclass(frozen=True)
class Same:
    """Equal by value, like a Profile with other machine tables (compare=False fields)."""

    x: int


def test_objects_are_keyed_by_identity_not_equality():
    calls = []

    @memoised()
    def f(obj, *, k):
        calls.append((id(obj), k))
        return (id(obj), k)

    a, b = Same(1), Same(1)
    assert a == b
    assert f(a, k=1) == (id(a), 1)
    assert f(b, k=1) == (id(b), 1)  # equal, not the same: its own entry
    assert f(a, k=1) == (id(a), 1)
    assert len(calls) == 2


def test_shapes_are_keyed_by_name_and_value():
    @memoised()
    def f(obj, *, a, b):
        return a - b

    o = object()
    assert f(o, a=1, b=2) == -1
    assert f(o, b=1, a=2) == 1  # the same values under other names: another shape
    assert f(o, a=2, b=1) == 1


def test_the_cache_is_bounded_and_holds_its_objects():
    @memoised(maxsize=2)
    def f(obj, *, k):
        return k

    for k in range(5):
        f(object(), k=k)  # each object lives as long as its entry: no id is reused meanwhile
        assert f.cache_len() <= 2
    f.cache_clear()
    assert f.cache_len() == 0
