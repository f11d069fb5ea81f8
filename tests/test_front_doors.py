"""sweep() and taylor_test() refuse the inputs check() refuses, with the same errors.

A function that is not finite at the point, or not deterministic (a model left in
training mode, dropout on), gives a curve or a slope that means nothing: every front
door raises instead (``polygrad.backends.validate``).
"""

import numpy as np
import pytest

import polygrad as pg
from polygrad.errors import InputValueError, NondeterministicFunctionError

FRONT_DOORS = [pg.check, pg.sweep, pg.taylor_test]


def _log_sum(framework):
    """``sum(log(x))`` in the framework, and a point with a negative entry."""
    x = np.array([-1.0, 2.0])
    if framework == "torch":
        import torch

        return lambda v: torch.log(v).sum(), torch.tensor(x)
    if framework == "jax":
        import jax.numpy as jnp

        return lambda v: jnp.sum(jnp.log(v)), jnp.asarray(x)
    if framework == "tensorflow":
        import tensorflow as tf

        return lambda v: tf.reduce_sum(tf.math.log(v)), tf.constant(x)
    return lambda v: np.sum(np.log(v)), x


@pytest.mark.parametrize("door", FRONT_DOORS, ids=lambda d: d.__name__)
@pytest.mark.parametrize(
    "framework",
    [
        pytest.param(fw, marks=pytest.mark.polygrad_backends(fw))
        for fw in ("numpy", "torch", "jax", "tensorflow")
    ],
)
def test_a_function_not_finite_at_the_point_is_refused(door, framework):
    f, x = _log_sum(framework)
    extra = {"grad": lambda v: 1.0 / v} if framework == "numpy" else {}
    with np.errstate(invalid="ignore"), pytest.raises(InputValueError, match="not finite"):
        door(f, x, **extra)


@pytest.mark.parametrize("door", FRONT_DOORS, ids=lambda d: d.__name__)
def test_a_numpy_function_drawing_random_numbers_is_refused(door):
    rng = np.random.default_rng(0)

    def f(x):
        return np.sum(np.sin(x)) + 1e-3 * rng.standard_normal()

    with pytest.raises(NondeterministicFunctionError, match="not deterministic"):
        door(f, np.array([0.3, 0.7]), grad=np.cos)


@pytest.mark.polygrad_backends("torch")
@pytest.mark.parametrize("door", FRONT_DOORS, ids=lambda d: d.__name__)
def test_a_torch_model_in_training_mode_is_refused(door):
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Dropout(0.5),
                                torch.nn.Linear(16, 1))  # fmt: skip
    model.train()  # dropout on, as a training loop leaves it
    x = torch.randn(3, 4, dtype=torch.float64)
    with pytest.raises(NondeterministicFunctionError, match="deterministic function"):
        door(lambda v: model.double()(v).sum(), x)
    assert model.training  # the user's mode is left as it was


@pytest.mark.polygrad_backends("tensorflow")
@pytest.mark.parametrize("door", FRONT_DOORS, ids=lambda d: d.__name__)
def test_a_keras_dropout_called_in_training_is_refused(door):
    import tensorflow as tf

    tf.keras.utils.set_random_seed(0)
    layer = tf.keras.layers.Dropout(0.5)
    x = tf.constant(np.linspace(0.1, 1.0, 8))
    with pytest.raises(NondeterministicFunctionError, match="deterministic function"):
        door(lambda v: tf.reduce_sum(layer(v, training=True) ** 2), x)


def _numpy_target(f, x):
    from polygrad.backends import get_backend
    from polygrad.backends.base import Supplied

    return get_backend("numpy").make_target(f, (x,), (0,), Supplied(grad=np.cos), 64)


def test_a_path_difference_of_round_off_is_noted_and_nondeterminism_is_refused():
    """The batched evaluator and the call that gave f's value at the point are two paths
    (a compiled graph folds constants and reassociates): a difference between them of
    round-off of intermediates larger than f is a note, not nondeterminism; beyond
    sqrt(eps) of f it is refused, and so is a batched evaluator that changes from call
    to call even where its rows agree."""
    from polygrad.backends.validate import check_deterministic

    x = np.array([0.3, 0.7])
    t = _numpy_target(lambda v: np.sum(np.sin(v)), x)
    assert check_deterministic(t) == []
    t.y0 = t.y0 + 1e-12  # (v + 1024) - 1024 evaluated two ways differs by ~1e-13
    notes = check_deterministic(t)
    assert len(notes) == 1 and "between a plain call and a batched one" in notes[0], notes
    t.y0 = t.y0 + 1e-6
    with pytest.raises(NondeterministicFunctionError, match="depends on how it is called"):
        check_deterministic(t)
    t = _numpy_target(lambda v: np.sum(np.sin(v)), x)
    calls = iter(range(1, 100))
    evaluate = t.evaluate
    t.evaluate = lambda X: evaluate(X) + 1e-6 * next(calls)  # rows agree, calls do not
    with pytest.raises(NondeterministicFunctionError, match="two evaluations"):
        check_deterministic(t)


@pytest.mark.polygrad_backends("tensorflow")
def test_a_tensorflow_function_with_cancellation_checked_twice_passes():
    """``(x + 1024) - 1024`` in TensorFlow: once its graph is built, TensorFlow folds the
    constants, so the batched value at the point differs from the eager one by the
    rounding at 1024. A check after a check on float64 differences was refused as not
    deterministic."""
    import tensorflow as tf

    x = tf.constant([1e-3, 2e-3, 0.5], tf.float64)

    def f(v):
        return tf.reduce_sum((v + 1024.0) - 1024.0)

    for reference in ("float64", "auto", "auto"):
        report = pg.check(f, x, cache=False, reference=reference)
        assert report.verdict is pg.Verdict.PASS and report.ok, report
