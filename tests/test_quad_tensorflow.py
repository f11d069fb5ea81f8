"""The quad tier for TensorFlow: the frozen float64 graph run on binary128 arrays.

Each op rule is checked against TensorFlow's own float64 result at the same points, the
reference of a model's loss against a closed form evaluated with mpmath, and each verdict
against the truth (a right rule PASS, a rule wrong by 1e-9 MISMATCH); a graph the quad
interpreter cannot run goes on to mpmath and says why.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from typing import Any  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402
from conftest import mlp_loss_grad_mp  # noqa: E402

import polygrad as pg  # noqa: E402
from polygrad.backends.base import Supplied  # noqa: E402
from polygrad.backends.tensorflow import TensorflowBackend  # noqa: E402
from polygrad.mpexec.quad_ops import NoQuadRuleError  # noqa: E402
from polygrad.mpexec.tf_quad import quad_tf_evaluator  # noqa: E402
from polygrad.reference.quad import quad_dtype  # noqa: E402

pytestmark = pytest.mark.polygrad_backends("tensorflow")

RNG = np.random.default_rng(13)
W1 = RNG.normal(size=(8, 6)) / np.sqrt(6)
B1 = RNG.uniform(-0.5, 0.5, 8)
W2 = RNG.normal(size=(5, 8)) / np.sqrt(8)
X6 = RNG.uniform(-1.5, 1.5, 6)
T_W1, T_B1, T_W2 = (tf.constant(a) for a in (W1, B1, W2))
LABELS = tf.constant([1, 2])


def mlp_loss(x: Any) -> Any:
    h = tf.tanh(tf.linalg.matvec(T_W1, x) + T_B1)
    return tf.nn.log_softmax(tf.linalg.matvec(T_W2, h))[3]


keras.utils.set_random_seed(0)
DENSE = keras.Sequential([keras.layers.Dense(4, activation="tanh", dtype="float64"),
                          keras.layers.Dense(3, dtype="float64")])  # fmt: skip
DENSE.build((None, 3))

# programs covering every rule of the quad interpreter, each checked against TF float64
PROGRAMS = {
    "keras layers and cross entropy": lambda x: tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(LABELS, DENSE(tf.reshape(x, (2, 3))))
    ),
    "matmul shapes": lambda x: tf.concat(
        [
            tf.reshape(tf.reshape(x, (2, 3)) @ tf.reshape(x, (3, 2)), [-1]),
            tf.linalg.matvec(T_W1, x),
            tf.reshape(x[None] @ tf.transpose(T_W1), [-1]),
            tf.reshape(tf.matmul(tf.reshape(x, (2, 1, 3)), tf.reshape(x, (2, 3, 1))), [-1]),
            tf.reshape(tf.matmul(tf.reshape(x, (2, 3)), T_W1[:2, :3], transpose_b=True), [-1]),
        ],
        0,
    ),
    "reductions": lambda x: tf.stack(
        [
            tf.reduce_sum(x),
            tf.reduce_mean(x),
            tf.reduce_max(x),
            tf.reduce_min(x),
            tf.reduce_prod(x),
            tf.reduce_sum(tf.reshape(x, (2, 3)), 1)[1],
            tf.reduce_logsumexp(x),
            tf.gather(x, tf.argmax(x)),
        ]
    ),  # fmt: skip
    "softmax and losses": lambda x: tf.concat(
        [
            tf.reshape(tf.nn.softmax(tf.reshape(x, (2, 3))), [-1]),
            tf.nn.log_softmax(x),
            tf.nn.softmax_cross_entropy_with_logits(
                tf.constant([[0.0, 1, 0], [0.2, 0.3, 0.5]], tf.float64), tf.reshape(x, (2, 3))
            ),
            tf.reduce_mean(tf.square(x - 1.0))[None],
        ],
        0,
    ),  # fmt: skip
    "elementwise": lambda x: tf.concat(
        [
            tf.exp(x),
            tf.math.log1p(x**2),
            tf.math.expm1(x),
            tf.atan(x),
            tf.sinh(x),
            tf.cosh(x),
            tf.asinh(x),
            tf.sigmoid(x),
            tf.math.rsqrt(1 + x**2),
            tf.tanh(x),
            tf.atan2(x, x[::-1]),
            tf.pow(1.5 + x, 0.3 + x[::-1] ** 2),
            x**-3,
            2.0 - 3 * x,
            x / (2 + x**2),
            tf.nn.softplus(x),
            tf.nn.relu(x),
            tf.nn.elu(x),
            tf.nn.leaky_relu(x),
            tf.math.xlogy(x, 2 + x),
            tf.math.divide_no_nan(x, x - x[0]),
            tf.math.squared_difference(x, 0.5),
            tf.add_n([x, x, 2 * x]),
        ],
        0,
    ),  # fmt: skip
    "where clip casts": lambda x: tf.concat(
        [
            tf.where(x > 0.1, tf.clip_by_value(x, -0.7, 0.7), x**3),
            tf.maximum(x, x[::-1]),
            tf.minimum(x, 0.3 * x),
            tf.cast(tf.cast(3 * x, tf.int32), tf.float64) * x,
            tf.round(3 * x) + tf.floor(2 * x) * tf.math.ceil(x) + tf.sign(x),
        ],
        0,
    ),
    "indexing and shapes": lambda x: tf.concat(
        [
            tf.gather(x, [4, 0, 2]) * x[1:4],
            tf.reshape(tf.transpose(tf.reshape(x, (2, 3))), [-1]),
            tf.reshape(x, (3, 2))[:, 1],
            tf.tile(x[:2], [3]),
            tf.squeeze(tf.expand_dims(x, 0)),
            tf.broadcast_to(x[:1], [3]),
            tf.pad(x[:2], [[1, 2]]),
            tf.unstack(tf.reshape(x, (2, 3)))[1],
            tf.zeros_like(x) + tf.ones_like(x) * x,
        ],
        0,
    ),  # fmt: skip
}


def _quad_and_float64(fn: Any, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    t = TensorflowBackend().make_target(fn, (tf.constant(X[0]),), (0,), Supplied(), 64)
    assert t.mp_mode(), t.mp_unavailable_reason
    q = quad_dtype()
    evaluate = quad_tf_evaluator(t.evaluate_mp.program, t.evaluate_mp.shapes, q)
    got = evaluate(X.astype(q)).astype(np.float64)
    want = np.stack([np.ravel(fn(tf.constant(row)).numpy()) for row in X])
    return got, want


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_every_rule_agrees_with_tensorflow_in_float64(name: str) -> None:
    X = np.stack([X6, -0.5 * X6[::-1], X6 + 0.25])
    got, want = _quad_and_float64(PROGRAMS[name], X)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)


def test_an_op_without_a_quad_rule_is_named() -> None:
    t = TensorflowBackend().make_target(lambda v: tf.math.erf(v), (tf.constant(X6),), (0,),
                                        Supplied(), 64)  # fmt: skip
    assert t.mp_mode()
    with pytest.raises(NoQuadRuleError, match="Erf"):
        quad_tf_evaluator(t.evaluate_mp.program, t.evaluate_mp.shapes, quad_dtype())


def test_the_loss_of_a_model_has_a_quad_reference_matching_the_closed_form() -> None:
    report = pg.check(mlp_loss, tf.constant(X6), cache=False)
    assert report.verdict == pg.Verdict.PASS and report.ok, str(report)
    assert report.details.reference.method == "quad"
    true = np.array([float(v) for v in mlp_loss_grad_mp(W1, B1, W2, X6)])
    e = report.entries
    assert np.all(np.abs(e.reference - true) <= 4e-16 * np.abs(true))
    assert np.all(e.reference_error <= 1e-15 * np.max(np.abs(true)))


def _tanh_with_rule(scale: float) -> Any:
    @tf.custom_gradient
    def tanh(v: Any) -> Any:
        y = tf.tanh(v)
        return y, lambda g: g * (1 - y**2) * scale

    return tanh


@pytest.mark.parametrize("scale", [1.0, 1 + 1e-9])
def test_a_rule_wrong_by_1e9_is_caught_and_a_right_one_passes(scale: float) -> None:
    tanh = _tanh_with_rule(scale)

    def loss(x: Any) -> Any:
        return tf.nn.log_softmax(tf.linalg.matvec(T_W2, tanh(tf.linalg.matvec(T_W1, x) + T_B1)))[3]

    report = pg.check(loss, tf.constant(X6), cache=False)
    assert report.details.reference.method == "quad"
    if scale == 1.0:
        assert report.verdict == pg.Verdict.PASS and report.ok, str(report)
    else:
        assert report.verdict == pg.Verdict.MISMATCH and not report.ok, str(report)


def test_a_kink_at_the_point_goes_on_to_mp_and_is_nonsmooth() -> None:
    x = tf.constant([0.0, 0.7, -0.4], dtype=tf.float64)
    report = pg.check(lambda v: tf.reduce_sum(tf.nn.relu(v) * tf.cos(v)), x, cache=False)
    assert report.verdict == pg.Verdict.NONSMOOTH and report.ok, str(report)
    assert report.details.reference.method == "quad"
    assert any("quad-precision differences did not settle 1 of 3" in n for n in report.notes)


def test_without_a_quad_rule_the_check_uses_mp_and_says_why() -> None:
    x = tf.constant([0.3, -0.8, 1.1], dtype=tf.float64)
    report = pg.check(lambda v: tf.reduce_sum(tf.math.erf(v) * v), x, cache=False)
    assert report.verdict == pg.Verdict.PASS and report.ok, str(report)
    assert report.details.reference.method == "mp"
    assert any("quad-precision reference is unavailable (no quad rule for Erf" in n
               for n in report.notes), report.notes  # fmt: skip


def test_the_quad_evaluator_is_built_once_per_captured_graph() -> None:
    x = tf.constant(X6)
    t1 = TensorflowBackend().make_target(mlp_loss, (x,), (0,), Supplied(), 64)
    t2 = TensorflowBackend().make_target(mlp_loss, (x,), (0,), Supplied(), 64)
    assert t1.quad_mode() and t2.quad_mode()
    assert t1.evaluate_quad is t2.evaluate_quad
