"""The round-off of an mp evaluation, measured by moving the operands of its additions.

A value that is a cancellation of far larger terms rounds to exactly 0 at 50 or 75
digits; the mp reference's error bar must come from what its arithmetic can lose there
(the size of the terms), not from ``|f|`` (0). Closed forms at 400 digits decide.
"""

from __future__ import annotations

import mpmath
import numpy as np

from polygrad.mpexec.context import mp_array, shared_context
from polygrad.reference.mp import QUICK_EXTRA_DIGITS, mp_directional_derivatives
from polygrad.reference.operand_moves import OPERAND_MOVES, moving_operands, rounding_scale

# log_softmax(exp(x))[0] at x = (5.66, 1): a - logsumexp(a, b) with a = e^5.66 = 286 and
# b = e = 2.7, which is -log(1 + e^(b - a)) = -e^-283.5, far below 10^-75 of the terms
POINT = np.array([5.656854152679443, 1.0])


def log_softmax_first(x0: np.ndarray, dx: np.ndarray, dps: int) -> np.ndarray:
    ctx = shared_context(dps)
    x = mp_array(ctx, x0) + mp_array(ctx, dx)
    a, b = ctx.exp(x[0]), ctx.exp(x[1])
    lse = a + ctx.log1p(ctx.exp(b - a))
    out = np.empty(1, dtype=object)
    out[0] = a - lse
    return out


def true_gradient(x: np.ndarray) -> np.ndarray:
    """d/dx of -log(1 + e^(b - a)), a = e^x0, b = e^x1, at 400 digits."""
    with mpmath.workdps(400):
        a, b = mpmath.exp(mpmath.mpf(x[0])), mpmath.exp(mpmath.mpf(x[1]))
        p = mpmath.exp(b - a) / (1 + mpmath.exp(b - a))
        return np.array([float(p * a), float(-p * b)])


def test_the_cancellation_is_exactly_zero_without_moves() -> None:
    digits = 50 + QUICK_EXTRA_DIGITS
    assert log_softmax_first(POINT, np.zeros(2), digits)[0] == 0
    assert OPERAND_MOVES.get() is None


def test_rounding_scale_is_the_size_of_the_cancelling_terms() -> None:
    digits = 50 + QUICK_EXTRA_DIGITS
    f0 = log_softmax_first(POINT, np.zeros(2), digits)
    scale = rounding_scale(log_softmax_first, POINT, digits, f0)
    # the terms are a = 286 and logsumexp = 286: one unit of their rounding, not 0
    assert 1.0 <= scale[0] <= 4 * 286.0
    assert OPERAND_MOVES.get() is None  # and the arithmetic is exact again


def test_rounding_scale_without_cancellation_is_at_most_the_terms() -> None:
    def f(x0: np.ndarray, dx: np.ndarray, dps: int) -> np.ndarray:
        ctx = shared_context(dps)
        x = mp_array(ctx, x0) + mp_array(ctx, dx)
        out = np.empty(1, dtype=object)
        out[0] = x[0] * x[1] + 3
        return out

    x = np.array([1.5, 2.0])
    f0 = f(x, np.zeros(2), 60)
    scale = rounding_scale(f, x, 60, f0)
    assert 0 < scale[0] <= 2 * (1.5 * 2.0 + 3 + 1.5 + 2.0)


def test_a_branch_the_moves_flip_is_not_round_off() -> None:
    def step(x0: np.ndarray, dx: np.ndarray, dps: int) -> np.ndarray:
        ctx = shared_context(dps)
        x = mp_array(ctx, x0) + mp_array(ctx, dx)
        out = np.empty(1, dtype=object)
        out[0] = ctx.mpf(1) if x[0] - 1 > 0 else ctx.mpf(0)
        return out

    x = np.array([1.0])
    f0 = step(x, np.zeros(1), 60)
    with moving_operands(24):
        flipped = [step(x, np.zeros(1), 60)[0] for _ in range(8)]
    assert any(v != f0[0] for v in flipped)  # the moves do reach the comparison
    assert rounding_scale(step, x, 60, f0)[0] == 0  # a jump: not linear in the moves


def test_the_mp_error_bar_covers_a_derivative_lost_to_cancellation() -> None:
    """Both entries are ~1e-123 to 1e-125; every mp value of f near the point is 0. The
    error bar must cover the true derivative (it was 0 +- 0, and the right rule -6e-125
    read as a wrong one)."""
    W = np.eye(2)
    dd = mp_directional_derivatives(log_softmax_first, POINT, W, dps=50)
    true = true_gradient(POINT)
    value, error = dd.central.value[:, 0], dd.central.error[:, 0]
    assert np.all(np.abs(value - true) <= error), (value, error, true)
    assert np.all(error < 1e-30)  # and still far below anything a float64 check uses


def test_a_function_that_raises_on_moved_operands_measures_nothing() -> None:
    def strict(x0: np.ndarray, dx: np.ndarray, dps: int) -> np.ndarray:
        ctx = shared_context(dps)
        x = mp_array(ctx, x0) + mp_array(ctx, dx)
        if x[0] - x[1] != 0:  # the moves make the difference nonzero
            raise ValueError("inputs must be equal")
        out = np.empty(1, dtype=object)
        out[0] = ctx.exp(x[0])
        return out

    x = np.array([0.5, 0.5])
    f0 = strict(x, np.zeros(2), 40)
    assert rounding_scale(strict, x, 40, f0)[0] == 0
    assert OPERAND_MOVES.get() is None
