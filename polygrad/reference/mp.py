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

from .differences import FINE_LEVELS, DirectionalDerivatives, _jumps, _size, _tableaus
from .richardson import Estimate, TableauResult, step_ladder

__all__ = ["mp_directional_derivatives"]

MpFn = Callable[[np.ndarray, np.ndarray, int], np.ndarray]


MP_TARGET = 1e-20
"""Relative accuracy below which the finest steps of an mp ladder are trusted as they
are (far beyond what a float64 comparison can use)."""


def mp_directional_derivatives(
    evaluate_mp: MpFn,
    x0: np.ndarray,
    W: np.ndarray,
    dps: int = 50,
    h_max: float = 2.0**-4,
    levels: int = 14,
    max_extensions: int = 2,
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
    max_extensions : int
        How often a direction's ladder may grow by ``levels`` finer steps: where
        the best estimate of its 4 finest steps is still limited by truncation
        and short of :data:`MP_TARGET` (steps scaled to a large ``|x|`` alias a
        function with a short length scale, ``sin`` at ``x ≈ 1e5``, and their
        tableau can look converged). mp has no round-off to fear in small steps.

    Returns
    -------
    DirectionalDerivatives
        With ``method == "mp"``; values are rounded to float64, error bars
        include that rounding and are cross-checked between tableau columns
        (see :func:`polygrad.reference.richardson.neville`).
    """
    f0 = evaluate_mp(x0, np.zeros_like(x0), dps)
    m = f0.size
    d = W.shape[0]
    norms = np.sqrt(np.einsum("ij,ij->i", W, W))
    f0_float = np.array([float(v) for v in f0])
    unit = 10.0 ** (-dps)
    sigma = np.broadcast_to(10.0 * unit * np.maximum(np.abs(f0_float), 1e-300), (d, m)).copy()

    def ladder(k: int, hs: np.ndarray) -> np.ndarray:
        out = np.empty((hs.size, 2, m), dtype=object)
        for i, h in enumerate(hs):
            out[i, 0] = evaluate_mp(x0, h * W[k], dps)
            out[i, 1] = evaluate_mp(x0, -h * W[k], dps)
        return out

    steps = step_ladder(h_max, levels * (1 + max_extensions))
    Ys = [ladder(k, steps[:levels]) for k in range(d)]
    evals = 2 * d * levels + 1
    for _ in range(max_extensions):
        c = _solve_mp(Ys, f0, steps, sigma, unit)[0]
        fine = _solve_mp(Ys, f0, steps, sigma, unit, window=FINE_LEVELS)[0]
        with np.errstate(invalid="ignore"):
            short = fine.error > MP_TARGET * _size(c, norms)
            grow = np.any((fine.truncation > 3.0 * fine.noise) & short, axis=1)
        grow &= np.array([Y.shape[0] < steps.size for Y in Ys])
        if not np.any(grow):
            break
        for k in np.flatnonzero(grow):
            L = Ys[k].shape[0]
            Ys[k] = np.concatenate([Ys[k], ladder(int(k), steps[L : L + levels])])
            evals += 2 * levels
    c, r, l, jump_r, sgn_r, jump_l, sgn_l, used = _solve_mp(Ys, f0, steps, sigma, unit, final=True)
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
            step=used[np.arange(d)[:, None], np.minimum(t.level, used.shape[1] - 1)],
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


def _solve_mp(
    Ys: list[np.ndarray],
    f0: np.ndarray,
    steps: np.ndarray,
    sigma: np.ndarray,
    unit: float,
    window: int = 0,
    final: bool = False,
) -> tuple:
    """Tableaus of directions with ladders of different lengths, grouped by length.

    ``Ys[k]`` holds direction ``k``'s values on the first ``len(Ys[k])`` of
    ``steps``. With ``window``, only each direction's ``window`` finest steps are
    used. With ``final``, the error bars are cross-checked, and the jump flags
    and the steps each direction used are returned too.
    """
    d = len(Ys)
    lengths = np.array([Y.shape[0] for Y in Ys])
    order: list[np.ndarray] = []
    parts: list[tuple] = []
    for L in np.unique(lengths):
        rows = np.flatnonzero(lengths == L)
        lo = max(0, int(L) - window) if window else 0
        Y = np.stack([Ys[k][lo:] for k in rows])
        st = steps[lo:L]
        if not final:
            order.append(rows)
            parts.append(
                (*_tableaus(Y, f0, st, sigma[rows], unit, sides=False), None, None, (), st)
            )
            continue
        c, r, l = _tableaus(Y, f0, st, sigma[rows], unit, cross_check=True)
        # the jump test uses the plain one-sided tableaus (as in float64)
        _, rp, lp = _tableaus(Y, f0, st, sigma[rows], unit)
        flags = (
            *_jumps(Y, f0, sigma[rows], 0, rp, unit),
            *_jumps(Y, f0, sigma[rows], 1, lp, unit),
        )
        order.append(rows)
        parts.append((c, r, l, flags, st))
    back = np.empty(d, dtype=np.int64)
    back[np.concatenate(order)] = np.arange(d)

    def merge(tabs: list) -> TableauResult:
        return TableauResult(
            *(
                np.concatenate([getattr(t, fld) for t in tabs])[back]
                for fld in ("value", "error", "truncation", "noise", "level", "order")
            )
        )

    c = merge([p[0] for p in parts])
    if not final:
        return (c,)
    r = merge([p[1] for p in parts])
    l = merge([p[2] for p in parts])
    jumps = [np.concatenate([p[3][i] for p in parts])[back] for i in range(4)]
    used = np.full((d, max(p[4].size for p in parts)), np.nan)
    for rows, p in zip(order, parts, strict=True):
        used[rows, : p[4].size] = p[4]
    return (c, r, l, *jumps, used)
