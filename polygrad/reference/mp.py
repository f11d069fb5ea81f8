"""High-precision directional derivatives through mpmath.

When a function can be evaluated on mpmath numbers (see
:mod:`polygrad.backends.mpmath`), the same central-difference ladder and
Richardson tableau as in float64 run at ``dps`` decimal digits: the points
``x + h w`` are formed exactly, the differences lose no digits to
cancellation that matter, and the error bar is set by the tableau's
truncation estimate and a noise level of a few units in the last of ``dps``
digits. At 50 digits this gives derivatives good to far beyond float64
(≲ 1e-25 relative for smooth functions).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .differences import DirectionalDerivatives, _jumps, _tableaus
from .richardson import Estimate, step_ladder

__all__ = ["mp_directional_derivatives"]

MpFn = Callable[[np.ndarray, np.ndarray, int], np.ndarray]


def mp_directional_derivatives(
    evaluate_mp: MpFn,
    x0: np.ndarray,
    W: np.ndarray,
    dps: int = 50,
    h_max: float = 2.0**-4,
    levels: int = 14,
) -> DirectionalDerivatives:
    """Estimate ``J w_k`` at ``dps`` digits for every direction ``w_k``.

    Parameters
    ----------
    evaluate_mp : callable
        ``(x0, dx, dps) -> y``: the function at ``x0 + dx`` on mpmath numbers,
        ``y`` an object array ``(m,)``.
    x0 : ndarray, shape (n,)
        The point (float64).
    W : ndarray, shape (d, n)
        Directions.
    dps : int
        Decimal digits of the mpmath arithmetic.
    h_max : float
        Largest step, a power of two.
    levels : int
        Number of steps (ratio 2).

    Returns
    -------
    DirectionalDerivatives
        With ``method == "mp"``; values are rounded to float64, error bars
        include that rounding.
    """
    steps = step_ladder(h_max, levels)
    f0 = evaluate_mp(x0, np.zeros_like(x0), dps)
    m = f0.size
    d = W.shape[0]
    Y = np.empty((d, levels, 2, m), dtype=object)
    for k in range(d):
        for i, h in enumerate(steps):
            Y[k, i, 0] = evaluate_mp(x0, h * W[k], dps)
            Y[k, i, 1] = evaluate_mp(x0, -h * W[k], dps)
    f0_float = np.array([float(v) for v in f0])
    unit = 10.0 ** (-dps)
    sigma = np.broadcast_to(10.0 * unit * np.maximum(np.abs(f0_float), 1e-300), (d, m)).copy()
    c, r, l = _tableaus(Y, f0, steps, sigma, unit)
    jump_r, sgn_r = _jumps(Y, f0, sigma, 0, r, unit)
    jump_l, sgn_l = _jumps(Y, f0, sigma, 1, l, unit)
    evals = 2 * d * levels + 1
    f64_eps = np.finfo(np.float64).eps

    def est(t, jump=None, sign=None) -> Estimate:
        value_mp = np.asarray(t.value, dtype=object)
        value = np.array([float(v) for v in value_mp.ravel()]).reshape(t.error.shape)
        # rounding the mp value to float64 adds at most half an ulp
        error = t.error + 0.5 * f64_eps * np.abs(value)
        if jump is not None:
            with np.errstate(invalid="ignore"):
                value = np.where(jump, sign * np.inf, value)
                error = np.where(jump, np.inf, error)
        return Estimate(
            value=value,
            error=error,
            step=steps[np.minimum(t.level, levels - 1)],
            noise=sigma.copy(),
            method="mp",
            evaluations=evals,
            value_mp=value_mp,
            error_mp=t.error,
        )

    return DirectionalDerivatives(
        central=est(c),
        right=est(r, jump_r, sgn_r),
        left=est(l, jump_l, sgn_l),
        jump_right=jump_r,
        jump_left=jump_l,
    )
