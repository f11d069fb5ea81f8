"""The quad-precision reference (numpy-quaddtype): closed forms, verdicts, fallbacks."""

from __future__ import annotations

import importlib.util
import math

import mpmath
import numpy as np
import pytest

import polygrad as pg
from polygrad.backends import _quad_eval
from polygrad.reference import quad as quadref
from polygrad.reference.quad import quad_differences, quick_quad_derivatives

needs_quad = pytest.mark.skipif(
    importlib.util.find_spec("numpy_quaddtype") is None, reason="numpy-quaddtype not installed"
)

RNG = np.random.default_rng(0)
W8 = RNG.normal(size=(8, 10))
X10 = RNG.uniform(-2.0, 2.0, 10)


def log_softmax_loss(x: np.ndarray) -> np.ndarray:
    z = W8 @ np.tanh(x)
    m = np.max(z)
    return (z - m - np.log(np.sum(np.exp(z - m))))[3]


def log_softmax_grad(x: np.ndarray) -> np.ndarray:
    z = W8 @ np.tanh(x)
    p = np.exp(z - z.max())
    p /= p.sum()
    e = -p
    e[3] += 1.0
    return (W8.T @ e) * (1.0 - np.tanh(x) ** 2)


def _log_softmax_grad_mp(x: np.ndarray) -> list[mpmath.mpf]:
    t = [mpmath.tanh(mpmath.mpf(v)) for v in x]
    z = [mpmath.fsum(mpmath.mpf(W8[i, j]) * t[j] for j in range(10)) for i in range(8)]
    s = mpmath.fsum(mpmath.exp(v) for v in z)
    e = [(1 if i == 3 else 0) - mpmath.exp(z[i]) / s for i in range(8)]
    return [mpmath.fsum(mpmath.mpf(W8[i, j]) * e[i] for i in range(8)) * (1 - t[j] ** 2)
            for j in range(10)]  # fmt: skip


def _rows(f):
    """``evaluate_quad`` of a NumPy function of one vector."""
    return lambda X: np.stack([np.atleast_1d(f(row)) for row in X])


def _elementwise(mf):
    return lambda x: [mpmath.diff(mf, mpmath.mpf(v)) for v in x]


CLOSED_FORMS = {
    "exp": (np.exp, _elementwise(mpmath.exp), np.array([0.3, -1.2, 2.5])),
    "sin*exp": (
        lambda x: np.sin(x) * np.exp(x),
        lambda x: [mpmath.exp(v) * (mpmath.sin(v) + mpmath.cos(v)) for v in map(mpmath.mpf, x)],
        np.array([0.3, -1.2, 2.5]),
    ),
    "log1p": (
        np.log1p,
        lambda x: [1 / (1 + mpmath.mpf(v)) for v in x],
        np.array([0.3, -0.6, 2.5]),
    ),
    "tanh": (
        np.tanh,
        lambda x: [1 - mpmath.tanh(mpmath.mpf(v)) ** 2 for v in x],
        np.array([0.3, -1.2, 0.9]),
    ),
    "log_softmax": (log_softmax_loss, _log_softmax_grad_mp, X10),
}


@needs_quad
@pytest.mark.parametrize("name", sorted(CLOSED_FORMS))
def test_quad_differences_match_closed_forms(name: str) -> None:
    """Coordinate derivatives to ~1e-25 of the Jacobian's scale (measured: 4e-27 to 2.2e-25),
    inside their error bars."""
    mpmath.mp.dps = 50
    f, exact_of, x = CLOSED_FORMS[name]
    s = 2.0 ** np.round(np.log2(np.abs(x)))
    W = np.diag(s)
    q = quad_differences(_rows(f), x, W)
    dd, settled = quick_quad_derivatives(_rows(f), x, W)
    exact = exact_of(x)
    m = q.central.shape[1]
    for k in range(x.size):
        i = k if m == x.size else 0  # elementwise: output k; a scalar loss: output 0
        got = mpmath.mpf(str(q.central[k, i]))
        want = exact[k] * mpmath.mpf(s[k])
        scale = max(abs(v * mpmath.mpf(sk)) for v, sk in zip(exact, s, strict=True))
        err = abs(got - want)
        assert err <= 5e-25 * scale, (k, float(err / scale))
        # the error bar covers it (str() of a quad number has 34 digits)
        assert err <= dd.central.error_mp[k, i] + 1e-33 * scale
    assert settled.all()


@needs_quad
def test_quad_reference_passes_right_numpy_gradient() -> None:
    r = pg.check(log_softmax_loss, X10, grad=log_softmax_grad)
    assert r.verdict == pg.Verdict.PASS and r.ok
    assert r.details.reference.method == "quad"
    assert np.max(r.entries.reference_error / np.abs(r.entries.reference)) < 1e-15


@needs_quad
def test_quad_finds_a_bug_float64_differences_cannot_see() -> None:
    """A gradient wrong by 1e-12 relative: beyond float64 differences' resolution here (they
    PASS it), far beyond quad's; mp, re-examining the entries, agrees."""

    def bad(x: np.ndarray) -> np.ndarray:
        return log_softmax_grad(x) * (1.0 + 1e-12)

    r64 = pg.check(log_softmax_loss, X10, grad=bad, reference="float64")
    assert r64.verdict == pg.Verdict.PASS
    r = pg.check(log_softmax_loss, X10, grad=bad)
    assert r.verdict == pg.Verdict.MISMATCH and not r.ok
    assert r.details.reference.method == "quad"


@needs_quad
def test_kink_at_the_point_is_nonsmooth_on_quad() -> None:
    """abs at 0: the quad gap ``R_2 - L_2`` leaves that direction to mp's ladder."""
    x = X10.copy()
    x[2] = 0.0
    r = pg.check(lambda x: np.sum(np.abs(x)), x, grad=np.sign)
    assert r.verdict == pg.Verdict.NONSMOOTH
    assert r.details.reference.method == "quad"
    assert any("did not settle 1 of 10" in n for n in r.details.notes)
    dd, settled = quick_quad_derivatives(_rows(np.abs), x[:3], np.eye(3))
    assert settled.tolist() == [True, True, False]
    assert dd.right.value[2, 2] == pytest.approx(1.0) and dd.left.value[2, 2] == pytest.approx(-1.0)


def _dot_loss(x: np.ndarray) -> np.ndarray:
    return np.sum(np.exp(np.dot(W8, np.tanh(x))))


def _dot_grad(x: np.ndarray) -> np.ndarray:
    return (W8.T @ np.exp(W8 @ np.tanh(x))) * (1.0 - np.tanh(x) ** 2)


@needs_quad
@pytest.mark.parametrize(
    ("f", "grad", "why"),
    [
        (_dot_loss, _dot_grad, "np.dot is not among the array functions vetted"),
        (lambda x: np.einsum("ij,j->i", W8, np.tanh(x)).sum(),
         lambda x: W8.sum(axis=0) * (1.0 - np.tanh(x) ** 2), "np.einsum"),
        (lambda x: np.sum(np.array([np.exp(float(v)) for v in x])), np.exp,
         "returned float64 for quad input"),
        # quad in, quad out, float64 accuracy inside: math.erf of each element
        (lambda x: np.sum(np.vectorize(math.erf, otypes=[x.dtype])(x)),
         lambda x: 2 / np.sqrt(np.pi) * np.exp(-x * x), "do not follow a move"),
    ],
)  # fmt: skip
def test_function_off_quad_falls_back_with_a_note(f, grad, why: str) -> None:
    r = pg.check(f, X10, grad=grad)
    assert r.verdict == pg.Verdict.PASS and r.ok
    assert r.details.reference.method != "quad"
    assert any("quad-precision reference is unavailable" in n and why in n
               for n in r.details.notes)  # fmt: skip


@needs_quad
def test_a_small_change_through_a_float64_function_is_not_taken_for_quad() -> None:
    """tanh(erf(sum(sqrt(softplus(x) + 1)))) with math.erf: erf's argument near 4, its
    derivative 1.5e-8, so float64 moves of 2^-20 and 2^-12 change f by fewer than 1e4
    ulps and confirmed nothing; tanh adds quad digits to erf's float64 values, so they
    were off float64's grid. The quad reference was taken, and its differences (0, the
    float64 erf not moving) called the right rule MISMATCH; now quad is refused."""
    erf = np.vectorize(math.erf, otypes=[object])

    def f(x: np.ndarray) -> np.ndarray:
        s = np.sum(np.sqrt(np.logaddexp(0.0, x) + 1.0))
        return np.tanh(erf(s).astype(x.dtype))

    x = np.array([0.2679433656340733, 0.0010568327501496153, -0.01996509310640015])
    evaluate64 = lambda X: np.array([[f(v)] for v in X])  # noqa: E731
    evaluate_quad = lambda X: np.array([[f(v)] for v in X])  # noqa: E731
    assert not _quad_eval.follows_fine_moves(evaluate_quad, evaluate64, x)

    def grad(x: np.ndarray) -> np.ndarray:
        r = np.sqrt(np.logaddexp(0.0, x) + 1.0)
        s = np.sum(r)
        outer = (1 - np.tanh(math.erf(s)) ** 2) * 2 / math.sqrt(math.pi) * math.exp(-s * s)
        return outer / (1 + np.exp(-x)) / (2 * r)

    report = pg.check(f, x, grad=grad)
    assert report.details.reference.method != "quad"
    assert report.verdict != pg.Verdict.MISMATCH, str(report)


@needs_quad
def test_quad_value_disagreeing_with_float64_is_refused() -> None:
    """``@`` with a transposed quad operand ignores its strides in numpy-quaddtype 1.0.0:
    the value check at x refuses the quad evaluation, mp decides."""
    A = np.random.default_rng(1).normal(size=(2, 10))

    def f(x: np.ndarray) -> np.ndarray:
        M = np.outer(np.tanh(x), A[0])  # quad (10, 10)
        return np.sum(M.T @ A[1])

    def grad(x: np.ndarray) -> np.ndarray:
        return (1.0 - np.tanh(x) ** 2) * A[1] * np.sum(A[0])

    r = pg.check(f, X10, grad=grad)
    assert r.ok and r.details.reference.method == "mp"
    assert any("differs from its float64 value" in n for n in r.details.notes)


def test_without_numpy_quaddtype_mp_runs_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(quadref, "quad_dtype", lambda: None)
    monkeypatch.setattr(_quad_eval, "quad_dtype", lambda: None)
    r = pg.check(log_softmax_loss, X10, grad=log_softmax_grad)
    assert r.verdict == pg.Verdict.PASS and r.ok
    assert r.details.reference.method == "mp"
    assert any("numpy-quaddtype is not installed" in n for n in r.details.notes)
