"""Float64 references for TensorFlow code as people write it: the function is captured
as a graph, with every variable and tensor it closes over, and re-run in float64."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import functools  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import textwrap  # noqa: E402
from pathlib import Path  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_probability as tfp  # noqa: E402
import tf_keras  # noqa: E402
from conftest import keras_case2_cnn as users_cnn  # noqa: E402
from conftest import keras_digit as digit_image  # noqa: E402

import polygrad as pg  # noqa: E402
from polygrad.backends.base import Supplied  # noqa: E402
from polygrad.backends.tensorflow import TensorflowBackend  # noqa: E402
from polygrad.errors import InputTypeError  # noqa: E402

pytestmark = pytest.mark.polygrad_backends("tensorflow")

BE = TensorflowBackend()
OK_VERDICTS = (pg.Verdict.PASS, pg.Verdict.NONSMOOTH)


def target(f, *args, argnums=(0,)):
    return BE.make_target(f, args, argnums, Supplied(), 64)


def method(report):
    return report.details["reference"]["method"]


def snapshot(model):
    """What a check must leave unchanged in a Keras model."""
    return (
        [(w.name, str(w.dtype), np.array(w.numpy(), copy=True)) for w in model.weights],
        model.trainable,
        model.dtype_policy.name if hasattr(model, "dtype_policy") else model.dtype,
    )


def assert_unchanged(model, before):
    after = snapshot(model)
    assert after[1:] == before[1:]
    for (name, dtype, value), (name0, dtype0, value0) in zip(after[0], before[0], strict=True):
        assert (name, dtype) == (name0, dtype0)
        np.testing.assert_array_equal(value, value0)


# --- USERS.md case 2: the CNN closed over, as the user wrote it ---------------------------------


def test_users_case2_cnn_closure_gets_a_float64_reference_and_the_argument_form_verdicts():
    image, label = digit_image()
    model = users_cnn()
    cce = keras.losses.CategoricalCrossentropy()
    y = tf.one_hot([label], 10)
    x = tf.constant(image.reshape(-1))
    before = snapshot(model)

    # every pixel (the automatic choice between all pixels and projections depends on
    # timings, and the two forms are compared entry by entry below)
    report = pg.check(lambda x: cce(y, model(tf.reshape(x, (1, 28, 28, 1)))), x, strategy="full")

    assert method(report) == "float64", str(report)
    assert report.verdict in OK_VERDICTS and report.ok, str(report)
    assert "MISMATCH" not in report.counts()
    assert not any("argument" in note for note in report.details["notes"])
    assert_unchanged(model, before)

    def as_argument(m, x):
        return cce(y, m(tf.reshape(x, (1, 28, 28, 1))))

    reference = pg.check(as_argument, model, x, argnums=1, strategy="full")
    assert method(reference) == "float64"
    assert report.counts()["PASS"] > 600 and report.entries.names == reference.entries.names
    assert report.entries.verdicts() == reference.entries.verdicts()
    apart = np.abs(report.entries.reference - reference.entries.reference)
    assert np.all(apart <= report.entries.reference_error + reference.entries.reference_error)


# --- USERS.md case 1: loc and scale closed over as float32 ------------------------------------


@pytest.mark.parametrize("form", ["by_hand", "tfp"])
@pytest.mark.parametrize("n", [1, 10, 1000])
@pytest.mark.parametrize("eval_at", [1.0, 100.0])
def test_users_case1_closure_over_float32_loc_and_scale_passes_with_float64(form, n, eval_at):
    loc = tf.constant(0.0, tf.float32)
    scale = tf.constant(np.random.default_rng(0).uniform(0.5, 1.5, n), tf.float32)
    if form == "by_hand":

        def f(x):
            return tf.reduce_sum(-((x - loc) ** 2) / (2 * scale**2))
    else:
        dist = tfp.distributions.Normal(loc, scale)

        def f(x):
            return tf.reduce_sum(dist.log_prob(x))

    report = pg.check(f, tf.constant(eval_at * np.ones(n), tf.float32))
    assert method(report) == "float64", str(report)
    assert report.verdict == pg.Verdict.PASS and report.ok, str(report)
    assert scale.dtype == tf.float32 and loc.dtype == tf.float32


def test_closed_over_tensor_is_promoted_not_rounded():
    w = tf.constant([0.1, 1.5], tf.float32)
    t = target(lambda x: tf.reduce_sum(w * x), tf.constant([1.0, 2.0]))
    X = np.array([[1.0, 2.0], [0.3, 0.0]])
    w32 = np.float32([0.1, 1.5]).astype(np.float64)  # the user's float32 values, exactly
    np.testing.assert_array_equal(t.evaluate64(X)[:, 0], X @ w32)
    np.testing.assert_array_equal(t.vjp64(np.array([[2.0]])), [2.0 * w32])
    assert t.notes == []


# --- every way a function reaches its model -------------------------------------------------


def dense_model(seed=3):
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(6, activation="tanh"), keras.layers.Dense(2)]
    )


GLOBAL_MODEL = dense_model()


def global_loss(x):
    return tf.reduce_sum(GLOBAL_MODEL(x[None]) ** 2)


class Trainer:
    def __init__(self, model):
        self.model = model

    def loss(self, x):
        return tf.reduce_sum(self.model(x[None]) ** 2)


def model_loss(model, scale, x):
    return scale * tf.reduce_sum(model(x[None]) ** 2)


@tf.function
def decorated_loss(x):
    return tf.reduce_sum(GLOBAL_MODEL(x[None]) ** 2)


@tf.function(jit_compile=True)
def compiled_loss(x):
    return tf.reduce_sum(GLOBAL_MODEL(x[None]) ** 2)


FORMS = {
    "closure": lambda: lambda x: tf.reduce_sum(GLOBAL_MODEL(x[None]) ** 2),
    "global": lambda: global_loss,
    "method": lambda: Trainer(GLOBAL_MODEL).loss,
    "partial": lambda: functools.partial(model_loss, GLOBAL_MODEL, tf.constant(1.0)),
    "tf_function": lambda: decorated_loss,
    "tf_function_jit": lambda: compiled_loss,
}


@pytest.mark.parametrize("form", list(FORMS))
def test_every_way_of_reaching_the_model_gets_float64_and_the_same_verdict(form):
    x = tf.constant([0.3, -0.7, 1.1, 0.2], tf.float32)
    before = snapshot(GLOBAL_MODEL)
    report = pg.check(FORMS[form](), x)
    assert method(report) == "float64", str(report)
    assert report.verdict == pg.Verdict.PASS and report.ok, str(report)
    expected = pg.check(lambda m, x: tf.reduce_sum(m(x[None]) ** 2), GLOBAL_MODEL, x, argnums=1)
    np.testing.assert_allclose(report.entries.reference, expected.entries.reference, rtol=1e-9)
    assert_unchanged(GLOBAL_MODEL, before)


def test_tf_keras_model_with_batch_norm_closed_over_is_promoted_and_unchanged():
    tf_keras.utils.set_random_seed(0)
    model = tf_keras.Sequential(
        [
            tf_keras.layers.Dense(5, activation="softplus", input_shape=(3,)),
            tf_keras.layers.BatchNormalization(),
            tf_keras.layers.Dense(1),
        ]
    )
    model.layers[1].moving_mean.assign(np.full(5, 0.3, np.float32))
    model.layers[1].moving_variance.assign(np.full(5, 2.0, np.float32))
    before = snapshot(model)
    report = pg.check(lambda x: tf.reduce_sum(model(x[None], training=False)), tf.ones(3))
    assert method(report) == "float64", str(report)
    assert report.verdict == pg.Verdict.PASS and report.ok, str(report)
    assert_unchanged(model, before)
    assert tf_keras.backend.floatx() == "float32"
    assert keras.config.floatx() == "float32"


def test_closed_over_variable_is_frozen_on_a_copy_and_left_unchanged():
    v = tf.Variable([0.5, -1.25, 2.0], dtype=tf.float32)
    report = pg.check(lambda x: tf.reduce_sum(tf.sin(v * x)), tf.constant([1.0, 0.5, -0.2]))
    assert method(report) == "float64"
    assert report.verdict == pg.Verdict.PASS
    assert v.dtype == tf.float32
    np.testing.assert_array_equal(v.numpy(), np.float32([0.5, -1.25, 2.0]))


def test_control_flow_inside_the_captured_graph_is_promoted():
    w = tf.constant([0.5, 1.5, -1.0], tf.float32)

    def f(x):
        y = tf.cond(tf.reduce_sum(x) > 0, lambda: tf.sin(w * x), lambda: x**2)
        _, z = tf.while_loop(lambda i, z: i < 3, lambda i, z: (i + 1, tf.tanh(z) * w), (0, y))
        return tf.reduce_sum(z)

    report = pg.check(f, tf.constant([0.3, 0.8, 0.1]))
    assert method(report) == "float64", str(report)
    assert report.verdict == pg.Verdict.PASS and report.ok, str(report)


# --- a wrong rule is still found -----------------------------------------------------------------


def test_planted_custom_gradient_error_inside_a_closure_over_a_model_is_a_mismatch():
    model = dense_model(seed=5)

    def make(factor):
        @tf.custom_gradient
        def softsign(v):
            def grad(up):
                return up / (1 + tf.abs(v)) ** 2 * factor

            return v / (1 + tf.abs(v)), grad

        return lambda x: tf.reduce_sum(model(softsign(x)[None]) ** 2)

    x = tf.constant([0.4, -0.9, 1.3, 0.6], tf.float32)
    good = pg.check(make(1.0), x)
    assert method(good) == "float64", str(good)
    assert good.verdict == pg.Verdict.PASS and good.ok, str(good)
    bad = pg.check(make(1.0 + 1e-3), x)
    assert method(bad) == "float64"
    assert bad.verdict == pg.Verdict.MISMATCH, str(bad)
    assert any("custom_gradient" in note for note in bad.details["notes"])


# --- where promotion is impossible ---------------------------------------------------------------


def from_python(value):
    """A float32 constant that comes out of Python through tf.py_function."""
    return tf.py_function(lambda: tf.constant(value, tf.float32), [], tf.float32)


def test_py_function_blocks_promotion_names_the_op_and_kinks_are_never_a_mismatch():
    w = tf.constant(np.random.default_rng(4).uniform(0.5, 2.0, 8), tf.float32)
    x = np.random.default_rng(5).uniform(-2.0, 2.0, 8)
    x[[2, 5]] = 0.0  # kinks of |x| and relu
    f = lambda x: tf.reduce_sum(w * tf.abs(x) + tf.nn.relu(x) * from_python(0.5))  # noqa: E731
    report = pg.check(f, tf.constant(x, tf.float32))
    assert method(report) == "working"
    notes = " ".join(report.details["notes"])
    assert "op EagerPyFunc (tf.py_function)" in notes, notes
    verdicts = report.entries.verdicts()
    assert pg.Verdict.MISMATCH not in verdicts, str(report)
    assert {verdicts[2], verdicts[5]} <= {pg.Verdict.NONSMOOTH, pg.Verdict.INCONCLUSIVE}
    assert pg.Verdict.NONSMOOTH in verdicts


def test_numpy_function_blocks_promotion_and_is_named():
    offset = lambda: tf.numpy_function(lambda: np.float32(0.25), [], tf.float32)  # noqa: E731
    report = pg.check(lambda x: tf.reduce_sum(tf.sin(x)) + offset(), tf.constant([0.2, 1.0]))
    assert method(report) == "working"
    assert any("op PyFunc (tf.numpy_function)" in n for n in report.details["notes"])
    assert report.verdict == pg.Verdict.PASS


def test_op_without_a_float64_kernel_is_named():
    w = tf.constant([1.5, 0.5, -1.0], tf.float32)

    def f(x):
        return tf.reduce_sum(tf.sin(tf.nn.local_response_normalization(x * w, depth_radius=1)))

    x = tf.constant(np.random.default_rng(6).standard_normal((1, 2, 2, 3)), tf.float32)
    report = pg.check(f, x)
    assert method(report) == "working"
    assert any("op LRN has no float64 kernel" in n for n in report.details["notes"])
    assert report.verdict == pg.Verdict.PASS, str(report)


def test_fused_batch_norm_of_a_tf_keras_cnn_is_rewritten_and_promoted():
    """FusedBatchNormV3 has no float64 kernel; in inference it is replaced by its formula."""
    tf_keras.utils.set_random_seed(2)
    model = tf_keras.Sequential(
        [
            tf_keras.layers.Conv2D(3, 2, activation="tanh", input_shape=(4, 4, 2)),
            tf_keras.layers.BatchNormalization(epsilon=0.01),
            tf_keras.layers.Flatten(),
            tf_keras.layers.Dense(1),
        ]
    )
    bn = model.layers[1]
    bn.moving_mean.assign([0.2, -0.1, 0.3])
    bn.moving_variance.assign([0.5, 2.0, 1.5])
    bn.gamma.assign([1.5, 0.7, -1.2])
    bn.beta.assign([0.1, 0.0, -0.3])
    before = snapshot(model)
    x = tf.constant(np.random.default_rng(8).standard_normal((4, 4, 2)), tf.float32)
    f = lambda v: tf.reduce_sum(model(v[None], training=False))  # noqa: E731

    t = target(f, x)
    assert t.notes == []
    np.testing.assert_allclose(t.evaluate64(t.x0[None])[0], t.y0, rtol=1e-5)
    report = pg.check(f, x)
    assert method(report) == "float64", str(report)
    assert report.verdict == pg.Verdict.PASS and report.ok, str(report)
    assert_unchanged(model, before)


# --- a gradient that cannot flow ---------------------------------------------------------------


def test_numpy_round_trip_is_a_clear_error_naming_the_cause():
    with pytest.raises(InputTypeError, match=r"gradient cannot flow.*\.numpy\(\)"):
        pg.check(lambda x: tf.reduce_sum(tf.constant(x.numpy() ** 2)), tf.constant([0.5, 2.0]))


def test_stop_gradient_of_the_whole_output_is_a_clear_error_naming_the_cause():
    with pytest.raises(InputTypeError, match="gradient cannot flow.*tf.stop_gradient"):
        pg.check(lambda x: tf.stop_gradient(tf.reduce_sum(x**2)), tf.constant([0.5, 2.0]))


def test_a_constant_function_is_not_an_error():
    t = target(lambda x: tf.reduce_sum(tf.ones(3)) + 0.0 * 0, tf.constant([0.5, 2.0]))
    np.testing.assert_array_equal(t.vjp(np.array([[1.0]])), [[0.0, 0.0]])


# --- MultiHeadAttention: a native crash in float32 batches must not take the process -----------

MHA_SCRIPT = textwrap.dedent(
    """
    import json, os
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    import keras, numpy as np, tensorflow as tf
    import polygrad as pg

    keras.utils.set_random_seed(0)
    mha = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4)
    x = tf.constant(np.random.default_rng(0).standard_normal((3, 8)), tf.float32)
    loss = lambda x: tf.reduce_sum(mha(x[None], x[None]) ** 2)
    out = {}
    for reference in ("auto", "working"):
        r = pg.check(loss, x, reference=reference)
        out[reference] = [r.verdict.name, r.ok, r.details["reference"]["method"]]
    print("RESULT " + json.dumps(out))
    """
)


def test_multi_head_attention_closure_completes_in_a_subprocess():
    """float32 batches through tf.vectorized_map once crashed TensorFlow 2.21 natively on
    this layer (a (B, 1, m, k) by (k, n) batched product); a subprocess keeps a regression
    from taking the test session down."""
    root = str(Path(pg.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", MHA_SCRIPT], capture_output=True, text=True, env=env, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    result = json.loads(line[len("RESULT ") :])
    assert result["auto"] == ["PASS", True, "float64"]
    assert result["working"] == ["PASS", True, "working"]


# -- float64 inputs that the function computes with in float32 --------------------------------


@tf.custom_gradient
def _planted_tanh(x):
    y = tf.tanh(x)

    def grad(g):
        return g * (1 - y * y) * (1 + 1e-3)  # a wrong rule: off by 1e-3

    return y, grad


def test_keras_layer_with_float32_policy_on_float64_input_is_judged_at_float32():
    # a Keras layer computes in its dtype policy's float32 whatever the input's dtype
    keras.utils.set_random_seed(0)
    layer = keras.layers.Dense(4, activation="tanh")
    x = tf.constant(np.random.default_rng(3).normal(size=(2, 5)))
    assert layer(x).dtype == tf.float32
    before = snapshot(layer)
    report = pg.check(lambda v: layer(v), x)
    assert report.verdict == pg.Verdict.PASS and report.ok, report
    assert report.details["working_dtype"] == "float32"
    assert any("computes in float32 inside" in n for n in report.notes), report.notes
    assert_unchanged(layer, before)


def test_float64_input_computed_in_float32_still_catches_a_wrong_rule():
    keras.utils.set_random_seed(0)
    layer = keras.layers.Dense(4)
    x = tf.constant(np.random.default_rng(3).normal(size=(2, 5)))
    report = pg.check(lambda v: _planted_tanh(layer(v)), x)
    assert report.verdict == pg.Verdict.MISMATCH and not report.ok, report


def test_float32_constant_does_not_narrow_a_float64_check():
    x = tf.constant(np.random.default_rng(4).normal(size=6))
    c = tf.constant(0.1, tf.float32)
    report = pg.check(lambda v: tf.reduce_sum(tf.sin(v * tf.cast(c, tf.float64))), x)
    assert report.details["working_dtype"] == "float64"
    assert report.verdict == pg.Verdict.PASS and report.ok, report


def test_a_complex64_intermediate_is_promoted_to_complex128():
    """A weighted power spectrum, sum_k k |rfft(x)_k|^2, in float32: the FFT's complex64
    output becomes complex128 in the float64 graph (promoting only its float input
    broke the FFT's signature, and the reference fell back to float32). PASS with a
    float64 reference, on the closed form 2 sum_k k Re(conj(X_k) e^{-2 pi i j k / n})."""
    n = 16
    x = tf.constant(np.random.default_rng(3).standard_normal(n), tf.float32)

    def power(x):
        return tf.reduce_sum(tf.abs(tf.signal.rfft(x)) ** 2 * tf.range(9.0))

    report = pg.check(power, x)
    assert report.details["reference"]["method"] in ("float64", "mp"), report.notes
    assert report.verdict is pg.Verdict.PASS and report.ok, report
    xs = x.numpy().astype(np.float64)
    spectrum, k = np.fft.rfft(xs), np.arange(n // 2 + 1)
    phase = np.exp(-2j * np.pi * np.outer(np.arange(n), k) / n)
    want = 2 * np.real(phase @ (k * np.conj(spectrum)))
    np.testing.assert_allclose(report.entries.reference, want, rtol=1e-7, atol=1e-7 * n)
