"""Operations at their kinks, seen by the interpreters of captured programs
(:mod:`polygrad.mpexec.kinks`), and the moves of exact zeros (:mod:`polygrad.dither`)."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest

from polygrad.dither import ulp_of_move
from polygrad.mpexec.kinks import (
    at_integer,
    at_values,
    at_zero,
    note_operation,
    recording_kinks,
    repeated,
    suspended,
    tie,
)


def _mp(values):
    return np.array([mpmath.mpf(v) for v in values], dtype=object)


def test_the_tests_on_exact_values():
    x = _mp([0.25, -1.5, 2.0])
    assert tie(x, _mp([0.0, -1.5, 1.0])) and not tie(x, 0.5)
    assert not at_zero(x) and at_zero(_mp([1.0, 0.0]))
    assert at_integer(x) and not at_integer(_mp([0.25, 1.5]))
    assert at_integer(x, 0.5) and not at_integer(_mp([0.25, 2.0]), 0.5)  # -1.5 is k + 1/2
    assert at_values(x, None, 2.0) and not at_values(x, -1.0, 1.0)
    assert repeated(_mp([1.0, 3.0, 1.0])) and not repeated(x)
    # a value one ulp from the kink is not at it
    assert not at_zero(_mp([np.nextafter(0.0, 1.0)])) and not at_integer(
        _mp([np.nextafter(2.0, 3.0)])
    )


def test_operations_are_noted_only_while_recording():
    calls = []

    def test():
        calls.append(1)
        return True

    note_operation("max", test)
    assert calls == []
    with recording_kinks() as record:
        note_operation("exp", None)
        assert record.ran and record.found == []
        note_operation("max", test)
    assert record.found == ["max"] and calls == [1]
    with recording_kinks() as record:
        with suspended():  # inside a custom rule's region
            note_operation("max", test)
    assert record.found == [] and not record.ran


def test_zeros_and_subnormals_move_by_the_smallest_normal_number():
    a = np.array([0.0, 5e-324, 1.0, -3.0])
    np.testing.assert_array_equal(ulp_of_move(a), [2.0**-1022, 2.0**-1022, 2.0**-52, 2.0**-51])
    b = np.array([0.0, 1.0], np.float32)
    np.testing.assert_array_equal(ulp_of_move(b), [2.0**-126, 2.0**-23])


@pytest.mark.polygrad_backends("jax")
def test_every_kinked_jax_primitive_is_covered_and_ties_of_floats_are_seen():
    import jax
    import jax.numpy as jnp

    from polygrad.backends.mpmath import make_context
    from polygrad.mpexec.jaxpr import KINKED_PRIMITIVES, evaluate_jaxpr_mp, supported_primitives

    assert KINKED_PRIMITIVES <= supported_primitives()

    def f(x):  # an integer comparison (index arithmetic) is no kink
        mask = jnp.arange(3) == 1
        return jnp.where(mask, jnp.maximum(x, 1.0), jnp.exp(x))

    closed = jax.make_jaxpr(f)(jnp.zeros(3))
    for x, found in (([0.5, 2.0, 3.0], []), ([0.5, 1.0, 3.0], ["max"])):
        with recording_kinks() as record:
            evaluate_jaxpr_mp(closed, [_mp(x)], make_context(30))
        assert record.ran and record.found == found


@pytest.mark.polygrad_backends("torch")
def test_every_kinked_aten_operator_is_covered():
    from polygrad.mpexec.torch_env import RULES
    from polygrad.mpexec.torch_graph import covered_operators  # noqa: F401 - fills RULES
    from polygrad.mpexec.torch_kinks import KINKED_OPERATORS, kink_test

    bases = {name.split(".")[1] for name in RULES}
    assert set(KINKED_OPERATORS) <= bases
    at = {"self": _mp([0.0, 1.0]), "other": 1.0}
    assert kink_test("aten.relu_.default", at)() and kink_test("aten.maximum.Scalar", at)()
    assert kink_test("aten.exp.default", at) is None
    ints = {"self": np.array([0, 1]), "other": 1}  # exact integers: no derivative
    assert not kink_test("aten.eq.Scalar", ints)()


@pytest.mark.polygrad_backends("tensorflow")
def test_every_kinked_tensorflow_op_is_covered():
    from polygrad.mpexec.tf_graph import KINKED_OPS, supported_ops

    assert KINKED_OPS <= supported_ops()
