"""Layout names: every scalar's name, in one pass, equals its name by index."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from polygrad.backends.base import Layout

shapes = st.lists(st.integers(1, 3), min_size=0, max_size=3).map(tuple)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(shapes, st.booleans()), min_size=1, max_size=4))
def test_names_in_one_pass_equal_names_by_index(leaves):
    names = [f"a{i}" for i in range(len(leaves))]
    # a (re, im) pair has a last axis of 2
    shaped = [(*shape, 2) if pair else shape for shape, pair in leaves]
    layout = Layout.from_shapes(names, shaped).with_pairs([pair for _, pair in leaves])
    size = sum(leaf.size for leaf in layout.leaves)
    assert layout.names() == [layout.name_of(i) for i in range(size)]


def test_names_of_a_matrix_and_a_complex_pair():
    layout = Layout.from_shapes(["w", "b", "z"], [(2, 2), (), (1, 2)]).with_pairs(
        [False, False, True]
    )
    assert layout.names() == ["w[0, 0]", "w[0, 1]", "w[1, 0]", "w[1, 1]", "b", "Re z[0]", "Im z[0]"]
