"""The quick mp reference: one central difference at a step of 2^-80 and 75 digits, the
gap between its one-sided differences deciding whether it can stand."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest

import polygrad as pg
from polygrad.reference.mp import (
    QUICK_EXTRA_DIGITS,
    QUICK_RETRY_FACTOR,
    QUICK_STEP,
    mp_directional_derivatives,
    quick_mp_derivatives,
)

DIGITS = 50 + QUICK_EXTRA_DIGITS  # f(x) is given at the quick difference's digits


def _mp_fn(fn):
    """``evaluate_mp`` of a scalar-per-output function written on mpmath numbers."""

    def evaluate_mp(x0, dx, dps):
        ctx = mpmath.MPContext()  # the numbers keep their context's precision
        ctx.dps = dps
        x = [ctx.mpf(float(a)) + ctx.mpf(float(b)) for a, b in zip(x0, dx, strict=True)]
        return np.array(fn(ctx, x), dtype=object)

    return evaluate_mp


def _smooth(ctx, x):
    return [ctx.sin(x[0]) * x[1] ** 2, ctx.exp(x[0] - x[1]), ctx.log(1 + x[1] ** 2)]


def _smooth_jacobian(x):
    a, b = x
    return np.array(
        [
            [np.cos(a) * b**2, 2 * b * np.sin(a)],
            [np.exp(a - b), -np.exp(a - b)],
            [0.0, 2 * b / (1 + b**2)],
        ]
    )


@pytest.mark.parametrize("seed", range(5))
def test_quick_estimate_is_right_within_its_error_bar(seed):
    rng = np.random.default_rng(seed)
    x0 = rng.uniform(-3, 3, 2)
    W = np.eye(2)
    f0 = _mp_fn(_smooth)(x0, np.zeros(2), DIGITS)
    derivs, settled = quick_mp_derivatives(_mp_fn(_smooth), x0, W, f0, 50)
    assert settled.all()
    assert derivs.central.evaluations == 2 * 2 + 1  # two per direction, and f(x)
    truth = _smooth_jacobian(x0).T  # (d, m)
    with mpmath.workdps(60):
        exact = np.array(
            [
                [mpmath.cos(x0[0]) * mpmath.mpf(x0[1]) ** 2, mpmath.exp(x0[0] - x0[1])],
                [2 * mpmath.mpf(x0[1]) * mpmath.sin(x0[0]), -mpmath.exp(x0[0] - x0[1])],
            ],
            dtype=object,
        )
        err = np.abs(derivs.central.value_mp[:, :2] - exact)
        assert all(
            e <= b for e, b in zip(err.ravel(), derivs.central.error_mp[:, :2].ravel(), strict=True)
        )
        assert all(
            e < 1e-30 * max(1.0, abs(t)) for e, t in zip(err.ravel(), exact.ravel(), strict=True)
        )
    np.testing.assert_allclose(derivs.central.value, truth, rtol=1e-15, atol=1e-300)
    # one-sided derivatives of a smooth function are the derivative too
    np.testing.assert_allclose(derivs.right.value, truth, rtol=1e-15, atol=1e-300)
    np.testing.assert_allclose(derivs.left.value, truth, rtol=1e-15, atol=1e-300)


def test_a_kink_at_the_point_is_not_settled_and_goes_to_the_ladder():
    def kinked(ctx, x):
        return [abs(x[0]) + x[1] ** 3, x[1]]

    x0 = np.array([0.0, 0.5])
    fn = _mp_fn(kinked)
    f0 = fn(x0, np.zeros(2), DIGITS)
    _, settled = quick_mp_derivatives(fn, x0, np.eye(2), f0, 50)
    assert settled.tolist() == [False, True]
    full = mp_directional_derivatives(fn, x0, np.eye(2))
    # the ladder reports the one-sided derivatives of |x| at 0: +1 and -1
    assert full.right.value[0, 0] == pytest.approx(1.0, rel=1e-15)
    assert full.left.value[0, 0] == pytest.approx(-1.0, rel=1e-15)
    assert full.central.value[1, 0] == pytest.approx(0.75, rel=1e-15)


def test_a_kink_closer_than_the_step_is_not_settled():
    """A kink between x and x + h shows as the gap between the one-sided differences;
    closer to x than even the retried step (QUICK_STEP * QUICK_RETRY_FACTOR), no step
    tells it from a kink at x: the ladder reports both sides."""

    def near_kink(ctx, x):
        return [abs(x[0] - ctx.mpf(0.75) * QUICK_STEP * QUICK_RETRY_FACTOR)]

    x0 = np.zeros(1)
    fn = _mp_fn(near_kink)
    _, settled = quick_mp_derivatives(fn, x0, np.eye(1), fn(x0, np.zeros(1), DIGITS), 50)
    assert not settled[0]
    full = mp_directional_derivatives(fn, x0, np.eye(1))
    assert full.right.value[0, 0] == pytest.approx(1.0, rel=1e-15)
    assert full.left.value[0, 0] == pytest.approx(-1.0, rel=1e-15)


def test_a_kink_within_the_quick_step_settles_at_the_retried_step():
    """|x - 6e-25| at 0: the quick step (8e-25) straddles the kink, the retried one
    (8e-37) does not, and gives the derivative at x, -1, without the ladder (whose long
    steps would cross the kink)."""

    def near_kink(ctx, x):
        return [abs(x[0] - ctx.mpf(0.75) * QUICK_STEP)]

    x0 = np.zeros(1)
    fn = _mp_fn(near_kink)
    _, settled = quick_mp_derivatives(fn, x0, np.eye(1), fn(x0, np.zeros(1), DIGITS), 50)
    assert not settled[0]
    full = mp_directional_derivatives(fn, x0, np.eye(1))
    assert full.central.value[0, 0] == -1.0
    assert full.central.step[0, 0] == QUICK_STEP * QUICK_RETRY_FACTOR


def test_a_point_near_the_edge_of_the_domain_settles_without_leaving_it():
    """log1p(-x) at x = 1 - 1e-7: its length scale (1e-7) is below the quick step's
    reach, and the ladder's steps would leave the domain (mp then fails and the check
    fell back to float64 differences, and gave MISMATCH); the retried step settles it
    at the closed form -1 / (1 - x)."""

    def log1p_neg(ctx, x):
        return [ctx.log1p(-x[0])]

    x0 = np.array([1 - 1e-7])
    fn = _mp_fn(log1p_neg)
    full = mp_directional_derivatives(fn, x0, np.eye(1))
    exact = -1 / (1 - mpmath.mpf(x0[0]))
    assert full.central.value[0, 0] == pytest.approx(float(exact), rel=1e-15)
    assert full.central.error[0, 0] <= 1e-15 * abs(float(exact))


def test_a_zero_derivative_with_a_short_length_scale_settles_at_the_retried_step():
    """sqrt(x_0² + 1e-12) + sin(x_1) at (0, 1): smooth, bending over 1e-6 at x_0 = 0,
    where its derivative is exactly 0. The quick step's gap h g'' (4e-19) is not
    settled; the retried step's is, judged against the size the derivatives have over
    all directions (a derivative of 0 alone has none): no ladder, whose steps of 1e-2
    saw the bend as a kink (left -0.99995, right 0.99995, NONSMOOTH)."""

    def eps_norm(ctx, x):
        return [ctx.sqrt(x[0] ** 2 + ctx.mpf(1e-12)) + ctx.sin(x[1])]

    x0 = np.array([0.0, 1.0])
    full = mp_directional_derivatives(_mp_fn(eps_norm), x0, np.eye(2))
    assert abs(full.central.value[0, 0]) <= full.central.error[0, 0] <= 1e-20
    assert full.central.step[0, 0] == QUICK_STEP * QUICK_RETRY_FACTOR
    assert abs(full.right.value[0, 0]) <= 1e-20 and abs(full.left.value[0, 0]) <= 1e-20
    assert full.central.value[1, 0] == pytest.approx(np.cos(1.0), rel=1e-15)


def test_a_smoothed_abs_at_zero_is_a_pass_not_a_kink():
    """The check of that function with its hand-written gradient: PASS, also where
    kinks fail the check (``nonsmooth="fail"``)."""

    def f(x):
        return np.sum(np.sqrt(x**2 + 1e-12))

    def grad(x):
        return x / np.sqrt(x**2 + 1e-12)

    x = np.array([0.0, 1.0])
    report = pg.check(f, x, grad=grad, nonsmooth="fail")
    assert report.verdict is pg.Verdict.PASS and report.ok, report
    np.testing.assert_allclose(report.entries.reference, grad(x), rtol=1e-15, atol=1e-20)


def test_a_kink_near_x_but_beyond_the_step_gives_the_derivative_at_x():
    """|x - 7e-13| at 0: smooth on the quick step's scale, slope -1 there. Its value is
    7e-13 of its slope, so the odd part of the first difference (h) is more than
    MP_TARGET of the values, as a jump's would be: the retried step, where it shrank with
    the step, settles it (no ladder)."""

    def near_kink(ctx, x):
        return [abs(x[0] - ctx.mpf(0.75) * 2.0**-40)]

    x0 = np.zeros(1)
    fn = _mp_fn(near_kink)
    derivs, settled = quick_mp_derivatives(fn, x0, np.eye(1), fn(x0, np.zeros(1), DIGITS), 50)
    assert derivs.central.value[0, 0] == -1.0
    full = mp_directional_derivatives(fn, x0, np.eye(1))
    assert full.central.value[0, 0] == -1.0
    assert full.central.step[0, 0] == QUICK_STEP * QUICK_RETRY_FACTOR


def test_a_length_scale_below_the_step_ratio_goes_to_the_ladder():
    """sin(1e6 x): its gap h g'' is 1e-12 of g', beyond the quick step's reach."""

    def fast(ctx, x):
        return [ctx.sin(ctx.mpf(10) ** 6 * x[0])]

    x0 = np.array([0.3])
    fn = _mp_fn(fast)
    _, settled = quick_mp_derivatives(fn, x0, np.eye(1), fn(x0, np.zeros(1), DIGITS), 50)
    assert not settled[0]
    full = mp_directional_derivatives(fn, x0, np.eye(1))
    with mpmath.workdps(50):
        exact = float(mpmath.mpf(10) ** 6 * mpmath.cos(mpmath.mpf(10) ** 6 * mpmath.mpf(0.3)))
    assert full.central.value[0, 0] == pytest.approx(exact, rel=1e-15)


def test_float64_check_with_the_quick_mp_reference_passes_and_catches_1e_9():
    x = np.linspace(-2.0, 2.0, 10)

    def f(x):
        return np.sum(np.sin(x) * x**2)

    def grad(x):
        return np.cos(x) * x**2 + 2 * x * np.sin(x)

    report = pg.check(f, x, grad=grad)
    assert report.details["reference"]["method"] == "mp"
    assert report.verdict is pg.Verdict.PASS and report.ok
    bad = pg.check(f, x, grad=lambda x: grad(x) * (1 + 1e-9))
    assert bad.verdict is pg.Verdict.MISMATCH


def test_float64_abs_at_zero_is_still_nonsmooth():
    report = pg.check(
        lambda x: np.sum(np.abs(x)), np.array([0.0, 1.0]), grad=np.sign, reference="mp"
    )  # "auto" takes quad where numpy-quaddtype is installed (tests/test_quad.py)
    assert report.details["reference"]["method"] == "mp"
    assert report.verdict is pg.Verdict.NONSMOOTH


def _log_erf_truth() -> float:
    """d/dx log(erf(exp(exp(x)))) at x = 1, at 250 digits (1 - erf(15.2) is 1.5e-102)."""
    with mpmath.workdps(250):
        u = mpmath.exp(mpmath.e)
        d = 2 / mpmath.sqrt(mpmath.pi) * mpmath.exp(-u * u) / mpmath.erf(u) * u * mpmath.e
        return float(d)


def _log_erf(framework: str, factor: float):
    if framework == "torch":
        import torch

        class Erf(torch.autograd.Function):
            @staticmethod
            def forward(ctx, u):
                ctx.save_for_backward(u)
                return torch.erf(u)

            @staticmethod
            def backward(ctx, g):
                (u,) = ctx.saved_tensors
                return g * 2 / np.sqrt(np.pi) * torch.exp(-u * u) * factor

        x = torch.tensor([1.0], dtype=torch.float64)
        return lambda x: torch.log(Erf.apply(torch.exp(torch.exp(x)))).sum(), x
    import jax
    import jax.numpy as jnp

    @jax.custom_jvp
    def erf(u):
        return jax.scipy.special.erf(u)

    erf.defjvp(lambda p, t: (erf(p[0]), 2 / np.sqrt(np.pi) * jnp.exp(-(p[0] ** 2)) * factor * t[0]))
    with jax.enable_x64(True):
        x = jnp.asarray([1.0])
    return lambda x: jnp.sum(jnp.log(erf(jnp.exp(jnp.exp(x))))), x


@pytest.mark.parametrize(
    "framework",
    [pytest.param(fw, marks=pytest.mark.polygrad_backends(fw)) for fw in ("torch", "jax")],
)
@pytest.mark.parametrize("factor", [1.0, 1.0 + 1e-3])
def test_an_output_exactly_0_at_50_digits_is_resolved_at_more(framework, factor):
    """log(erf(exp(exp(x)))) at 1: erf(15.2) is exactly 1 at 50 (and 75) digits, so f is
    exactly 0 on the whole neighbourhood there and its mp differences gave 0 with no error
    at all, against the right rule's 8.5e-99 (MISMATCH). At 200 digits f is -1.5e-102, and
    the reference runs at the digits that resolve it: the right rule PASSes, a rule off by
    1e-3 is MISMATCH."""
    import contextlib

    f, x = _log_erf(framework, factor)
    if framework == "jax":
        import jax

        ctx = jax.enable_x64(True)
    else:
        ctx = contextlib.nullcontext()
    with ctx:
        report = pg.check(f, x)
    np.testing.assert_allclose(report.entries.reference, [_log_erf_truth()], rtol=1e-12)
    expected = pg.Verdict.PASS if factor == 1.0 else pg.Verdict.MISMATCH
    assert report.verdict == expected and report.ok == (factor == 1.0), str(report)
    # the report names the digits the reference ran at, not the 50 asked
    assert report.details.reference.dps == 152, report.details.reference
    assert "mpmath at 152 digits" in str(report)
