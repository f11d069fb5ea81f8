"""The mp reference for TensorFlow: the captured float64 graph re-run on mpmath numbers.

* a suite of TensorFlow functions written as users write them (elementwise and
  special functions, reductions, matrix products, softmax and logsumexp,
  ``tf.where``, data movement, closures over ``tf.constant`` and
  ``tf.Variable``, a Keras ``Dense`` model closed over, a ``tf.function``, a
  ``tfp`` distribution, Keras losses): the mp evaluation at 50 digits agrees
  with TensorFlow's own float64 execution up to float64 round-off, and with
  the function's closed form (evaluated directly in mpmath) to 1e-25 where one
  exists; derivatives of the mp evaluation agree with closed-form Jacobians to
  1e-25;
* ``check(reference="mp")`` uses it and passes correct gradients; TensorFlow's
  ``xlogy`` gradient at ``x = 0`` (0 instead of ``log y``) is a MISMATCH;
* an op without an mpmath rule is named, and the check keeps a float64
  reference.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import functools  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any  # noqa: E402

import keras  # noqa: E402
import mpmath  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_probability as tfp  # noqa: E402

import polygrad as pg  # noqa: E402
from polygrad.backends.base import Supplied  # noqa: E402
from polygrad.backends.mpmath import make_context  # noqa: E402
from polygrad.backends.tensorflow import TensorflowBackend  # noqa: E402
from polygrad.mpexec.errors import UnsupportedOperatorError  # noqa: E402
from polygrad.mpexec.tf_graph import tf_mp_evaluator  # noqa: E402
from polygrad.reference.mp import mp_directional_derivatives  # noqa: E402

pytestmark = pytest.mark.polygrad_backends("tensorflow")

BE = TensorflowBackend()
EPS64 = float(np.finfo(np.float64).eps)
RNG = np.random.default_rng(20261201)
W32 = RNG.standard_normal((2, 3)).astype(np.float32)  # float32 weights, closed over
W_CONST = tf.constant(W32)
V_VAR = tf.Variable(RNG.standard_normal(3))  # float64 variable, closed over
B64 = RNG.standard_normal(3)


def _dense_model() -> Any:
    keras.utils.set_random_seed(7)
    model = keras.Sequential(
        [
            keras.layers.Dense(4, activation="tanh", dtype="float64"),
            keras.layers.Dense(1, dtype="float64"),
        ]
    )
    model.build((None, 3))
    return model


MODEL = _dense_model()

Values = Callable[[Any, list[Any]], list[Any]]
"""Closed form of the outputs: ``(ctx, xs) -> ys`` (lists of mpf)."""


@dataclass
class Case:
    name: str
    f: Callable[[Any], Any]
    x: np.ndarray
    values: Values | None = None


def sym(n: int, scale: float = 1.0) -> np.ndarray:
    return scale * np.array([0.3, -0.7, 0.45, -0.2, 0.85, -0.55, 0.15, 0.6, -0.35][:n])


def pos(n: int, lo: float = 0.3, hi: float = 1.7) -> np.ndarray:
    return np.linspace(lo, hi, n)


def each(g: Callable[[Any, Any], Any]) -> Values:
    """Closed form of an elementwise function."""
    return lambda c, xs: [g(c, t) for t in xs]


def _lse(c: Any, xs: list[Any]) -> Any:
    return c.log(c.fsum(c.exp(t) for t in xs))


def _dense(c: Any, xs: list[Any]) -> list[Any]:
    (k1, b1), (k2, b2) = [(layer.kernel.numpy(), layer.bias.numpy()) for layer in MODEL.layers]
    h = [
        c.tanh(c.fsum(c.mpf(float(k1[i, j])) * xs[i] for i in range(3)) + c.mpf(float(b1[j])))
        for j in range(4)
    ]
    return [c.fsum(c.mpf(float(k2[j, 0])) * h[j] for j in range(4)) + c.mpf(float(b2[0]))]


@tf.function
def decorated(x: Any) -> Any:
    return tf.reduce_sum(tf.exp(x) * x)


def _data_movement(x: Any) -> Any:
    m = tf.reshape(x, (2, 3))
    t = tf.squeeze(tf.expand_dims(tf.transpose(m), 0), axis=0)  # (3, 2)
    parts = [x[1:], x[::-1] ** 2, tf.stack([x[0], x[-1]]), tf.reshape(t, [-1])]
    return tf.concat(parts, 0) * tf.cast(tf.size(x), x.dtype) + x[None, :, None][0, 2, 0]


def _split_tile_pad(x: Any) -> Any:
    a, b = tf.split(x, 2)
    u = tf.unstack(tf.reshape(x, (3, 2)), axis=1)
    return tf.concat([tf.tile(a * b, [2]), tf.pad(u[0] - u[1], [[1, 2]]), tf.gather(x, [5, 0])], 0)


def _fill_like(x: Any) -> Any:
    two = tf.fill(tf.shape(x), tf.constant(2.0, tf.float64))
    return tf.ones_like(x) * x + tf.zeros_like(x) + two * x**3 + tf.broadcast_to(x[0], [3])


CASES = [
    Case(
        "add sub mul div",
        lambda x: x * 2.5 - x / 3.0 + x * x,
        sym(4),
        each(lambda c, t: t * 2.5 - t / 3 + t * t),
    ),
    Case(
        "neg square reciprocal",
        lambda x: -tf.square(x) + tf.math.reciprocal(x),
        sym(4),
        each(lambda c, t: -t * t + 1 / t),
    ),
    Case(
        "sqrt rsqrt",
        lambda x: tf.sqrt(x) + tf.math.rsqrt(x),
        pos(3),
        each(lambda c, t: c.sqrt(t) + 1 / c.sqrt(t)),
    ),
    Case(
        "exp expm1",
        lambda x: tf.exp(x) + tf.math.expm1(x),
        sym(4),
        each(lambda c, t: 2 * c.exp(t) - 1),
    ),
    Case(
        "log log1p",
        lambda x: tf.math.log(x) * tf.math.log1p(x),
        pos(3),
        each(lambda c, t: c.log(t) * c.log1p(t)),
    ),
    Case(
        "sin cos tan",
        lambda x: tf.sin(x) * tf.cos(x) + tf.tan(x),
        sym(4),
        each(lambda c, t: c.sin(t) * c.cos(t) + c.tan(t)),
    ),
    Case(
        "tanh sigmoid",
        lambda x: tf.tanh(x) + tf.sigmoid(3 * x),
        sym(4),
        each(lambda c, t: c.tanh(t) + 1 / (1 + c.exp(-3 * t))),
    ),
    Case(
        "softplus",
        lambda x: tf.nn.softplus(4 * x),
        sym(4),
        each(lambda c, t: c.log(1 + c.exp(4 * t))),
    ),
    Case(
        "erf erfc",
        lambda x: tf.math.erf(x) + x * tf.math.erfc(x),
        sym(4),
        each(lambda c, t: c.erf(t) + t * c.erfc(t)),
    ),
    Case(
        "pow",
        lambda x: tf.pow(x, 2.5) + tf.pow(tf.constant(1.5, tf.float64), x),
        pos(3),
        each(lambda c, t: c.power(t, 2.5) + c.power(1.5, t)),
    ),
    Case(
        "maximum minimum",
        lambda x: tf.maximum(x, 0.1) + tf.minimum(x, -0.25) * x,
        sym(4),
        each(lambda c, t: max(t, c.mpf(0.1)) + min(t, c.mpf(-0.25)) * t),
    ),
    Case(
        "abs sign",
        lambda x: tf.abs(x) ** 3 + tf.sign(x) * x,
        sym(4),
        each(lambda c, t: abs(t) ** 3 + abs(t)),
    ),
    Case(
        "relu elu leaky_relu selu",
        lambda x: tf.nn.relu(x) + tf.nn.elu(x) + tf.nn.leaky_relu(x, 0.25) + tf.nn.selu(x),
        sym(4),
        None,
    ),
    Case(
        "lgamma digamma",
        lambda x: tf.math.lgamma(x) + tf.math.digamma(x),
        pos(3),
        each(lambda c, t: c.loggamma(t) + c.digamma(t)),
    ),
    Case(
        "asin acos atan atan2",
        lambda x: tf.asin(x) + tf.acos(x) * x + tf.atan(x) + tf.atan2(x, 0.5),
        sym(4),
        each(lambda c, t: c.asin(t) + c.acos(t) * t + c.atan(t) + c.atan2(t, 0.5)),
    ),
    Case(
        "sinh cosh asinh atanh",
        lambda x: tf.sinh(x) * tf.cosh(x) + tf.asinh(x) + tf.atanh(x),
        sym(4),
        each(lambda c, t: c.sinh(t) * c.cosh(t) + c.asinh(t) + c.atanh(t)),
    ),
    Case(
        "xlogy xdivy xlog1py",
        lambda x: tf.math.xlogy(x, x + 1) + tf.math.xdivy(x, 2 + x) + tf.math.xlog1py(x, x),
        pos(3),
        each(lambda c, t: t * c.log(t + 1) + t / (2 + t) + t * c.log1p(t)),
    ),
    Case(
        "squared_difference",
        lambda x: tf.math.squared_difference(x, 0.5),
        sym(4),
        each(lambda c, t: (t - 0.5) ** 2),
    ),
    Case(
        "reduce_sum reduce_mean",
        lambda x: tf.concat(
            [
                tf.reduce_sum(tf.reshape(x, (2, 3)) ** 2, axis=1),
                tf.reshape(tf.reduce_mean(tf.reshape(x, (2, 3)), axis=0, keepdims=True), [-1]),
            ],
            0,
        ),
        sym(6),
        lambda c, xs: [
            xs[0] ** 2 + xs[1] ** 2 + xs[2] ** 2,
            xs[3] ** 2 + xs[4] ** 2 + xs[5] ** 2,
            *[(xs[j] + xs[j + 3]) / 2 for j in range(3)],
        ],
    ),
    Case(
        "reduce_prod reduce_max reduce_min",
        lambda x: tf.stack([tf.reduce_prod(x), tf.reduce_max(x), tf.reduce_min(x) * x[1]]),
        sym(4),
        lambda c, xs: [xs[0] * xs[1] * xs[2] * xs[3], max(xs), min(xs) * xs[1]],
    ),
    Case("reduce_logsumexp", lambda x: tf.reduce_logsumexp(x), sym(5), lambda c, xs: [_lse(c, xs)]),
    Case(
        "softmax",
        lambda x: tf.nn.softmax(2 * x),
        sym(4),
        lambda c, xs: [c.exp(2 * t) / c.fsum(c.exp(2 * s) for s in xs) for t in xs],
    ),
    Case("log_softmax", tf.nn.log_softmax, sym(4), lambda c, xs: [t - _lse(c, xs) for t in xs]),
    Case(
        "matmul with a float32 tf.constant closed over",
        lambda x: tf.matmul(tf.cast(W_CONST, tf.float64), x[:, None])[:, 0],
        sym(3),
        lambda c, xs: [
            c.fsum(c.mpf(float(w)) * t for w, t in zip(row, xs, strict=True)) for row in W32
        ],
    ),
    Case(
        "batch matmul",
        lambda x: tf.reshape(
            tf.linalg.matmul(tf.reshape(x, (2, 2, 3)), tf.reshape(x, (2, 2, 3)), transpose_b=True),
            [-1],
        ),
        np.concatenate([sym(6, 0.5), sym(6, -0.3)]),
        None,
    ),
    Case(
        "tf.Variable closed over",
        lambda x: tf.reduce_sum(V_VAR * tf.sin(x)),
        sym(3),
        lambda c, xs: [
            c.fsum(c.mpf(float(v)) * c.sin(t) for v, t in zip(V_VAR.numpy(), xs, strict=True))
        ],
    ),
    Case(
        "where",
        lambda x: tf.where(x > 0, x**2, -(x**3)),
        sym(4),
        each(lambda c, t: t**2 if t > 0 else -(t**3)),
    ),
    Case(
        "reshape transpose expand squeeze concat stack strided slice", _data_movement, sym(6), None
    ),
    Case("split unstack tile pad gather", _split_tile_pad, sym(6), None),
    Case("fill zeros_like ones_like broadcast_to", _fill_like, sym(3), None),
    Case(
        "bias_add",
        lambda x: tf.reshape(tf.nn.bias_add(tf.reshape(x, (2, 3)), B64), [-1]),
        sym(6),
        lambda c, xs: [xs[i] + c.mpf(float(B64[i % 3])) for i in range(6)],
    ),
    Case("Keras Dense model closed over", lambda x: MODEL(x[None, :])[0], sym(3), _dense),
    Case("tf.function", decorated, sym(3), lambda c, xs: [c.fsum(c.exp(t) * t for t in xs)]),
    Case(
        "tfp Normal log_prob",
        lambda x: tf.reduce_sum(tfp.distributions.Normal(0.25, B64**2 + 0.5).log_prob(x)),
        sym(3),
        None,
    ),
    Case("gelu", lambda x: tf.nn.gelu(x), sym(4), None),
    Case(
        "Keras losses",
        lambda x: (
            keras.losses.MeanSquaredError(dtype="float64")(B64, x)
            + keras.losses.CategoricalCrossentropy(from_logits=True, dtype="float64")(
                tf.constant([0.0, 1.0, 0.0], tf.float64), x
            )
        ),
        sym(3),
        None,
    ),
    Case(
        "Keras sparse categorical crossentropy from logits",
        lambda x: keras.losses.SparseCategoricalCrossentropy(from_logits=True, dtype="float64")(
            tf.constant([1]), x[None]
        ),
        sym(4),
        lambda c, xs: [_lse(c, xs) - xs[1]],
    ),
    Case(
        "cumsum",
        lambda x: tf.math.cumsum(x) * tf.math.cumsum(x, exclusive=True, reverse=True),
        sym(4),
        None,
    ),
    Case(
        "cumprod",
        lambda x: tf.math.cumprod(x) + tf.math.cumprod(x, exclusive=True, reverse=True),
        sym(4),
        lambda c, xs: [
            c.fprod(xs[: k + 1]) + c.fprod(xs[k + 1 :]) for k in range(len(xs))
        ],  # fmt: skip
    ),
]


def _flat_call(f: Callable[[Any], Any]) -> Callable[[list[Any]], list[Any]]:
    return lambda leaves: [tf.reshape(f(leaves[0]), [-1])]


@functools.cache
def _target(name: str) -> Any:
    case = next(c for c in CASES if c.name == name)
    return BE.make_target(case.f, (tf.constant(case.x),), (0,), Supplied(), 16)


def _evaluate(case: Case, x: np.ndarray | None = None) -> np.ndarray:
    t = _target(case.name)
    assert t.mp_mode(), t.mp_unavailable_reason
    assert t.evaluate_mp is not None
    x = case.x if x is None else x
    return t.evaluate_mp(x, np.zeros_like(x), 50)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_mp_agrees_with_float64_execution(case: Case) -> None:
    """mp re-execution at 50 digits vs TensorFlow in float64: a few ULP times the condition."""
    x = tf.constant(case.x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reshape(case.f(x), [-1])
    J = tape.jacobian(y, x).numpy()
    y64 = y.numpy()
    ymp = _evaluate(case)
    assert ymp.shape == y64.shape and all(hasattr(v, "_mpf_") for v in ymp)
    # absolute round-off scale of each output: its value and its sensitivity to the inputs
    scale = np.abs(y64) + np.abs(J) @ np.abs(case.x)
    err = np.abs(np.array([float(v) for v in ymp]) - y64)
    np.testing.assert_array_less(err, 32 * EPS64 * scale + 1e-300)


WITH_VALUES = [c for c in CASES if c.values is not None]


@pytest.mark.parametrize("case", WITH_VALUES, ids=[c.name for c in WITH_VALUES])
def test_mp_values_match_closed_forms(case: Case) -> None:
    """The mp values are the closed form evaluated in mpmath at 50 digits, to 1e-25."""
    ctx = make_context(50)
    want = case.values(ctx, [ctx.mpf(float(t)) for t in case.x])
    got = _evaluate(case)
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert abs(a - b) <= ctx.mpf(10) ** -25 * max(1, abs(b)), (case.name, a, b)


def test_suite_size() -> None:
    assert len(CASES) >= 30 and len(WITH_VALUES) >= 20


JACOBIANS = {
    "tanh sigmoid": lambda c, xs: [
        [
            (1 - c.tanh(t) ** 2 + 3 * c.exp(-3 * t) / (1 + c.exp(-3 * t)) ** 2) if i == j else 0
            for j in range(len(xs))
        ]
        for i, t in enumerate(xs)
    ],
    "reduce_logsumexp": lambda c, xs: [[c.exp(t - _lse(c, xs)) for t in xs]],
    "tf.function": lambda c, xs: [[c.exp(t) * (1 + t) for t in xs]],
    "xlogy xdivy xlog1py": lambda c, xs: [
        [
            (c.log(t + 1) + t / (t + 1) + 2 / (2 + t) ** 2 + c.log1p(t) + t / (1 + t))
            if i == j
            else 0
            for j in range(len(xs))
        ]
        for i, t in enumerate(xs)
    ],
}


@pytest.mark.parametrize("name", [k for k, v in JACOBIANS.items() if v is not None])
def test_mp_derivatives_match_closed_forms(name: str) -> None:
    """The mp reference Jacobian (Richardson on mp central differences) to 1e-25 relative."""
    case = next(c for c in CASES if c.name == name)
    t = _target(name)
    assert t.mp_mode() and t.evaluate_mp is not None
    n = case.x.size
    dd = mp_directional_derivatives(t.evaluate_mp, t.x0, np.eye(n), dps=50)
    ctx = make_context(60)
    J = JACOBIANS[name](ctx, [ctx.mpf(float(v)) for v in case.x])
    scale = max(abs(J[i][j]) for i in range(len(J)) for j in range(n))
    worst = max(
        abs(dd.central.value_mp[j, i] - J[i][j]) / (abs(J[i][j]) + 1e-30 * scale)
        for i in range(len(J))
        for j in range(n)
    )
    assert worst <= 1e-25, f"{name}: relative error {mpmath.nstr(worst, 3)}"


def test_mp_values_carry_far_more_than_float64_digits() -> None:
    ctx = make_context(50)
    case = next(c for c in CASES if c.name == "exp expm1")
    for v in _evaluate(case):
        assert abs(v - ctx.mpf(float(v))) > ctx.mpf(10) ** -40  # not a float64 value


def test_float32_constants_enter_exactly_and_float_casts_are_not_applied() -> None:
    """A float32 weight enters exactly; a cast to float32 inside is the identity at 50 digits."""
    ctx = make_context(50)
    x = np.array([0.1, 0.2, 0.3])

    def f(v: Any) -> Any:
        return tf.cast(tf.linalg.matvec(W_CONST, tf.cast(v, tf.float32)), tf.float64) * v[0]

    t = BE.make_target(f, (tf.constant(x),), (0,), Supplied(), 16)
    assert t.mp_mode(), t.mp_unavailable_reason
    y = t.evaluate_mp(x, np.zeros(3), 50)
    for row, a in zip(W32, y, strict=True):
        want = ctx.fsum(
            ctx.mpf(float(w)) * ctx.mpf(s) for w, s in zip(row, x, strict=True)
        ) * ctx.mpf(0.1)
        assert abs(a - want) <= ctx.mpf(10) ** -45 * abs(want)


# ------------------------------------------------------------------------- pg.check


@pytest.mark.parametrize(
    "name", ["Keras Dense model closed over", "tf.function", "softmax", "tf.Variable closed over"]
)
def test_check_with_mp_reference_passes_correct_gradients(name: str) -> None:
    case = next(c for c in CASES if c.name == name)
    report = pg.check(case.f, tf.constant(case.x), reference="mp")
    assert report.verdict == pg.Verdict.PASS and report.ok, str(report)
    assert report.details["reference"]["method"] == "mp"


def test_float32_keras_model_with_mp_reference() -> None:
    """A float32 Keras model closed over: the mp reference runs its captured graph."""
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.layers.Dense(3, activation="sigmoid"), keras.layers.Dense(2)])
    model.build((None, 4))
    before = [w.numpy().copy() for w in model.weights]
    x = tf.constant([0.3, -0.4, 0.8, 0.1], tf.float32)
    report = pg.check(lambda v: tf.nn.softmax(model(v[None]))[0], x, reference="mp")
    assert report.verdict == pg.Verdict.PASS and report.ok, str(report)
    assert report.details["reference"]["method"] == "mp"
    assert all(w.dtype == "float32" for w in model.weights)
    for w, b in zip(model.weights, before, strict=True):
        np.testing.assert_array_equal(w.numpy(), b)


def test_tensorflow_xlogy_gradient_at_zero_is_mismatch_with_mp_reference() -> None:
    """d/dx xlogy(x, 2) = log 2 everywhere; TensorFlow's rule returns 0 at x = 0."""
    two = tf.constant(2.0, tf.float64)
    x = tf.constant([0.0, 1.5], tf.float64)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(tf.math.xlogy(x, two))
    assert tape.gradient(y, x).numpy()[0] == 0.0  # the framework's bug
    report = pg.check(lambda v: tf.math.xlogy(v, two), x, reference="mp")
    assert report.details["reference"]["method"] == "mp"
    assert report.verdict == pg.Verdict.MISMATCH and not report.ok, str(report)
    e = report.entries
    bad = [name for name, v in zip(e.names, e.verdicts(), strict=True) if v == pg.Verdict.MISMATCH]
    assert bad == ["f[0] / x[0]"], bad
    i = e.names.index("f[0] / x[0]")
    assert e.autodiff[i] == 0.0 and abs(e.reference[i] - np.log(2.0)) <= 1e-15


def test_op_without_a_rule_is_named_and_auto_keeps_float64() -> None:
    x = tf.constant([0.3, -0.7, 1.2], tf.float64)

    def f(v: Any) -> Any:
        return tf.math.bessel_i1e(v) + tf.sin(v)

    auto = pg.check(f, x)
    assert auto.verdict == pg.Verdict.PASS and auto.ok, str(auto)
    assert auto.details["reference"]["method"] == "float64"
    mp = pg.check(f, x, reference="mp")
    assert mp.verdict == pg.Verdict.PASS and mp.ok, str(mp)
    assert mp.details["reference"]["method"] == "float64"
    assert "mp reference unavailable" in str(mp) and "'BesselI1e'" in str(mp)


def test_graph_interpreter_raises_naming_every_missing_op() -> None:
    def f(v: Any) -> Any:
        return tf.math.bessel_i1e(v) + tf.math.bessel_i0e(v)

    concrete = tf.function(f).get_concrete_function(tf.TensorSpec((3,), tf.float64))
    graph_def = concrete.graph.as_graph_def()
    with pytest.raises(UnsupportedOperatorError, match="'BesselI0e'.*'BesselI1e'"):
        tf_mp_evaluator(
            graph_def, [t.name for t in concrete.inputs], [t.name for t in concrete.outputs], [(3,)]
        )


def test_auto_uses_a_high_precision_reference_for_small_float64_functions() -> None:
    """ "auto" takes the quad tier (the graph on binary128 arrays); "mp" the graph on
    mpmath numbers."""
    case = next(c for c in CASES if c.name == "tf.function")
    for reference, method in (("auto", "quad"), ("mp", "mp")):
        report = pg.check(case.f, tf.constant(case.x), reference=reference)
        assert report.verdict == pg.Verdict.PASS and report.ok, str(report)
        assert report.details["reference"]["method"] == method


def test_parameters_of_a_float64_keras_model_with_mp_reference() -> None:
    keras.utils.set_random_seed(1)
    model = keras.Sequential(
        [
            keras.layers.Dense(3, activation="tanh", dtype="float64"),
            keras.layers.Dense(1, dtype="float64"),
        ]
    )
    model.build((None, 2))
    x = tf.constant([[0.3, -0.2]], tf.float64)
    report = pg.check(
        lambda m, v: tf.reduce_sum(m(v) ** 2), model, x, wrt="parameters", reference="mp"
    )
    assert report.verdict == pg.Verdict.PASS and report.ok, str(report)
    assert report.details["reference"]["method"] == "mp"


def test_users_case1_float32_closure_with_mp_reference() -> None:
    """Case 1 as written: float32 ``loc`` and ``scale`` closed over; exact gradient -x/scale²."""
    scale = tf.constant(np.random.default_rng(0).uniform(0.5, 1.5, 10).astype(np.float32))
    loc = tf.constant(0.0)
    report = pg.check(
        lambda x: tf.reduce_sum(-((x - loc) ** 2) / (2 * scale**2)), tf.ones(10), reference="mp"
    )
    assert report.verdict == pg.Verdict.PASS and report.ok, str(report)
    assert report.details["reference"]["method"] == "mp"
    exact = -1.0 / scale.numpy().astype(np.float64) ** 2
    np.testing.assert_allclose(report.entries.reference, exact, rtol=1e-15)


def test_control_flow_has_no_rule_yet_and_is_named() -> None:
    x = tf.constant([0.3, 0.2], tf.float64)
    report = pg.check(
        lambda v: tf.cond(tf.reduce_sum(v) > 0, lambda: tf.sin(v), lambda: tf.cos(v)),
        x,
        reference="mp",
    )
    assert report.verdict == pg.Verdict.PASS and report.ok, str(report)
    assert report.details["reference"]["method"] == "float64"
    assert "'StatelessIf'" in str(report)


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
def test_cumprod_at_a_zero_input_is_a_mismatch(dtype):
    """sum(cumprod(x)) = x0 + x0 x1 is a polynomial, smooth everywhere; TensorFlow's
    cumprod gradient divides the product by x (div_no_nan), which gives 0 where an input
    is 0: at (2, 0) it returns (1, 0) where the gradient is (1, 2). Run on mpmath
    numbers at the point, f has no operation at a kink there: MISMATCH, not NONSMOOTH."""
    report = pg.check(lambda x: tf.reduce_sum(tf.math.cumprod(x)), tf.constant([2.0, 0.0], dtype))
    assert report.verdict == pg.Verdict.MISMATCH and not report.ok, str(report)
    np.testing.assert_allclose(report.entries.reference, [1.0, 2.0], rtol=1e-6)
    np.testing.assert_array_equal(report.entries.autodiff, [1.0, 0.0])
