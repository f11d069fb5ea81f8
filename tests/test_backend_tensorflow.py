"""Tests of the TensorFlow / Keras backend: the Target, then polygrad.check end to end."""

from __future__ import annotations

import os
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_probability as tfp  # noqa: E402
from conftest import keras_case2_cnn, keras_digit  # noqa: E402

import polygrad as pg  # noqa: E402
from polygrad.backends import select_backend  # noqa: E402
from polygrad.backends.base import Supplied  # noqa: E402
from polygrad.backends.tensorflow import TensorflowBackend, float64_model_copy  # noqa: E402
from polygrad.errors import (  # noqa: E402
    InputMutationError,
    InputTypeError,
    InputValueError,
    NondeterministicFunctionError,
    ShapeMismatchError,
)

BE = TensorflowBackend()
OK_VERDICTS = (pg.Verdict.PASS, pg.Verdict.NONSMOOTH)


def target(f, *args, argnums=(0,), batch_size=64, wrt="inputs"):
    return BE.make_target(f, args, argnums, Supplied(), batch_size, wrt=wrt)


def quadratic(x, w):
    return tf.reduce_sum(w * x**2)


# --- the backend object ----------------------------------------------------------------------


def test_backend_is_chosen_from_tf_arrays_and_converts():
    x = tf.constant([1.0, 2.0])
    v = tf.Variable([3.0])
    assert TensorflowBackend.owns(x) and TensorflowBackend.owns(v)
    assert not TensorflowBackend.owns(np.ones(2))
    assert select_backend((x,)).name == "tensorflow"
    np.testing.assert_array_equal(BE.to_numpy(v), [3.0])
    assert BE.version() == tf.__version__
    assert BE.supports_autodiff and BE.supports_float64 and BE.supports_vmap


# --- Target: values and derivatives ------------------------------------------------------------


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
def test_target_evaluate_vjp_jvp_match_hand_computed(dtype):
    x = tf.constant([1.0, 2.0, 3.0], dtype)
    w = tf.constant([0.5, 1.5, 1.0], dtype)
    t = target(quadratic, x, w)
    assert t.working_dtype == dtype.name
    assert t.eps == np.finfo(dtype.as_numpy_dtype).eps
    np.testing.assert_array_equal(t.x0, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(t.y0, [15.5])
    X = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 1.0], [0.1, 0.0, 0.0]])
    expect = (X**2) @ np.array([0.5, 1.5, 1.0])
    np.testing.assert_allclose(t.evaluate(X)[:, 0], expect, rtol=1e-6)
    np.testing.assert_allclose(t.evaluate64(X)[:, 0], expect, rtol=1e-15)
    grad = np.array([1.0, 6.0, 6.0])
    np.testing.assert_array_equal(t.vjp(np.array([[1.0], [-2.0]])), [grad, -2 * grad])
    np.testing.assert_array_equal(t.vjp64(np.array([[0.5]])), [0.5 * grad])
    np.testing.assert_array_equal(t.jvp(np.eye(3)), grad[:, None])
    np.testing.assert_array_equal(t.jvp64(np.eye(3)), grad[:, None])
    assert [leaf.name for leaf in t.input_layout.leaves] == ["x"]
    assert t.mp_mode() and t.mp_unavailable_reason is None  # the captured graph on mpmath
    assert t.evaluate_mp is not None
    y = t.evaluate_mp(t.x0, np.array([0.0, 0.0, 0.5]), 50)
    assert y.shape == (1,) and y[0] == 0.5 * 1 + 1.5 * 4 + 1.0 * 3.5**2


def test_float32_rounding_of_rows_and_float64_promotion_of_other_arguments():
    w = tf.constant([3.0], tf.float32)
    t = target(lambda x, w: tf.reduce_sum(w * x), tf.constant([1.0]), w)
    X = np.array([[0.1]])
    assert t.evaluate(X)[0, 0] == float(np.float32(3.0) * np.float32(0.1))
    assert t.evaluate64(X)[0, 0] == 3.0 * 0.1  # w promoted, x not rounded
    assert t.notes == []


def test_vector_output_batched_equals_unbatched_and_pytree_inputs():
    def f(p):
        return {"a": tf.sin(p["u"]) * p["v"][0], "b": tf.reduce_sum(p["u"] ** 3)}

    p = {"u": tf.constant([[0.3, -1.2], [2.0, 0.7]]), "v": tf.constant([1.5])}
    t = target(f, p, batch_size=3)
    assert [leaf.name for leaf in t.input_layout.leaves] == ["p['u']", "p['v']"]
    assert [leaf.name for leaf in t.output_layout.leaves] == ["f['a']", "f['b']"]
    assert (t.n, t.m) == (5, 5)
    rng = np.random.default_rng(1)
    X = t.x0 + 0.1 * rng.standard_normal((7, 5))
    one_by_one = np.stack([t.evaluate(row[None])[0] for row in X])
    np.testing.assert_allclose(t.evaluate(X), one_by_one, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(t.evaluate64(X), one_by_one, rtol=1e-6, atol=1e-6)
    # Jacobian from reverse and forward mode agree with each other and with the hand-made one.
    u, v = X[0, :4].reshape(2, 2), X[0, 4]
    J = t.vjp64(np.eye(5))
    assert J.shape == (5, 5)
    t0 = target(f, {"u": tf.constant(u, tf.float64), "v": tf.constant([v], tf.float64)})
    J0 = t0.vjp(np.eye(5))
    np.testing.assert_allclose(t0.jvp(np.eye(5)).T, J0, rtol=1e-14)
    np.testing.assert_allclose(J0[:4, :4], np.diag(np.cos(u).ravel() * v), rtol=1e-14)
    np.testing.assert_allclose(J0[:4, 4], np.sin(u).ravel(), rtol=1e-14)
    np.testing.assert_allclose(J0[4, :4], 3 * u.ravel() ** 2, rtol=1e-14)


def test_python_control_flow_falls_back_to_single_calls():
    def f(x):
        if float(tf.reduce_sum(x)) > 0:  # needs a concrete value: no tf.function, no pfor
            return tf.reduce_sum(x**2)
        return tf.reduce_sum(-x)

    t = target(f, tf.constant([1.0, 2.0]))
    np.testing.assert_allclose(t.evaluate(np.array([[1.0, 1.0], [-1.0, -1.0]]))[:, 0], [2.0, 2.0])
    np.testing.assert_allclose(t.vjp(np.array([[1.0]])), [[2.0, 4.0]])


def test_tensor_if_in_forward_mode_falls_back_quietly_with_a_note(capfd):
    """`if` on a tensor becomes tf.cond under AutoGraph, which pfor cannot vectorize in
    forward mode: pfor logs the whole graph at ERROR level before raising. The check
    still answers, says why it is slow, and prints no such log."""

    def f(x):
        if tf.reduce_sum(x) > 0:
            return tf.reduce_sum(tf.sin(x) * x)
        return tf.reduce_sum(tf.cos(x))

    x = tf.constant(np.linspace(0.1, 1.0, 20), dtype=tf.float32)
    report = pg.check(f, x, mode="fwd")
    assert report.verdict == pg.Verdict.PASS
    note = [n for n in report.details["notes"] if "cannot vectorize the forward-mode rule" in n]
    assert len(note) == 1 and "Python control flow on tensor values" in note[0]
    assert "in user code" not in note[0]
    err = capfd.readouterr().err
    assert "Got error while pfor was converting" not in err and "attr {" not in err


def test_closure_over_float32_tensor_is_captured_and_promoted():
    w = tf.constant([0.5, 1.5], tf.float32)
    t = target(lambda x: tf.reduce_sum(w * x), tf.constant([1.0, 2.0]))
    assert t.notes == []
    X = np.array([[0.1, 0.2]])
    assert t.evaluate64(X)[0, 0] == 0.5 * 0.1 + 1.5 * 0.2  # x not rounded to float32
    np.testing.assert_array_equal(t.vjp64(np.array([[1.0]])), [[0.5, 1.5]])
    np.testing.assert_array_equal(t.jvp64(np.eye(2)), [[0.5], [1.5]])


def test_closure_that_runs_python_has_no_float64_evaluation_and_says_why():
    w = tf.constant([0.5, 1.5], tf.float32)
    t = target(
        lambda x: tf.reduce_sum(w * x * tf.py_function(lambda: 1.0, [], tf.float32)),
        tf.constant([1.0, 2.0]),
    )
    assert t.evaluate64 is None and t.vjp64 is None and t.jvp64 is None
    assert "op EagerPyFunc (tf.py_function)" in t.notes[0] and "working dtype" in t.notes[0]
    assert t.vjp is not None


# --- Target: input validation and side effects --------------------------------------------------


def test_bad_inputs_raise_polygrad_errors():
    with pytest.raises(InputTypeError, match="integer"):
        target(lambda x: tf.reduce_sum(x), tf.constant([1, 2]))
    with pytest.raises(InputTypeError, match="bool"):
        target(lambda x: tf.reduce_sum(tf.cast(x, tf.float32)), tf.constant([True]))
    with pytest.raises(InputValueError, match="NaN"):
        target(lambda x: tf.reduce_sum(x), tf.constant([1.0, np.nan]))


def test_variable_input_mutated_in_place_raises_and_users_variable_is_untouched():
    v = tf.Variable([1.0, 2.0])

    def f(x):
        x.assign_add([1.0, 0.0])
        return tf.reduce_sum(x)

    with pytest.raises(InputMutationError, match="in place"):
        target(f, v)
    np.testing.assert_array_equal(v.numpy(), [1.0, 2.0])
    t = target(lambda x: tf.reduce_sum(x * x), v)  # a read-only function of a Variable is fine
    np.testing.assert_array_equal(t.vjp(np.array([[1.0]])), [[2.0, 4.0]])


def test_random_function_is_nondeterministic():
    with pytest.raises(NondeterministicFunctionError):
        target(lambda x: tf.reduce_sum(x + tf.random.normal([2])), tf.constant([1.0, 2.0]))


# --- Keras models ------------------------------------------------------------------------------


def small_model(seed=0):
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(8, activation="tanh"),
            keras.layers.Dropout(0.5),
            keras.layers.Dense(2),
        ]
    )


def test_float64_model_copy_leaves_the_users_model_unchanged():
    model = small_model()
    before = [w.numpy().copy() for w in model.weights]
    copy = float64_model_copy(model)
    assert copy is not model
    assert all(w.dtype == "float64" for w in copy.weights)
    assert model.dtype_policy.name == "float32"
    assert all(w.dtype == "float32" for w in model.weights)
    for w, b, c in zip(model.weights, before, copy.weights, strict=True):
        np.testing.assert_array_equal(w.numpy(), b)
        np.testing.assert_array_equal(c.numpy(), b.astype(np.float64))
    x = np.random.default_rng(0).standard_normal((5, 4))
    np.testing.assert_allclose(copy(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-6)
    assert copy(x).dtype == "float64"


def test_a_keras_model_passed_as_the_checked_argument_is_named_as_a_model():
    """f(model, x) with the default argnums checks the model: the error says it is a model
    and how to check its parameters or the other argument (not "dtype object")."""
    model, x = small_model(), tf.constant(np.ones((2, 4)), tf.float32)
    with pytest.raises(InputTypeError, match=r"Sequential \(a model\).*wrt='parameters'"):
        pg.check(lambda model, x: tf.reduce_sum(model(x)), model, x)
    report = pg.check(lambda model, x: tf.reduce_sum(model(x)), model, x, argnums=1)
    assert report.ok, str(report)


def test_float64_model_copy_of_a_model_without_config_is_a_type_error():
    class NoConfig(keras.Model):
        def get_config(self):
            raise NotImplementedError("no config")

        def call(self, x):
            return x * 2.0

    with pytest.raises(TypeError, match="could not be rebuilt in float64"):
        float64_model_copy(NoConfig())


@pytest.mark.parametrize("form", ["model_as_function", "model_as_argument"])
def test_keras_model_target_is_promoted_to_float64(form):
    model = small_model()
    x = tf.constant(np.random.default_rng(0).standard_normal((1, 4)), tf.float32)
    before = [w.numpy().copy() for w in model.weights]
    if form == "model_as_function":
        t = target(model, x)
    else:
        t = target(lambda m, x: tf.reduce_sum(m(x) ** 2), model, x, argnums=(1,))
    assert t.working_dtype == "float32" and t.evaluate64 is not None and t.notes == []
    X = t.x0 + 1e-3 * np.random.default_rng(1).standard_normal((6, 4))
    y32, y64 = t.evaluate(X), t.evaluate64(X)
    np.testing.assert_allclose(y32, y64, rtol=1e-5, atol=1e-6)
    assert np.max(np.abs(y32 - y64)) > 0  # really two different precisions
    U = np.random.default_rng(2).standard_normal((3, t.m))
    np.testing.assert_allclose(t.vjp(U), t.vjp64(U), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(t.jvp64(np.eye(4)).T, t.vjp64(np.eye(t.m)), rtol=1e-12)
    for w, b in zip(model.weights, before, strict=True):
        np.testing.assert_array_equal(w.numpy(), b)
        assert w.dtype == "float32"


def test_keras_parameters_are_checked_by_weight_path():
    model = small_model()
    x = tf.constant(np.random.default_rng(0).standard_normal((2, 4)), tf.float32)
    t = target(lambda m, x: tf.reduce_sum(m(x) ** 2), model, x, argnums=(1,), wrt="parameters")
    names = [leaf.name for leaf in t.input_layout.leaves]
    assert names == [v.path for v in model.trainable_variables]
    assert t.n == 4 * 8 + 8 + 8 * 2 + 2
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(x) ** 2)
    expect = np.concatenate(
        [g.numpy().ravel() for g in tape.gradient(loss, model.trainable_variables)]
    )
    np.testing.assert_allclose(t.vjp(np.array([[1.0]]))[0], expect, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(t.vjp64(np.array([[1.0]]))[0], expect, rtol=1e-4, atol=1e-6)
    # evaluating at other weights does not touch the model
    before = [w.numpy().copy() for w in model.weights]
    y = t.evaluate(np.stack([t.x0, np.zeros_like(t.x0)]))
    assert y[0, 0] == pytest.approx(float(loss), rel=1e-6) and y[1, 0] == 0.0
    for w, b in zip(model.weights, before, strict=True):
        np.testing.assert_array_equal(w.numpy(), b)


def test_parameters_need_a_keras_model():
    with pytest.raises(TypeError, match="Keras 3 model"):
        target(lambda x: tf.reduce_sum(x), tf.constant([1.0]), wrt="parameters")


def test_dropout_in_training_mode_is_nondeterministic():
    model = small_model()
    x = tf.constant(np.ones((1, 4)), tf.float32)
    with pytest.raises(NondeterministicFunctionError, match="training=False"):
        target(lambda m, x: tf.reduce_sum(m(x, training=True)), model, x, argnums=(1,))


def _bn_model() -> Any:
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(5),
                             keras.layers.BatchNormalization(), keras.layers.Dense(1)])  # fmt: skip


def test_a_closed_over_model_updating_its_statistics_is_refused_and_restored():
    """A Keras model with BatchNormalization, closed over in a lambda and called with
    training=True: every call moves its moving statistics. The check refuses it, names
    the variable, and leaves every variable as it was (as for PyTorch)."""
    model = _bn_model()
    before = [w.numpy().copy() for w in model.weights]
    x = tf.constant(np.random.default_rng(0).standard_normal((6, 4)), tf.float32)
    with pytest.raises(InputMutationError, match="moving_(mean|variance).*training=False"):
        pg.check(lambda x: tf.reduce_mean(model(x, training=True) ** 2), x)
    for w, b in zip(model.weights, before, strict=True):
        np.testing.assert_array_equal(w.numpy(), b)
    report = pg.check(lambda x: tf.reduce_mean(model(x, training=False) ** 2), x)
    assert report.verdict is pg.Verdict.PASS and report.ok


COUNTER = tf.Variable(0.0, dtype=tf.float64)


@tf.function
def _counted(x: Any) -> Any:
    COUNTER.assign_add(1.0)
    return tf.reduce_sum(tf.sin(x))


def test_a_global_variable_written_inside_a_tf_function_is_refused_and_restored():
    with pytest.raises(InputMutationError, match="assign_add"):
        pg.check(_counted, tf.constant([0.5, 1.0], tf.float64))
    assert COUNTER.numpy() == 0.0


# --- order 2 -----------------------------------------------------------------------------------


def test_gradient_function_is_the_gradient_and_differentiable_again():
    g = BE.gradient_function(lambda x, w: tf.reduce_sum(w * x**3), (None, None), (0,))
    x, w = tf.constant([1.0, 2.0], tf.float64), tf.constant([3.0, 0.5], tf.float64)
    np.testing.assert_allclose(g(x, w).numpy(), [9.0, 6.0])
    t = target(g, x, w)
    np.testing.assert_allclose(t.vjp(np.eye(2)), np.diag([18.0, 6.0]))


# --- end to end: polygrad.check ----------------------------------------------------------------


def normal_by_hand(x, loc, scale):
    return tf.reduce_sum(-((x - loc) ** 2) / (2 * scale**2))


def normal_tfp(x, loc, scale):
    return tf.reduce_sum(tfp.distributions.Normal(loc, scale).log_prob(x))


@pytest.mark.parametrize("form", [normal_by_hand, normal_tfp])
@pytest.mark.parametrize("n", [1, 10, 1000])
@pytest.mark.parametrize("eval_at", [1.0, 100.0])
def test_users_case1_normal_log_density_passes(form, n, eval_at):
    scale = tf.constant(np.random.default_rng(0).uniform(0.5, 1.5, n), tf.float32)
    x = tf.constant(eval_at * np.ones(n), tf.float32)
    report = pg.check(form, x, tf.constant(0.0), scale)
    assert report.verdict == pg.Verdict.PASS, str(report)
    assert report.ok


def test_users_case1_closure_form_is_never_a_mismatch():
    scale = tf.constant(np.random.default_rng(0).uniform(0.5, 1.5, 10), tf.float32)
    report = pg.check(lambda x: normal_by_hand(x, 0.0, scale), tf.ones(10))
    assert report.verdict == pg.Verdict.PASS, str(report)


def make_custom(rule):
    """``f(x, y) = sum(3 * g(x, y)**2)`` with ``g = x * sin(y)`` and a custom gradient."""

    @tf.custom_gradient
    def g(x, y):
        def grad(up):
            dx, dy = up * tf.sin(y), up * x * tf.cos(y)
            if rule == "no_upstream":
                dx, dy = tf.sin(y), x * tf.cos(y)
            elif rule == "wrong_sign_branch":
                dx = tf.where(x > 0, dx, -dx)
            elif rule == "dropped_input":
                dy = None
            elif rule == "relative_1e-3":
                dx = dx * (1 + 1e-3)
            return dx, dy

        return x * tf.sin(y), grad

    return lambda x, y: tf.reduce_sum(3.0 * g(x, y) ** 2)


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
@pytest.mark.parametrize(
    "rule", ["correct", "no_upstream", "wrong_sign_branch", "dropped_input", "relative_1e-3"]
)
def test_custom_gradient_rules(rule, dtype):
    x = tf.constant([0.7, -1.3, 2.1, -0.4], dtype)
    y = tf.constant([0.3, 1.1, -0.8, 2.0], dtype)
    report = pg.check(make_custom(rule), x, y, argnums=(0, 1))
    expect = pg.Verdict.PASS if rule == "correct" else pg.Verdict.MISMATCH
    assert report.verdict == expect, str(report)


def test_custom_gradient_disables_forward_mode_with_a_note():
    t = target(make_custom("correct"), tf.constant([0.5]), tf.constant([0.2]), argnums=(0, 1))
    assert not t.forward_mode() and t.jvp64 is None and t.vjp is not None
    assert any("custom_gradient" in note for note in t.notes)
    # the forward-mode test is deferred until a check asks for it, and its reason is in
    # the error of a check that needs forward mode
    fresh = target(make_custom("correct"), tf.constant([0.5]), tf.constant([0.2]), argnums=(0, 1))
    assert "forward" in fresh.deferred and fresh.jvp is not None
    f = make_custom("correct")
    with pytest.raises(ValueError, match="needs a JVP.*custom_gradient"):
        pg.check(f, tf.constant([0.5]), tf.constant([0.2]), argnums=(0, 1), mode="both")


def test_known_tf_bug_xlogy_gradient_at_zero_is_a_mismatch():
    x = tf.constant([0.0], tf.float64)
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = tf.math.xlogy(x, 2.0)
    raw = float(tape.gradient(out, x)[0])
    assert raw != pytest.approx(np.log(2.0)), "TF fixed the xlogy gradient"
    assert raw == 0.0
    report = pg.check(lambda x: tf.reduce_sum(tf.math.xlogy(x, 2.0)), x)
    assert report.verdict == pg.Verdict.MISMATCH, str(report)


digit_image = keras_digit
users_cnn = keras_case2_cnn


def cnn_loss(training=False):
    image, label = digit_image()
    onehot = tf.one_hot([label], 10)

    def loss(m, x):
        return tf.reduce_sum(keras.losses.categorical_crossentropy(onehot, m(x, training=training)))

    return loss, tf.constant(image)


def test_users_case2_cnn_input_gradient():
    loss, x = cnn_loss()
    report = pg.check(loss, users_cnn(), x, argnums=1)
    assert report.verdict in OK_VERDICTS, str(report)
    assert report.ok
    assert pg.Verdict.MISMATCH.name not in str(report).split("verdicts:")[1].splitlines()[0]


def test_users_case2_cnn_with_dropout_active_is_nondeterministic():
    loss, x = cnn_loss(training=True)
    with pytest.raises(NondeterministicFunctionError, match="training=False"):
        pg.check(loss, users_cnn(), x, argnums=1)


def test_bfloat16_inputs_are_checked_not_crashed():
    """bfloat16 tensors cannot go through np.asarray; the check reads them with .numpy()."""
    r = pg.check(lambda x: tf.reduce_sum(tf.tanh(x)), tf.constant([0.5, -1.0], tf.bfloat16))
    assert r.verdict == pg.Verdict.PASS
    assert r.details["working_dtype"] == "bfloat16"
    assert r.details["reference"]["method"] == "float64"
    exact = 1 - np.tanh([0.5, -1.0]) ** 2
    true_error = np.abs(r.entries.reference - exact)
    assert np.all(true_error <= r.entries.reference_error)  # the error bar covers
    assert np.all(true_error <= 1e-6 * exact)  # far inside bfloat16's resolution


def test_working_dtype_reference_detects_a_1e_4_rule_error():
    """A float32 function that reads a float32 constant through tf.py_function has no
    float64 evaluation; its float32 reference still resolves a softplus rule wrong by 1e-4
    (relative)."""
    rng = np.random.default_rng(7)
    x = tf.constant((2.0 * rng.standard_normal(16)).astype(np.float32))
    w = tf.constant(rng.uniform(0.5, 2.0, 16).astype(np.float32))

    def make(delta):
        @tf.custom_gradient
        def softplus(v):
            def grad(ct):
                g = ct * tf.sigmoid(v)
                return g + delta * g

            return tf.math.softplus(v), grad

        return lambda v: tf.reduce_sum(tf.py_function(lambda: w, [], tf.float32) * softplus(v))

    good = pg.check(make(0.0), x)
    assert good.details["reference"]["method"] == "working"
    assert good.verdict == pg.Verdict.PASS
    bad = pg.check(make(1e-4), x)
    assert bad.verdict == pg.Verdict.MISMATCH


@pytest.mark.parametrize("dtype", [tf.float64, tf.float32])
def test_one_kinked_coordinate_does_not_lend_its_kink_as_noise(dtype):
    """sum(w |x|) with x_2 = 0: ECnoise reads the kink along x_2 as noise; the seven
    smooth coordinates (linear, so they see no noise at all) must not borrow it, or their
    error bars grow 10^7 times and they are INCONCLUSIVE."""
    w = tf.constant(np.random.default_rng(21).uniform(0.5, 2.0, 8), dtype)
    x = np.random.default_rng(22).uniform(-2.0, 2.0, 8)
    x[2] = 0.0
    report = pg.check(lambda x: tf.reduce_sum(w * tf.abs(x)), tf.constant(x, dtype))
    assert report.counts() == {"NONSMOOTH": 1, "PASS": 7}


def test_random_draws_inside_f_are_drawn_as_f_draws_them():
    """A fixed dropout mask drawn by tf.random.stateless_uniform inside f: the same seed
    draws other numbers in float64, so the float64 graph draws in float32, as f does,
    and widens. PASS, on the closed form softplus'(x m) m with f's own mask; a rule
    1e-3 off is MISMATCH."""
    x = tf.constant(np.random.default_rng(0).standard_normal(8), tf.float32)

    def mask_of(x):
        return tf.cast(tf.random.stateless_uniform(x.shape, seed=[3, 4]) > 0.3, x.dtype) / 0.7

    def f(x):
        return tf.reduce_sum(tf.math.softplus(x * mask_of(x)))

    @tf.custom_gradient
    def wrong_softplus(u):
        return tf.math.softplus(u), lambda g: g * tf.sigmoid(u) * 1.001

    def wrong(x):
        return tf.reduce_sum(wrong_softplus(x * mask_of(x)))

    m = mask_of(x).numpy().astype(np.float64)
    xs = x.numpy().astype(np.float64)
    want = m / (1 + np.exp(-xs * m))
    report = pg.check(f, x)
    assert report.verdict is pg.Verdict.PASS and report.ok, report
    np.testing.assert_allclose(report.entries.reference, want, rtol=1e-6)
    assert any("draws random numbers" in n for n in report.notes)
    assert pg.check(wrong, x).verdict is pg.Verdict.MISMATCH


def test_a_failure_under_a_heading_is_described_by_the_line_that_names_it():
    """TensorFlow heads a failed graph run with "Graph execution error:" and the node, and
    a traced failure with "in user code:"; the notes quote the line that names the error."""
    from polygrad.backends.base import describe_exception

    run = tf.errors.InvalidArgumentError(
        None, None, "Graph execution error:\n\nDetected at node mul\nSignature mismatch, "
        "have: complex64->double, expected: complex128->double"
    )  # fmt: skip
    assert describe_exception(run) == (
        "InvalidArgumentError: Signature mismatch, have: complex64->double, expected: "
        "complex128->double"
    )
    assert describe_exception(ValueError("a: b")) == "ValueError: a: b"


def test_custom_gradient_of_the_wrong_shape_is_a_clear_error():
    """A tf.custom_gradient that returns a scalar for a vector input: TensorFlow's tape
    passes the scalar on; the check raises ShapeMismatchError rather than comparing it
    (its report could not even be printed)."""

    @tf.custom_gradient
    def bad(x):
        return tf.sin(x), lambda g: tf.reduce_sum(g * tf.cos(x))  # () for a (3,) input

    shapes = r"shape \(\) came back for a tensor of shape \(3,\)"
    with pytest.raises(ShapeMismatchError, match=shapes):
        pg.check(lambda x: tf.reduce_sum(bad(x)), tf.constant([0.1, 0.2, 0.3]))


def test_auto_mode_says_why_reverse_mode_failed_before_forward_mode():
    """Reverse mode fails (the tape adds a shapeless py_function gradient to a vector one),
    and forward mode too: the error names the reverse-mode failure first."""

    def f(x):
        y = tf.py_function(lambda v: np.sin(v.numpy()), [x], tf.float32)
        return tf.reduce_sum(y + x**2)

    with pytest.raises(ValueError, match="reverse mode failed.*forward mode failed"):
        pg.check(f, tf.constant([0.1, 0.2]))


def test_a_gradient_rule_that_raises_is_named_first_under_mode_auto():
    """A tf.custom_gradient whose rule raises (an int32 factor in a float product): no
    VJP, and TensorFlow's forward mode ignores custom gradients, so no JVP either; the
    error says both are missing and leads with why reverse mode failed."""

    @tf.custom_gradient
    def f(x):
        def grad(g):
            return g * tf.cast(x, tf.int32)

        return tf.sin(x), grad

    with pytest.raises(ValueError) as info:
        pg.check(lambda x: tf.reduce_sum(f(x)), tf.constant([0.5, 1.0]))
    text = str(info.value)
    assert text.startswith("mode='auto' needs a VJP or a JVP, and this function provides neither")
    assert text.index("reverse mode failed") < text.index("forward mode")


def test_a_python_float_of_a_tensor_is_a_wrong_gradient_not_an_unstable_one():
    """``scale = float(tf.reduce_max(tf.abs(x)))`` cuts the tape in eager code, so the
    gradient misses the path through ``scale`` in every dtype. Only AutoGraph can trace
    it, and it turns ``float()`` into a cast that the graph differentiates: the float64
    evaluation of the rule, which runs that graph, agreed with the reference, and the
    check said UNSTABLE (the float32 arithmetic). It is MISMATCH, with a note on
    AutoGraph; a branch on a tensor's value, which AutoGraph also converts, keeps its
    gradient and stays PASS."""
    x = tf.constant([0.5, -2.0, 1.0, 0.25])

    def f(v):
        scale = float(tf.reduce_max(tf.abs(v)))
        return tf.reduce_sum(tf.sin(v / scale))

    report = pg.check(f, x)
    assert report.verdict is pg.Verdict.MISMATCH and not report.ok, str(report)
    # d f / d x[1] through scale = |x[1]| = 2: cos(-1) / 2 + sum_i cos(x_i / 2) x_i / 4
    v = np.array([0.5, -2.0, 1.0, 0.25])
    true = np.cos(-1.0) / 2 + np.sum(np.cos(v / 2) * v / 4)
    assert report.entries.reference[1] == pytest.approx(true, rel=1e-9)
    assert report.entries.autodiff[1] == pytest.approx(np.cos(-1.0) / 2, rel=1e-6)
    assert any("AutoGraph" in n for n in report.notes), report.notes

    def g(v):
        if tf.reduce_sum(v) > 0:
            return tf.reduce_sum(tf.sin(v) * v)
        return tf.reduce_sum(tf.cos(v))

    branch = pg.check(g, tf.constant([0.5, -2.0, 1.0, 2.25]))
    assert branch.verdict is pg.Verdict.PASS and branch.ok, str(branch)
    assert not any("AutoGraph" in n for n in branch.notes), branch.notes
