"""Quad-precision directional derivatives: every point of a check in one batch.

With IEEE binary128 numbers (a 113-bit significand, unit round-off ``u = 2^-113``,
about ``1e-34``) a central difference at a step of ``h = 2^-40`` of the direction has
a truncation error of order ``h² g''' ≈ 1e-24`` and a round-off error of order
``u |g| / h ≈ 1e-22`` relative to ``g = f(x + t w)``: far below what a float64
comparison can use. So one central difference per direction decides, with a second
one at ``h / 2`` that measures its error (the *halving check*, as the mp quick
difference reads the gap between its one-sided differences). All ``4 d + 1`` points
(``x``, then ``x ± h w_k`` and ``x ± h w_k / 2`` for every direction) go to the
function in one call on a ``(4 d + 1, n)`` quad array, where the mp reference
evaluates one point at a time on mpmath numbers.

The quad arithmetic is ``numpy_quaddtype.QuadPrecDType("sleef")`` (numpy-quaddtype
1.0, an optional dependency: ``polygrad-check[quad]``): IEEE binary128 with SLEEF's
math functions, whose error bound is 1 ULP. Its other backend, ``"longdouble"``, is
the platform's ``long double`` (80-bit x87 on x86-64, 64 bits of significand), so it
is never used. A direction is *settled* when its halving check, the gap between its
extrapolated one-sided derivatives and its round-off are all within
:data:`QUAD_TARGET` of the entry's size; the other directions (a kink or a jump at or
near ``x``, a length scale below about ``1e-3`` of the direction, a function that
loses digits, a point ``x + h w`` that quad cannot form exactly) go to a fallback (the
mp reference), which the caller supplies.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .differences import DirectionalDerivatives, _size_of_values, merge_rows
from .richardson import Estimate
from .steps import F64_EPS

__all__ = [
    "QUAD_STEP",
    "QUAD_TARGET",
    "QuadDifferences",
    "quad_differences",
    "quad_directional_derivatives",
    "quad_dtype",
    "quad_missing_reason",
    "quick_quad_derivatives",
]

QuadFn = Callable[[np.ndarray], np.ndarray]
"""``(B, n)`` quad array of points -> ``(B, m)`` quad array of values."""

QUAD_STEP = 2.0**-26
"""Largest step (in units of the direction) of the quad central differences, about
1.5e-8; the others are half and a quarter of it. Their sixth-order extrapolation has a
truncation error of order ``h^6`` and a round-off of order ``u / h ≈ 1e-26`` of ``|f|``."""

QUAD_UNIT = 2.0**-113
"""Unit round-off of IEEE binary128."""

QUAD_NOISE_ULPS = 64.0
"""Round-off of ``f`` in quad assumed per evaluation, in units of :data:`QUAD_UNIT`
times the largest ``|g|`` of the direction; more round-off than that shows in the
halving check (two independent draws of it) and is counted there."""

QUAD_TARGET = 1e-18
"""Relative accuracy (of an entry's size) within which a quad direction is settled:
far below float64's resolution (2.2e-16), far above quad's round-off."""

QUAD_F64_SHARE = 1e-3
"""Share of float64's round-off of values of ``f``'s size (``eps64 |f|`` per unit move)
within which a quad direction is settled as well: what the verdict needs of an entry
far smaller than that (its tolerance holds ``c_ad`` times it)."""

QUAD_VERSION = "1.0.0"
"""The numpy-quaddtype release the quad reference was validated with (its constraint)."""


@functools.cache
def quad_dtype() -> Any | None:
    """The binary128 dtype (``QuadPrecDType("sleef")``), or None where not installed.

    Returns
    -------
    numpy.dtype or None
        None when numpy-quaddtype cannot be imported (not installed, or NumPy older
        than 2.4, which it needs).
    """
    try:
        from numpy_quaddtype import QuadPrecDType
    except Exception:  # noqa: BLE001 - any import failure: no quad tier
        return None
    return QuadPrecDType("sleef")


def quad_missing_reason() -> str | None:
    """Why the quad dtype is unavailable (a sentence for the report), or None."""
    if quad_dtype() is not None:
        return None
    return (
        "numpy-quaddtype is not installed (pip install 'polygrad-check[quad]'; it needs "
        f"NumPy >= 2.4 and Python >= 3.11, version {QUAD_VERSION} is the one tested)"
    )


def quad_points(x0: np.ndarray, W: np.ndarray, h: float) -> tuple[np.ndarray, np.ndarray]:
    """The ``6 d + 1`` points of a check in quad, and which directions are exact.

    Returns
    -------
    points : ndarray, shape (6 d + 1, n), quad
        ``x0``, then per direction ``x0 + t w`` for ``t`` in ``h, -h, h/2, -h/2, h/4,
        -h/4``.
    exact : ndarray, shape (d,), bool
        Whether every point of the direction is ``x0 + t w`` exactly (``(p - x0) ==
        t w`` in quad): the differences then divide by the true displacement.
    """
    q = quad_dtype()
    d, n = W.shape
    t = h * np.array([1.0, -1.0, 0.5, -0.5, 0.25, -0.25])
    disp = (t[None, :, None] * W[:, None, :]).astype(q)  # exact: t is a power of two
    x = x0.astype(q)
    with np.errstate(all="ignore"):
        P = x[None, None, :] + disp
        exact = np.all(((P - x[None, None, :]) == disp).reshape(d, -1), axis=1)
    return np.concatenate([x[None, :], P.reshape(6 * d, n)]), np.asarray(exact, dtype=bool)


def _f64(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


@dataclass(frozen=True)
class QuadDifferences:
    """The quad differences of :func:`quad_differences` (quad arrays, ``(d, m)``).

    With ``D(t) = (g(t) - g(-t)) / 2t``, ``E_1 = (4 D(h/2) - D(h)) / 3`` and ``E_2 =
    (4 D(h/4) - D(h/2)) / 3`` (errors of order ``h^4``); with ``r(t) = (g(t) - g(0)) /
    t``, ``R_1 = 2 r(h/2) - r(h)`` and ``R_2 = 2 r(h/4) - r(h/2)`` (errors of order
    ``h^2``), and the same ``L_1``, ``L_2`` of the left differences.

    Attributes
    ----------
    central : ndarray
        ``(16 E_2 - E_1) / 15``.
    halving : ndarray
        ``E_2 - E_1``.
    right, left : ndarray
        ``(4 R_2 - R_1) / 3`` and the left one.
    right_halving, left_halving : ndarray
        ``R_2 - R_1`` and the left one.
    gap : ndarray
        ``R_2 - L_2``: of order ``h^3`` where ``g`` is smooth, the jump of the slope at
        a kink at ``x``.
    f0 : ndarray, shape (m,)
        ``f(x0)``.
    values : ndarray, shape (d, 6, m)
        ``g`` at the points of :func:`quad_points`.
    exact : ndarray, shape (d,), bool
        See :func:`quad_points`.
    """

    central: np.ndarray
    halving: np.ndarray
    right: np.ndarray
    left: np.ndarray
    right_halving: np.ndarray
    left_halving: np.ndarray
    gap: np.ndarray
    f0: np.ndarray
    values: np.ndarray
    exact: np.ndarray


def quad_differences(
    evaluate_quad: QuadFn, x0: np.ndarray, W: np.ndarray, h: float = QUAD_STEP
) -> QuadDifferences:
    """The central and one-sided differences at ``h``, ``h / 2`` and ``h / 4``, in quad.

    All ``6 d + 1`` points go to ``evaluate_quad`` in one call (see
    :func:`quad_points`); see :func:`quick_quad_derivatives` for the estimates.

    Raises
    ------
    RuntimeError
        numpy-quaddtype is not installed.
    """
    if quad_dtype() is None:
        raise RuntimeError(quad_missing_reason())
    points, exact = quad_points(x0, W, h)
    # the points step across domains and poles as float64 ones do (a masked softmax's
    # -inf, a log of a branch a where discards): no warning, whatever the caller's filters
    with np.errstate(all="ignore"):
        Y = evaluate_quad(points)
    f0, G = Y[0], Y[1:].reshape(W.shape[0], 6, -1)
    with np.errstate(all="ignore"):
        D = [(G[:, 2 * j] - G[:, 2 * j + 1]) / (h * 2.0**-j * 2) for j in range(3)]
        r = [(G[:, 2 * j] - f0) / (h * 2.0**-j) for j in range(3)]
        l = [(f0 - G[:, 2 * j + 1]) / (h * 2.0**-j) for j in range(3)]
        E1, E2 = (4 * D[1] - D[0]) / 3, (4 * D[2] - D[1]) / 3
        R1, R2 = 2 * r[1] - r[0], 2 * r[2] - r[1]
        L1, L2 = 2 * l[1] - l[0], 2 * l[2] - l[1]
        return QuadDifferences(
            (16 * E2 - E1) / 15, E2 - E1, (4 * R2 - R1) / 3, (4 * L2 - L1) / 3,
            R2 - R1, L2 - L1, R2 - L2, f0, G, exact,
        )  # fmt: skip


def quick_quad_derivatives(
    evaluate_quad: QuadFn, x0: np.ndarray, W: np.ndarray, h: float = QUAD_STEP
) -> tuple[DirectionalDerivatives, np.ndarray]:
    """Quad central differences at ``h``, ``h / 2`` and ``h / 4`` along each direction.

    The estimate is the Richardson extrapolation of the three (see
    :class:`QuadDifferences`), its error bar the difference of the two fourth-order
    extrapolations ``|E_2 - E_1|`` (far more than the sixth-order estimate's own
    error) plus its round-off ``7 sigma / h``, with ``sigma``
    :data:`QUAD_NOISE_ULPS` units of :data:`QUAD_UNIT` times the largest ``|g|``.
    The one-sided derivatives are the extrapolations of ``r(t) = (g(t) - g(0)) / t``
    and of the left ones, with their own halving differences and round-off
    ``30 sigma / h``.

    A direction is settled when, for every output, the halving difference, the gap
    ``R_2 - L_2`` between the one-sided derivatives and the round-off are within
    :data:`QUAD_TARGET` of the entry's size (the typical size of its output's
    derivatives per unit length where larger, or the values where all are 0, as in
    :func:`~polygrad.reference.mp.quick_mp_derivatives`) and its points are exact.
    A kink at ``x`` leaves a gap; a kink near ``x`` or a jump moves the central
    difference with the step; a function that rounds in float64 somewhere adds
    about ``1e-16 / h`` of noise to it.

    Parameters
    ----------
    evaluate_quad : callable
        ``(B, n)`` quad points -> ``(B, m)`` quad values; called once.
    x0 : ndarray, shape (n,), float64
        The point.
    W : ndarray, shape (d, n), float64
        Directions.
    h : float
        The largest step, a power of two (default :data:`QUAD_STEP`).

    Returns
    -------
    derivatives : DirectionalDerivatives
        ``(d, m)`` arrays, ``method == "quad"``; unsettled directions' entries carry
        their error bars but should be estimated again.
    settled : ndarray, shape (d,), bool

    Raises
    ------
    RuntimeError
        numpy-quaddtype is not installed.
    """
    d = W.shape[0]
    q = quad_differences(evaluate_quad, x0, W, h)
    central, right, left = _f64(q.central), _f64(q.right), _f64(q.left)
    halving, gap = np.abs(_f64(q.halving)), np.abs(_f64(q.gap))
    with np.errstate(all="ignore"):
        mag = np.maximum(np.max(np.abs(_f64(q.values)), axis=1), np.abs(_f64(q.f0))[None, :])
        ro = QUAD_NOISE_ULPS * QUAD_UNIT * mag / h  # sigma / h
        size = _size_of_values(central, np.sqrt(np.einsum("ij,ij->i", W, W)))
        judged = np.where(size > 0, size, mag)  # all derivatives 0: against the values
        # or far below the round-off a float64 rule inherits from values of f's size,
        # which the verdict allows any entry (an entry far below f per unit move, as a
        # sum of a softmax's outputs, is resolved to that and no further)
        enough = np.maximum(QUAD_TARGET * judged, QUAD_F64_SHARE * F64_EPS * mag)
        ok = (halving <= enough) & (7 * ro <= enough) & (gap <= enough)
        ok &= np.isfinite(mag) & np.isfinite(central) & np.isfinite(halving)
    settled = np.all(ok, axis=1) & q.exact

    def est(value: np.ndarray, err: np.ndarray) -> Estimate:
        return Estimate(
            value=value,
            error=err + 0.5 * np.finfo(np.float64).eps * np.abs(value),
            step=np.full(value.shape, h / 4),
            noise=ro * h,
            method="quad",
            evaluations=6 * d + 1,
            error_mp=err,
        )

    no_jump = np.zeros(central.shape, dtype=bool)
    derivs = DirectionalDerivatives(
        est(central, halving + 7 * ro),
        est(right, np.abs(_f64(q.right_halving)) + 30 * ro),
        est(left, np.abs(_f64(q.left_halving)) + 30 * ro),
        no_jump, no_jump.copy(),
    )  # fmt: skip
    return derivs, settled


def quad_directional_derivatives(
    evaluate_quad: QuadFn,
    x0: np.ndarray,
    W: np.ndarray,
    fallback: Callable[[np.ndarray], DirectionalDerivatives] | None = None,
    h: float = QUAD_STEP,
) -> DirectionalDerivatives:
    """Estimate ``J w_k`` for every direction in quad precision, in one batch.

    Parameters
    ----------
    evaluate_quad : callable
        ``(B, n)`` quad points -> ``(B, m)`` quad values (see
        :attr:`polygrad.backends.base.Target.evaluate_quad`).
    x0 : ndarray, shape (n,), float64
        The point.
    W : ndarray, shape (d, n), float64
        Directions.
    fallback : callable, optional
        ``(k, n)`` directions -> DirectionalDerivatives ``(k, m)``: the estimate of the
        directions quad does not settle (the mp reference, with its ladder and jump
        test). Without it, their quad estimates are returned as they are, with their
        (wide) error bars.
    h : float
        The step (default :data:`QUAD_STEP`).

    Returns
    -------
    DirectionalDerivatives
        ``(d, m)`` arrays with ``method == "quad"`` (the fallback's rows included;
        ``evaluations`` counts both).

    Raises
    ------
    RuntimeError
        numpy-quaddtype is not installed.
    """
    quick, settled = quick_quad_derivatives(evaluate_quad, x0, W, h)
    if fallback is None or np.all(settled):
        return quick
    rest = fallback(W[~settled])
    return merge_rows(quick, rest, np.flatnonzero(~settled))
