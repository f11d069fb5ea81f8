"""The guard against a gradient that cannot flow says whose it is, by measurement.

Autodiff connecting no output to any input while the values change under the
guard's 1% move is the user's error only when a computation outside autodiff is
on the way (``.detach()``, ``.numpy()``, a stop gradient). A piecewise-constant
function whose 1% move crosses a step (an entry within 1% of an integer) has a
right zero gradient: PASS. A framework operation whose registered gradient is
None for one of its arguments (TensorFlow's ``Zeta`` with respect to ``x``) is
the framework's missing derivative: MISMATCH, the operation and argument named.
"""

from __future__ import annotations

import mpmath
import numpy as np
import pytest

import polygrad as pg
from polygrad import Verdict
from polygrad.backends.base import change_under_a_move
from polygrad.errors import InputTypeError

AUTODIFF = pytest.mark.polygrad_backends("torch", "jax", "tensorflow")

#: every entry lies within 1% (of 1 + |x|) of a step of floor and ceil (the integers),
#: round (the half-integers) and sign (0), on both sides of it, so that the guard's 1%
#: move, whatever its signs, crosses a step of each (asserted in each test)
NEAR_STEPS = np.array(
    [
        [0.996, 1.004, -0.996, -1.004],
        [0.496, 0.504, -0.004, 0.004],
        [1.496, 1.504, -0.008, 0.008],
        [-0.006, 0.006, -0.002, 0.002],
    ],
    np.float32,
)
NUMPY_OPS = {
    "floor": np.floor,
    "ceil": np.ceil,
    "sign": np.sign,
    "round": np.round,
    "step": lambda t: (t > 1).astype(t.dtype),
}


def _crosses_a_step(name: str, x: np.ndarray) -> bool:
    """Whether the guard's 1% move changes ``sum(op(x))`` (computed in NumPy)."""

    def evaluate(rows):
        return np.array([[NUMPY_OPS[name](r.astype(x.dtype)).sum()] for r in rows], float)

    x0 = x.astype(float).ravel()
    return change_under_a_move(evaluate, x0, evaluate(x0[None])[0], 1.2e-7) > 0


def _op(backend, name):
    """The framework's elementwise ``name`` (``step``: 1 where ``x > 1``, as a float)."""
    if backend.name == "tensorflow":
        import tensorflow as tf

        ops = {"floor": tf.math.floor, "ceil": tf.math.ceil, "sign": tf.math.sign}
        ops |= {"round": tf.math.round, "step": lambda t: tf.cast(t > 1, t.dtype)}
        return ops[name]
    if backend.name == "jax":
        import jax

        ops = {"floor": jax.lax.floor, "ceil": jax.lax.ceil, "sign": jax.lax.sign}
        ops |= {"round": jax.numpy.round, "step": lambda t: (t > 1).astype(t.dtype)}
        return ops[name]
    import torch

    ops = {"floor": torch.floor, "ceil": torch.ceil, "sign": torch.sign}
    ops |= {"round": torch.round, "step": lambda t: (t > 1).to(t.dtype)}
    return ops[name]


def _stop(backend):
    """The framework's own way of taking a value off the gradient path."""
    if backend.name == "tensorflow":
        import tensorflow as tf

        return tf.stop_gradient
    if backend.name == "jax":
        import jax

        return jax.lax.stop_gradient
    return lambda t: t.detach()


@AUTODIFF
@pytest.mark.parametrize("name", ["floor", "ceil", "sign", "round", "step"])
def test_piecewise_constant_near_a_step_passes(backend, name):
    """The 1% move crosses a step, yet f is constant on both sides of the point: the
    derivative is 0 at every entry, and autodiff's zero is right."""
    assert _crosses_a_step(name, NEAR_STEPS)
    op, xp = _op(backend, name), backend.namespace
    x = backend.asarray(NEAR_STEPS)
    report = backend.check(lambda t: xp.sum(op(t)), x, cache=False)
    assert report.verdict is Verdict.PASS, str(report)
    assert report.ok
    for entry in report.to_dict()["worst_entries"]:
        assert entry["reference"] == 0.0 and entry["autodiff"] == 0.0, entry


@AUTODIFF
def test_guard_notes_why_a_zero_gradient_is_judged(backend):
    """A comparison cast to float is connected to no input in any framework: the
    guard runs, measures the step at 0.995, and says so in the report."""
    assert _crosses_a_step("step", NEAR_STEPS)
    step, xp = _op(backend, "step"), backend.namespace
    report = backend.check(lambda t: xp.sum(step(t)), backend.asarray(NEAR_STEPS), cache=False)
    assert report.verdict is Verdict.PASS and report.ok, str(report)
    assert any("piecewise-constant" in note for note in report.notes), report.notes


@AUTODIFF
def test_on_a_step_is_a_jump_not_a_user_error(backend):
    """With an entry exactly on a step the values jump under every move: the
    discontinuity is judged (NONSMOOTH at that entry, PASS elsewhere)."""
    step, xp = _op(backend, "step"), backend.namespace
    x = NEAR_STEPS.copy()
    x[0, 0] = 1.0  # on the step of x > 1
    report = backend.check(lambda t: xp.sum(step(t)), backend.asarray(x), cache=False)
    assert report.verdict is Verdict.NONSMOOTH, str(report)
    assert report.counts() == {"NONSMOOTH": 1, "PASS": 15}, report.counts()


@AUTODIFF
def test_stop_gradient_is_the_users_error(backend):
    """``.detach()`` / ``stop_gradient`` on the way keeps the clear error."""
    stop, xp = _stop(backend), backend.namespace
    x = backend.asarray(NEAR_STEPS)
    with pytest.raises(InputTypeError, match="gradient cannot flow"):
        backend.check(lambda t: xp.sum(stop(t) ** 2), x, cache=False)


@AUTODIFF
def test_stop_gradient_beside_a_step_is_the_users_error(backend):
    """A step crossed by the 1% move does not hide a smooth value cut off the gradient
    path: the cut-off part keeps changing under the smaller moves."""
    stop, step, xp = _stop(backend), _op(backend, "step"), backend.namespace
    x = backend.asarray(NEAR_STEPS)
    with pytest.raises(InputTypeError, match="gradient cannot flow"):
        backend.check(lambda t: xp.sum(step(t) + 1e-3 * stop(t) ** 2), x, cache=False)


@pytest.mark.polygrad_backends("torch")
@pytest.mark.parametrize("way", ["numpy", "float"])
def test_torch_numpy_or_python_float_is_the_users_error(way):
    import torch

    def f(t):
        if way == "numpy":
            return torch.as_tensor(t.detach().numpy() ** 2).sum()
        return torch.tensor(float((t**2).sum()))

    with pytest.raises(InputTypeError, match=r"gradient cannot flow.*NumPy"):
        pg.check(f, torch.tensor(NEAR_STEPS), cache=False)


# --- TensorFlow: an operation whose registered gradient is None for one argument ------------

S = np.array([[2.5, 3.0], [1.7, 4.2]])


def _dzeta_ds(s: float, q: float) -> float:
    mpmath.mp.dps = 30
    return float(mpmath.diff(lambda v: mpmath.zeta(v, q), s))


@pytest.mark.polygrad_backends("tensorflow")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_tf_zeta_wrt_x_is_a_mismatch_naming_the_op(dtype):
    """``tf.math.zeta(x, q)`` registers no derivative with respect to ``x``: autodiff's 0
    against ``d zeta / d x`` (mpmath), the op and the argument named."""
    import tensorflow as tf

    q = tf.constant(np.full(S.shape, 2.0), dtype)
    report = pg.check(lambda x: tf.reduce_sum(tf.math.zeta(x, q)), tf.constant(S, dtype))
    assert report.verdict is Verdict.MISMATCH and not report.ok, str(report)
    assert any("op Zeta" in n and "argument x " in n for n in report.notes), report.notes
    for entry in report.to_dict()["worst_entries"]:
        i, j = (int(k) for k in entry["name"][2:-1].split(","))
        assert entry["autodiff"] == 0.0
        assert entry["reference"] == pytest.approx(_dzeta_ds(S[i, j], 2.0), rel=1e-6), entry


def _dbetainc(argument: str, s: float) -> float:
    """d I_0.4(a, b) / d a at (s, 2), or / d b at (2, s), regularized (mpmath)."""
    mpmath.mp.dps = 30

    def f(v):
        a, b = (v, 2) if argument == "a" else (2, v)
        return mpmath.betainc(a, b, 0, 0.4, regularized=True)

    return float(mpmath.diff(f, s))


@pytest.mark.polygrad_backends("tensorflow")
@pytest.mark.parametrize("argument", ["a", "b"])
def test_tf_betainc_wrt_a_and_b_is_a_mismatch_naming_the_op(argument):
    """``tf.math.betainc(a, b, x)`` has a gradient for ``x`` only."""
    import tensorflow as tf

    const = tf.constant(np.full(S.shape, 2.0))
    x = tf.constant(np.full(S.shape, 0.4))

    def f(v):
        a, b = (v, const) if argument == "a" else (const, v)
        return tf.reduce_sum(tf.math.betainc(a, b, x))

    report = pg.check(f, tf.constant(S))
    assert report.verdict is Verdict.MISMATCH and not report.ok, str(report)
    named = f"op Betainc returns None for its argument {argument} "
    assert any(named in n for n in report.notes), report.notes
    for entry in report.to_dict()["worst_entries"]:
        i, j = (int(k) for k in entry["name"][2:-1].split(","))
        assert entry["autodiff"] == 0.0
        want = _dbetainc(argument, S[i, j])
        assert entry["reference"] == pytest.approx(want, rel=1e-6), entry


@pytest.mark.polygrad_backends("tensorflow")
def test_tf_stop_gradient_beside_zeta_is_the_users_error():
    """A cut the user made is named even where a missing derivative is on another path."""
    import tensorflow as tf

    q = tf.constant(np.full(S.shape, 2.0))

    def f(x):
        return tf.reduce_sum(tf.math.zeta(x, q) + tf.stop_gradient(x) ** 2)

    with pytest.raises(InputTypeError, match="gradient cannot flow.*tf.stop_gradient"):
        pg.check(f, tf.constant(S))


@pytest.mark.polygrad_backends("tensorflow")
def test_tf_numpy_round_trip_is_the_users_error():
    import tensorflow as tf

    def f(x):
        return tf.reduce_sum(tf.constant(x.numpy() ** 2))

    with pytest.raises(InputTypeError, match=r"gradient cannot flow.*\.numpy\(\)"):
        pg.check(f, tf.constant(S))


@pytest.mark.polygrad_backends("tensorflow")
def test_tf_python_float_is_the_users_error():
    import tensorflow as tf

    def f(x):
        return tf.constant(float(tf.reduce_sum(x**2)), tf.float64)

    with pytest.raises(InputTypeError, match="gradient cannot flow.*outside TensorFlow"):
        pg.check(f, tf.constant(S))


#: entries far from 0, none within 0.2 of a step: the guard's 1% move crosses hundreds
FAR = np.array([10000.3, -25000.7, 4096.6, 123456.2], np.float32)


@AUTODIFF
@pytest.mark.parametrize("name", ["floor", "ceil", "round"])
def test_piecewise_constant_far_from_0_passes(backend, name):
    """At 1e4 to 1e5 the guard's smaller moves must reach a few ulps of x in float32
    before f stops changing: the zero gradient is judged, and is right (JAX raised "the
    gradient cannot flow" on round of these entries)."""
    op, xp = _op(backend, name), backend.namespace
    report = backend.check(lambda t: xp.sum(op(t)), backend.asarray(FAR), cache=False)
    assert report.verdict is Verdict.PASS and report.ok, str(report)
    for entry in report.to_dict()["worst_entries"]:
        assert entry["reference"] == 0.0 and entry["autodiff"] == 0.0, entry
