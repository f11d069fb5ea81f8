"""Verdicts at the edges, in every framework: exact zeros, saturated float32 and float16
rules, NaN at a kink, extreme magnitudes.

Each test body runs once per framework (the ``backend`` fixture of the polygrad pytest
plugin); NumPy checks a hand-written derivative (``grad=``/``jac=``), the others their
own autodiff. Expected values are closed forms. Planted bugs use a stop-gradient term
whose value is exactly 0 (``c * (x - stop(x))``): it changes the gradient by ``c`` and
the function not at all.
"""

from __future__ import annotations

import math
from typing import Any

import mpmath
import numpy as np
import pytest

import polygrad as pg
from polygrad import Verdict


def stop(backend: Any, x: Any) -> Any:
    """``x`` cut off from the derivative (NumPy's hand-written derivative ignores it)."""
    if backend.name == "torch":
        return x.detach()
    if backend.name == "jax":
        import jax

        return jax.lax.stop_gradient(x)
    if backend.name == "tensorflow":
        import tensorflow as tf

        return tf.stop_gradient(x)
    return x


def sigmoid(backend: Any) -> Any:
    """The framework's own logistic function (its own gradient rule)."""
    if backend.name == "torch":
        import torch

        return torch.sigmoid
    if backend.name == "jax":
        import jax

        return jax.nn.sigmoid
    if backend.name == "tensorflow":
        import tensorflow as tf

        return tf.math.sigmoid
    return lambda x: 1 / (1 + np.exp(-x))


def assert_pass(report: pg.Report) -> None:
    assert report.verdict == Verdict.PASS, str(report)
    assert report.ok


# ---- exact zeros ------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["floor", "ceil", "sign"])
def test_piecewise_constant_functions_away_from_their_jumps_pass(backend, op):
    """floor, ceil and sign at non-integer points: every entry of the Jacobian is exactly 0
    (the off-diagonal ones of an elementwise operator too), the function does not change
    at all over the steps, and autodiff says 0: PASS, not INCONCLUSIVE for want of a
    scale. A gradient of 1e-3 planted on that zero Jacobian is MISMATCH."""
    xp = backend.namespace
    fn = getattr(xp, op)
    x = np.array([0.3, 1.7, -2.4], np.float32)
    zero = np.zeros((3, 3))
    report = backend.check(fn, x, jac=lambda x: zero)
    assert_pass(report)
    assert np.all(report.entries.autodiff == 0) and np.all(report.entries.reference == 0)

    def bad(x):
        return fn(x) + 1e-3 * (x - stop(backend, x))

    planted = backend.check(bad, x, jac=lambda x: zero + 1e-3 * np.eye(3))
    assert planted.verdict == Verdict.MISMATCH


def test_zero_jacobian_checked_by_projections(backend):
    """floor of 20 inputs checked by random projections: every projection of its Jacobian is
    exactly 0 on both sides (PASS); a gradient of 1e-3 planted on it is MISMATCH."""
    xp = backend.namespace
    x = np.random.default_rng(0).uniform(-3, 3, 20).astype(np.float32) + np.float32(0.5)
    zero = np.zeros((20, 20))
    report = backend.check(xp.floor, x, jac=lambda x: zero, strategy="projections")
    assert_pass(report)

    def bad(x):
        return xp.floor(x) + 1e-3 * (x - stop(backend, x))

    planted = backend.check(bad, x, jac=lambda x: 1e-3 * np.eye(20), strategy="projections")
    assert planted.verdict == Verdict.MISMATCH


def _min_max_jacobian(x: np.ndarray) -> np.ndarray:
    """Closed-form Jacobian of ``(x - min x) / (max x - min x)`` (distinct entries)."""
    lo, hi = int(np.argmin(x)), int(np.argmax(x))
    span = x[hi] - x[lo]
    J = np.eye(x.size) / span
    J[:, lo] -= 1 / span
    J[:, hi] -= (x - x[lo]) / span**2
    J[:, lo] += (x - x[lo]) / span**2
    J[[lo, hi]] = 0.0  # the outputs 0 and 1, whatever x is (exactly, not by rounding)
    return J


def test_outputs_that_are_constant_pass(backend):
    """A min-max normalisation in float64: the minimum's output is always 0 and the
    maximum's always 1, so their rows of the Jacobian are exactly 0. A high-precision
    reference gives the maximum's row round-off (~1e-50 from mp, ~1e-26 from quad: the
    product with the reciprocal rounds)
    with an error bar of its own size, which set no scale (every error bar was too coarse
    on it: INCONCLUSIVE); such rows take the Jacobian's scale."""
    xp = backend.namespace

    def f(x):  # as keras.layers.AutoContrast writes it: a product with the reciprocal
        return (x - xp.min(x)) * (1.0 / (xp.max(x) - xp.min(x)))

    x = np.array([0.3, -1.2, 2.5, 0.9, -0.4])
    report = backend.check(f, x, jac=_min_max_jacobian)
    assert_pass(report)
    truth = _min_max_jacobian(x).T.ravel()
    ref, err = report.entries.reference, report.entries.reference_error
    # the exact zeros come back as round-off (about 1e-50 from mp, 1e-26 from quad),
    # each within its error bar, which is far below the Jacobian's scale
    assert np.all(np.abs(ref - truth) <= 1e-12 * np.abs(truth) + err), (ref, err)
    assert np.all(err[truth == 0] <= 1e-20 * np.max(np.abs(truth))), err


def test_clamped_entries_pass(backend):
    """clip to [-1, 1] with some entries clamped (their derivative is exactly 0) and with
    all of them clamped (the whole Jacobian is 0): PASS."""
    xp = backend.namespace

    def f(x):
        return xp.clip(x, -1.0, 1.0)

    for x in (np.array([-2.5, 0.3, 1.7], np.float32), np.array([-2.5, 1.7, 3.2], np.float32)):
        report = backend.check(f, x, jac=lambda x: np.diag((np.abs(x) < 1).astype(float)))
        assert_pass(report)
        np.testing.assert_array_equal(report.entries.reference, np.diag(np.abs(x) < 1).ravel())


@pytest.mark.parametrize("case", ["cos at 0 (f = 2)", "squared residual at its zero (f = 0)"])
def test_stationary_point_of_a_scalar_function_passes(backend, case):
    """A scalar function at a stationary point: its gradient is exactly 0, both by autodiff
    and by the reference. PASS, whether f is nonzero there (sum(cos x) at 0) or is 0 too
    (sum((x - 1)^2) at 1, where nothing but the error bars sets a scale). A gradient that
    is 0 where the truth is not (the residual cut off from autodiff, at x = 1.5) is
    MISMATCH."""
    xp = backend.namespace
    if case.startswith("cos"):
        x = np.zeros(2, np.float32)

        def f(x):
            return xp.sum(xp.cos(x))

        report = backend.check(f, x, grad=lambda x: -np.sin(x))
    else:
        x = np.ones(2, np.float32)

        def f(x):
            return xp.sum((x - 1.0) ** 2)

        report = backend.check(f, x, grad=lambda x: 2 * (x - 1))
    assert_pass(report)
    assert np.all(report.entries.reference == 0)

    def cut(x):  # on the tape only through a zero term: autodiff reads 0
        r = stop(backend, x) - 1.0
        return xp.sum(r * r) + 0.0 * xp.sum(x)

    planted = backend.check(cut, np.full(2, 1.5, np.float32), grad=lambda x: 0 * x)
    assert planted.verdict == Verdict.MISMATCH


def erf(backend: Any) -> Any:
    """The framework's own error function (its own gradient rule)."""
    if backend.name == "torch":
        import torch

        return torch.erf
    if backend.name == "jax":
        from jax.scipy.special import erf as jax_erf

        return jax_erf
    if backend.name == "tensorflow":
        import tensorflow as tf

        return tf.math.erf
    return np.vectorize(math.erf, otypes=[np.float32])


def test_entries_far_below_the_round_off_of_f_pass(backend):
    """erf at 11 and -12 in float32: f is 1 to the last bit of float64 over every step, and
    its derivatives, 2/sqrt(pi) exp(-x^2) = 4.3e-53 and 6.0e-63, underflow float32. Such an
    entry is judged only to the round-off its rule inherits from values of the size of f
    (its tolerance), and a reference far finer than that decides it: PASS, not
    INCONCLUSIVE for an error bar that is wide next to 1e-53. The reference's error bar
    covers the closed form."""
    x = np.array([11.0, -12.0], np.float32)

    def jac(x):
        return np.diag(2 / np.sqrt(np.pi) * np.exp(-(x.astype(np.float32) ** 2)))

    report = backend.check(erf(backend), x, jac=jac)
    assert_pass(report)
    truth = [
        float(2 / mpmath.sqrt(mpmath.pi) * mpmath.exp(-(mpmath.mpf(float(t)) ** 2))) for t in x
    ]
    e = report.entries
    diag = e.reference.reshape(2, 2).diagonal()
    err = e.reference_error.reshape(2, 2).diagonal()
    assert np.all(np.abs(diag - truth) <= err)


# ---- round-off of right rules in low precision --------------------------------------------


def test_saturated_float32_tanh_passes(backend):
    """tanh at 8, 9 and -8.5 in float32: the rule 1 - t^2 reads t = tanh(x) rounded one ulp
    from 1, and is off by up to about 2 eps |t| (50% at 9), while its float64 evaluation
    agrees with the reference. That is the round-off of evaluating a right rule from a
    rounded intermediate of the size of f: PASS, not UNSTABLE. The same rule 1e-3 too large
    is MISMATCH."""
    xp = backend.namespace
    x = np.array([8.0, 9.0, -8.5], np.float32)

    def jac(x):
        t = np.tanh(x)
        return np.diag(1 - t * t)  # in float32, as the frameworks compute it

    report = backend.check(xp.tanh, x, jac=jac)
    assert_pass(report)
    truth = 1 / np.cosh(x.astype(np.float64)) ** 2
    diag = report.entries.reference.reshape(3, 3).diagonal()
    np.testing.assert_allclose(diag, truth, rtol=1e-6)

    def bad(x):
        t = xp.tanh(x)
        return t + 1e-3 * (t - stop(backend, t))

    planted = backend.check(bad, x, jac=lambda x: jac(x) * (1 + 1e-3))
    assert planted.verdict == Verdict.MISMATCH


@pytest.mark.parametrize("dtype, x", [("float32", [15.0, -15.0, 12.0]), ("float16", [8.0, -6.0])])
def test_saturated_sigmoid_passes(backend, dtype, x):
    """The logistic function at saturating inputs, float32 and float16: its rule s (1 - s)
    reads s rounded near 1. PASS; the reference is the closed form s (1 - s) in float64."""
    fn = sigmoid(backend)
    x = np.array(x, dtype)

    def jac(x):
        s = 1 / (1 + np.exp(-x))
        return np.diag(s * (1 - s))

    report = backend.check(fn, x, jac=jac)
    assert_pass(report)
    x64 = x.astype(np.float64)
    s = 1 / (1 + np.exp(-x64))
    diag = report.entries.reference.reshape(x.size, x.size).diagonal()
    np.testing.assert_allclose(diag, s * (1 - s), rtol=1e-4)


def test_cancellation_inherited_from_f_itself_passes(backend):
    """x - sin(x) at 1e-3 in float32: f is 1.7e-10, made from intermediates of size 1e-3,
    and keeps only about 70% of its value in float32; its rule 1 - cos(x) loses less (about
    5%). The gradient loses no more digits than f itself: PASS, with the hidden
    cancellation named. The same rule 1e-3 too large is MISMATCH (its float64 evaluation
    decides)."""
    xp = backend.namespace
    x = np.array([1e-3], np.float32)

    def f(x):
        return xp.sum(x - xp.sin(x))

    report = backend.check(f, x, grad=lambda x: 1 - np.cos(x))
    assert_pass(report)
    assert any("hidden cancellation" in n for n in report.notes)
    assert "hidden cancellation, see the note" in str(report).splitlines()[0]
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(report.entries.reference, 1 - np.cos(x64), rtol=1e-6)
    h = report.details.hidden_cancellation
    truth = float(mpmath.mpf(float(x64[0])) - mpmath.sin(mpmath.mpf(float(x64[0]))))
    assert h.accurate == pytest.approx(truth, rel=1e-6)  # f at the point, in float64
    assert h.relative_error == pytest.approx(abs(h.value - truth) / truth, rel=1e-6)
    assert 0.05 < h.relative_error < 1 and report.details["hidden_cancellation"]["source"]

    def bad(x):
        return f(x) + 1e-3 * xp.sum((1 - xp.cos(x)) * (x - stop(backend, x)))

    planted = backend.check(bad, x, grad=lambda x: (1 - np.cos(x)) * (1 + 1e-3))
    assert planted.verdict == Verdict.MISMATCH


def test_cancellation_of_the_rules_own_making_is_unstable(backend):
    """(1 - cos x) / x^2 at x = 1e-2 in float32: f keeps all but the last 3 bits (relative
    error ~2e-4), while its rule sin(x)/x^2 - 2 (1 - cos x)/x^3 subtracts two terms of
    about 100 to get -8.3e-4 and loses every digit. Far more digits lost than f's own
    round-off explains, by a right rule (its float64 evaluation agrees): UNSTABLE."""
    xp = backend.namespace
    x = np.array([1e-2], np.float32)

    def grad(x):  # in the dtype of x, as autodiff computes it
        return np.sin(x) / x**2 - 2 * (1 - np.cos(x)) / x**3

    report = backend.check(lambda x: xp.sum((1 - xp.cos(x)) / x**2), x, grad=grad)
    assert report.verdict == Verdict.UNSTABLE and not report.ok, str(report)
    with mpmath.workdps(40):
        a = mpmath.mpf(float(x[0]))
        truth = float((a * mpmath.sin(a) - 2 * (1 - mpmath.cos(a))) / a**3)
    assert report.entries.reference[0] == pytest.approx(truth, rel=1e-6)


def clip_of_max(backend: Any) -> Any:
    """``clip(max(x), -2, 1)`` with the framework's own max and clip."""
    if backend.name == "torch":
        import torch

        return lambda x: torch.clamp(torch.max(x), -2.0, 1.0)
    if backend.name == "tensorflow":
        import tensorflow as tf

        return lambda x: tf.clip_by_value(tf.reduce_max(x), -2.0, 1.0)
    xp = backend.namespace
    return lambda x: xp.clip(xp.max(x), -2.0, 1.0)


def test_kink_hidden_from_every_axis_is_nonsmooth(backend):
    """clip(max(x), -2, 1) at the tie x = (1, 1): f is flat along each axis (both partial
    derivatives exist and are 0) but falls with slope 1 along -(1, 1), so f has no
    derivative there, and autodiff's generalized derivative ((0.5, 0.5), (1, 0), ...)
    differs from the partials. NONSMOOTH (ok under the default nonsmooth="allow"), with
    the one-sided derivatives along the diagonal named; at x = (0.5, 0.2), where f is
    smooth, a rule 1e-3 too large is still MISMATCH."""
    fn = clip_of_max(backend)
    x = np.array([1.0, 1.0], np.float32)
    onehot = np.array([1.0, 0.0])
    report = backend.check(fn, x, grad=lambda x: onehot)
    assert report.verdict == Verdict.NONSMOOTH and report.ok, str(report)
    np.testing.assert_array_equal(report.entries.reference, 0.0)
    note = next(n for n in report.notes if "no single input shows" in n)
    assert "left derivative is 1 and its right derivative 0" in note
    assert not backend.check(fn, x, grad=lambda x: onehot, nonsmooth="fail").ok

    def bad(x):
        return fn(x) + 1e-3 * (x[0] - stop(backend, x)[0])

    smooth = np.array([0.5, 0.2], np.float32)
    planted = backend.check(bad, smooth, grad=lambda x: onehot * (1 + 1e-3))
    assert planted.verdict == Verdict.MISMATCH, str(planted)


# ---- NaN at a kink ------------------------------------------------------------------------


def test_norm_at_the_origin_is_nonsmooth(backend):
    """The Euclidean norm sqrt(sum(x^2)) at x = 0: every direction is a kink (left
    derivative -1, right +1 along each coordinate) and autodiff returns NaN (0 / 0).
    NONSMOOTH with the NaN named; ok under nonsmooth='allow', not under 'within' (a NaN
    lies between no one-sided derivatives)."""
    xp = backend.namespace
    x = np.zeros(3, np.float32)

    def norm(x):
        return xp.sqrt(xp.sum(x * x))

    def grad(x):
        with np.errstate(invalid="ignore"):
            return x / np.sqrt(np.sum(x * x))

    report = backend.check(norm, x, grad=grad)
    assert report.verdict == Verdict.NONSMOOTH and report.ok, str(report)
    e = report.entries
    assert np.all(np.isnan(e.autodiff))
    np.testing.assert_allclose(e.left, -1.0, rtol=1e-6)
    np.testing.assert_allclose(e.right, 1.0, rtol=1e-6)
    assert "autodiff returned NaN at this kink" in str(report)
    headline = str(report).splitlines()[0]
    assert "autodiff returned NaN or Inf at 3 of them" in headline, headline
    within = backend.check(norm, x, grad=grad, nonsmooth="within")
    assert within.verdict == Verdict.NONSMOOTH and not within.ok


def test_where_sqrt_trap_at_a_smooth_point_stays_nonfinite(backend):
    """sum(where(x > 0, sqrt(x), 0)) at x = -1: f is 0 around it (smooth, derivative 0),
    but the gradient of the branch not taken, 0 * 1/(2 sqrt(-1)), is NaN: the classic
    where/sqrt NaN trap, NONFINITE on that entry (NumPy's chain rule as written, PyTorch,
    JAX); x = 4 is PASS (1/4). TensorFlow's gradient of this where is 0 there, with no NaN:
    PASS."""
    xp = backend.namespace
    x = np.array([-1.0, 4.0], np.float32)

    def f(x):
        return xp.sum(xp.where(x > 0, xp.sqrt(x), 0.0 * x))

    def grad(x):
        with np.errstate(invalid="ignore"):
            return (x > 0) * 0.5 / np.sqrt(x)

    report = backend.check(f, x, grad=grad)
    trap = backend.name != "tensorflow"
    assert np.isnan(report.entries.autodiff[0]) == trap
    expected = Verdict.NONFINITE if trap else Verdict.PASS
    assert report.verdict == expected, str(report)
    assert report.entries.verdicts() == [expected, Verdict.PASS]
    assert report.entries.reference.tolist() == [0.0, pytest.approx(0.25, rel=1e-7)]


# ---- extreme magnitudes -------------------------------------------------------------------


def test_max_over_inputs_from_subnormal_to_1e300(backend):
    """max(x) for x = [1e-310, 1e300, 3, -1e-300] (float64): the gradient is [0, 1, 0, 0].
    f = 1e300 does not change at all when the other inputs move by steps of their own
    size: their reference derivatives are exactly 0. For the tiny inputs no float64
    difference can make the error bar finite (an ulp of 1e300 over a step of 1e-300):
    not NONFINITE (both sides are finite), INCONCLUSIVE, with the reason in the notes.
    For the input 3 it is finite (an ulp of 1e300 over a step of 0.06), and far below
    the round-off of values of the size of f, to which such an entry is judged: PASS,
    as is the 1e300 entry. A rule 1e-3 off on it is MISMATCH."""
    xp = backend.namespace
    x = np.array([1e-310, 1e300, 3.0, -1e-300])
    onehot = np.array([0.0, 1.0, 0.0, 0.0])
    report = backend.check(xp.max, x, grad=lambda x: onehot)
    e = report.entries
    assert e.verdicts() == [Verdict.INCONCLUSIVE, Verdict.PASS, Verdict.PASS, Verdict.INCONCLUSIVE]
    # far below the round-off of f (1e300 eps / 3): the high-precision reference's own
    # (quad: ~1e-25 of the values; mp: ~1e-30)
    assert np.isfinite(e.reference_error[2]) and e.reference_error[2] < 1e-22 * 1e300
    assert report.verdict == Verdict.INCONCLUSIVE
    assert e.reference[1] == pytest.approx(1.0, rel=1e-12)
    np.testing.assert_array_equal(e.reference[[0, 2, 3]], 0.0)
    assert any("unbounded reference error bar" in n for n in report.notes)

    def bad(x):
        return xp.max(x) + 1e-3 * (x[1] - stop(backend, x)[1])

    planted = backend.check(bad, x, grad=lambda x: onehot * (1 + 1e-3))
    assert planted.verdict == Verdict.MISMATCH


# ---- hidden cancellation (known limit) ------------------------------------------------------


def cross_entropy(backend: Any, target: int, dtype: str) -> Any:
    """The framework's own softmax cross-entropy of a (1, k) logits row, as users call it."""
    if backend.name == "torch":
        import torch
        import torch.nn.functional as F

        t = torch.tensor([target])
        return lambda z: F.cross_entropy(z, t)
    if backend.name == "jax":
        import jax

        return lambda z: -jax.nn.log_softmax(z)[0, target]
    if backend.name == "tensorflow":
        import keras
        import tensorflow as tf

        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, dtype=dtype)
        t = tf.constant([target])
        return lambda z: loss(t, z)
    return lambda z: z.max() + np.log(np.sum(np.exp(z - z.max()))) - z[0, target]


def truth_of(z: np.ndarray) -> np.ndarray:
    """``softmax(z) - onehot(0)`` of a (1, k) row at 50 digits, rounded to float64."""
    with mpmath.workdps(50):
        e = [mpmath.exp(mpmath.mpf(float(v))) for v in np.ravel(z)]
        p = [v / sum(e) for v in e]
        p[0] -= 1
        return np.array([float(v) for v in p])


def softmax_minus_onehot(z: np.ndarray, target: int) -> np.ndarray:
    """The cross-entropy's gradient as the frameworks compute it, in the dtype of ``z``."""
    p = np.exp(z - z.max())
    p = p / p.sum()
    p[0, target] -= 1
    return p


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cross_entropy_with_a_dominant_target_logit_passes(backend, dtype):
    """Softmax cross-entropy at logits [[40, 3, -5, 12]], target 0: the loss is ~6.9e-13,
    computed as 40 + log(1 + e^-28) - 40, so f itself is rounded at the size of 40 (no
    correct digit in float32, about 2 in float64), and the rule p_0 - 1 at the size of
    p_0 = 1. The reference (mp where the function runs on mpmath numbers) agrees with the
    closed form p_j - [j = 0]; the rule loses no more than f itself: PASS in every
    framework's own loss, with the hidden cancellation named. In float64 the rule p_0 - 1
    itself loses 4 of its 16 digits: re-executed on mpmath numbers (the code's own VJP
    program, or the NumPy rule) it agrees with the reference, so that loss is round-off of a
    right rule: PASS. A rule 10% off in that entry (beyond what f's own digits can hide) is
    MISMATCH, and in float64 so is one 1e-6 off, which the mp evaluation of the rule shows."""
    z = np.array([[40.0, 3.0, -5.0, 12.0]], dtype)
    fn = cross_entropy(backend, 0, dtype)
    report = backend.check(fn, z, grad=lambda z: softmax_minus_onehot(z, 0))
    assert_pass(report)
    if dtype == "float32":
        assert any("hidden cancellation" in n for n in report.notes)
        # the float64 rule is judged to the digits f keeps in float64 (4 of 16 lost through
        # log(1 + e^-28), 14 through 40 + ... - 40 as the NumPy row writes it), which
        # leaves the 10% plant below beyond twice its tolerance
        assert any("loses digits in float64 too" in n for n in report.notes)
    else:
        # float64 code's own rule p_0 - 1 loses 4 of its 16 digits (off by 7.8e-17, 1.1e-4
        # of the entry); the rule re-executed on mpmath numbers agrees with the reference,
        # so that is round-off of a right rule, within what f itself loses
        assert any("mpmath numbers" in n and "agrees with the reference" in n
                   for n in report.notes), report.notes  # fmt: skip
        assert abs(report.entries.autodiff[0] - truth_of(z)[0]) > 1e-5 * abs(truth_of(z)[0])
    assert np.all(report.entries.tolerance64[[0, 3]] < 0.05 * np.abs(truth_of(z)[[0, 3]]))
    with mpmath.workdps(50):
        e = [mpmath.exp(mpmath.mpf(float(v))) for v in z[0]]
        truth = [float(v / sum(e)) for v in e]
        truth[0] = float(e[0] / sum(e) - 1)
    ref = report.entries.reference
    np.testing.assert_allclose(ref[[0, 3]], [truth[0], truth[3]], rtol=1e-6)

    # 10% off, beyond what f's own digits can hide; in float64 also 1e-6 of the entry off,
    # 100 times less than the float64 rule's own round-off there: its evaluation on mpmath
    # numbers shows it
    for off in [0.1] if dtype == "float32" else [0.1, 1e-6]:

        def bad(z, off=off):
            y = fn(z)
            return y - off * truth[0] * (z[0, 0] - stop(backend, z)[0, 0])

        def bad_grad(z, off=off):
            g = softmax_minus_onehot(z, 0)
            g[0, 0] -= off * truth[0]
            return g

        planted = backend.check(bad, z, grad=bad_grad)
        assert planted.verdict == Verdict.MISMATCH, str(planted)


@pytest.mark.polygrad_backends("torch", "jax")
def test_entries_in_doubt_are_re_examined_with_mp(backend):
    """erfc at -6 and 7 in float32: its derivatives, -2/sqrt(pi) exp(-x^2), are -2.6e-16
    and -5.9e-22, and float64 differences leave two entries INCONCLUSIVE. The function
    runs on mpmath numbers, so the entries in doubt are re-examined with mp before any
    verdict in doubt is given: PASS, with the closed-form values, and a note naming the
    re-examination. A rule 1e-3 too large is MISMATCH, decided by mp."""
    if backend.name == "torch":
        import torch

        erfc = torch.special.erfc
    else:
        from jax.scipy.special import erfc
    x = np.array([-6.0, 7.0], np.float32)
    report = backend.check(erfc, x)
    assert_pass(report)
    assert report.details["escalation"]["reference"] == "mp"
    assert any("re-examined with mp" in n for n in report.notes)
    truth = [
        float(-2 / mpmath.sqrt(mpmath.pi) * mpmath.exp(-(mpmath.mpf(float(v)) ** 2))) for v in x
    ]
    np.testing.assert_allclose(report.entries.reference.reshape(2, 2).diagonal(), truth, rtol=1e-6)

    def bad(x):
        y = erfc(x)
        return y + 1e-3 * (y - stop(backend, y))

    planted = backend.check(bad, x)
    assert planted.verdict == Verdict.MISMATCH
    assert planted.details["escalation"]["decided_by"]["mp"]
