"""Curvature and round-off of a function along a direction: the two sides of the V-curve.

A plain central difference with step ``h`` along ``w`` has truncation error
``|g'''(0)| h² / 6`` and round-off error ``σ / (√2 h)``, where
``g(t) = f(x + t w)`` and ``σ`` is the noise of ``f``. This module estimates
both ingredients: :func:`rounding_noise` (ECnoise with a floor for the
rounding of the result) and :func:`derivative_coefficients` (``g''`` and
``g'''`` by Richardson extrapolation, with error bars). Used by
:func:`polygrad.sweep` and by the round-off explanation of
:func:`polygrad.check`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from .differences import evaluate_ladder
from .noise import estimate_noise
from .richardson import neville, step_ladder

__all__ = ["COEFFICIENT_LEVELS", "derivative_coefficients", "rounding_noise"]

COEFFICIENT_LEVELS = 14
"""Steps ``2^-1 ... 2^-14`` (in units of the direction) used for ``g''`` and ``g'''``."""


def rounding_noise(
    fn: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    W: np.ndarray,
    f0: np.ndarray,
    eps: float,
    step: float,
) -> np.ndarray:
    """Noise standard deviation of ``fn`` along each direction, ``(d, m)``, never below rounding.

    ECnoise's estimate where it detects noise (it may be below ``eps |f|``: a
    function whose last operation rounds contributes about ``ulp(f) / √12``);
    the rounding of the result alone, ``ulp(f) / √12`` (uniform rounding
    error), as a lower bound and where ECnoise finds the function constant at
    the sampling resolution (code 2); the conservative ``eps |f|`` where the
    sampling step was too large (code 3).

    Parameters
    ----------
    fn : callable
        ``(B, n) -> (B, m)`` batch evaluation.
    x0 : ndarray, shape (n,)
        The point.
    W : ndarray, shape (d, n)
        Directions.
    f0 : ndarray, shape (m,)
        ``fn`` at ``x0``.
    eps : float
        Machine epsilon of ``fn``'s arithmetic.
    step : float
        ECnoise sampling step (units of the direction).
    """
    raw = estimate_noise(fn, x0, W, f0, 0.0, step)
    af = np.abs(f0)[None, :]
    with np.errstate(divide="ignore"):
        exponent = np.floor(np.log2(np.where(af > 0, af, 1.0)))
        ulp = np.where(af > 0, eps * 2.0**exponent, 0.0)
    rounding = ulp / math.sqrt(12.0)
    sigma = np.where(raw.inform == 1, np.maximum(raw.sigma, rounding), rounding)
    return np.where(raw.inform == 3, np.maximum(sigma, eps * af), sigma)


def derivative_coefficients(
    fn: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    W: np.ndarray,
    f0: np.ndarray,
    sigma: np.ndarray,
    eps: float,
    batch_size: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``g''(0)``, ``g'''(0)`` along each direction with error bars, by Neville extrapolation.

    With ``C(h) = g' + c h² + O(h⁴)`` (``c = g'''/6``) the sequence
    ``(C(2h) - C(h)) / (3 h²) = c + O(h²)`` is extrapolated like a central
    difference; with ``F(h) = g' + b h + O(h²)`` (``b = g''/2``) the sequence
    ``(F(2h) - F(h)) / h = b + O(h)`` like a one-sided one.

    Parameters
    ----------
    fn : callable
        ``(B, n) -> (B, m)`` batch evaluation, float64 arrays.
    x0 : ndarray, shape (n,)
        The point.
    W : ndarray, shape (d, n)
        Directions (entries powers of two, so that ``x0 + h w`` is exact).
    f0 : ndarray, shape (m,)
        ``fn`` at ``x0``.
    sigma : ndarray, shape (d, m)
        Noise standard deviation of ``fn`` along each direction.
    eps : float
        Machine epsilon of ``fn``'s arithmetic.
    batch_size : int
        Largest batch passed to ``fn``.

    Returns
    -------
    g2, g2_err, g3, g3_err : ndarray, shape (d, m)
        Second and third derivatives along each direction (per unit of ``t``
        in ``f(x0 + t w)``) and their error bars.
    """
    steps = step_ladder(0.5, COEFFICIENT_LEVELS)
    d, n = W.shape
    Y = evaluate_ladder(fn, x0, W, steps, batch_size)
    Yp = np.moveaxis(Y[:, :, 0], 1, 0)  # (L, d, m)
    Ym = np.moveaxis(Y[:, :, 1], 1, 0)
    h = steps[:, None, None]
    with np.errstate(all="ignore"):
        C = (Yp - Ym) / (2 * h)
        F = (Yp - f0) / h
        hs = h[1:]
        c_seq = (C[:-1] - C[1:]) / (3 * hs**2)
        b_seq = (F[:-1] - F[1:]) / hs
    # noise: C(h) has sd σ/(√2 h), F(h) has sd √2 σ/h (independent across steps)
    sd_c = sigma[None] * np.sqrt(1 / (2 * (2 * hs) ** 2) + 1 / (2 * hs**2)) / (3 * hs**2)
    sd_b = sigma[None] * np.sqrt(2 / (2 * hs) ** 2 + 2 / hs**2) / hs
    c = neville(c_seq, steps[1:], 2, 2, sd_c, eps)
    b = neville(b_seq, steps[1:], 1, 1, sd_b, eps)
    return 2 * b.value, 2 * b.error, 6 * c.value, 6 * c.error
