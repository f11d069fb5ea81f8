"""Directional derivatives of a batch function: central and one-sided, with error bars.

:func:`directional_derivatives` estimates, for each direction ``w_k``, the
derivative of ``g_k(t) = f(x + t w_k)`` at 0 from central differences (the
reference) and from forward and backward differences (the right and left
derivatives, which reveal kinks). All three reuse the same evaluations.
See :mod:`polygrad.reference.richardson` for the extrapolation and the error
bar. The ladder of steps is extended downwards, up to ``max_refinements``
times, for directions whose best estimate is still truncation-dominated at
the finest step: that is the case of a function whose length scale is
shorter than the scale of its input.

A one-sided difference ``g(±h) - g(0)`` that does not shrink in proportion
to ``h`` over the finest steps marks a jump (or an infinite slope) on that
side; the corresponding one-sided derivative is reported as ``±inf``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .richardson import Estimate, TableauResult, _to_float, neville, step_ladder

__all__ = ["DirectionalDerivatives", "directional_derivatives"]

JUMP_RATIO = 0.65
"""``|g(h/2) - g(0)| / |g(h) - g(0)|`` above which a difference is not shrinking."""


@dataclass(frozen=True)
class DirectionalDerivatives:
    """Derivatives of ``f`` along directions, each with its error bar.

    All arrays have shape ``(d, m)``: ``d`` directions, ``m`` outputs.

    Attributes
    ----------
    central : Estimate
        The reference: Richardson-extrapolated central differences.
    right, left : Estimate
        One-sided derivatives ``lim (g(±h) - g(0)) / ±h``.
    jump_right, jump_left : ndarray of bool
        The one-sided difference does not vanish like ``h`` on that side (a
        jump or an infinite slope).
    """

    central: Estimate
    right: Estimate
    left: Estimate
    jump_right: np.ndarray
    jump_left: np.ndarray


def _evaluate(
    fn: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    W: np.ndarray,
    steps: np.ndarray,
    max_rows: int,
) -> np.ndarray:
    """f at x0 ± h w for every direction and step → (d, L, 2, m)."""
    d, n = W.shape
    L = steps.size
    per_dir = 2 * L
    dirs_per_chunk = max(1, max_rows // per_dir)
    out = []
    signs = np.array([1.0, -1.0])
    for a in range(0, d, dirs_per_chunk):
        Wc = W[a : a + dirs_per_chunk]
        offs = (steps[None, :, None, None] * signs[None, None, :, None]) * Wc[:, None, None, :]
        X = (x0[None, None, None, :] + offs).reshape(-1, n)
        Y = fn(X)
        out.append(Y.reshape(Wc.shape[0], L, 2, -1))
    return np.concatenate(out, axis=0)


def _tableaus(
    Y: np.ndarray,
    f0: np.ndarray,
    steps: np.ndarray,
    sigma: np.ndarray,
    value_eps: float,
) -> tuple:
    h = steps[:, None, None]
    Yp = np.moveaxis(Y[:, :, 0], 1, 0)  # (L, d, m)
    Ym = np.moveaxis(Y[:, :, 1], 1, 0)
    with np.errstate(all="ignore"):
        D = (Yp - Ym) / (2 * h)
        Fp = (Yp - f0) / h
        Fm = (f0 - Ym) / h
    sd_c = np.sqrt(2.0) / 2.0 * sigma[None] / h
    sd_1 = np.sqrt(2.0) * sigma[None] / h
    c = neville(D, steps, 2, 2, sd_c, value_eps)
    r = neville(Fp, steps, 1, 1, sd_1, value_eps)
    l = neville(Fm, steps, 1, 1, sd_1, value_eps)
    return c, r, l


def _jumps(
    Y: np.ndarray, f0: np.ndarray, sigma: np.ndarray, side: int, tab: TableauResult
) -> tuple[np.ndarray, np.ndarray]:
    """Whether ``g(±h) - g(0)`` does not vanish like ``h``, and its sign.

    Two conditions: ``|g(±h_k) - g(0)|`` stops shrinking over the three finest
    steps (ratio above :data:`JUMP_RATIO`), and the one-sided tableau did not
    converge (its error bar exceeds 10% of its value). The second condition
    keeps strong curvature, whose one-sided differences can shrink slowly when
    linear and quadratic terms cancel, from being mistaken for a jump.
    """
    with np.errstate(all="ignore"):
        signed = _to_float((Y[:, -3:, side] - f0) * (1.0 if side == 0 else -1.0))  # (d, 3, m)
        delta = np.abs(signed)
        ratios = delta[:, 1:] / delta[:, :-1]
        big = delta[:, -1] > 100.0 * sigma
        jump = np.all(ratios > JUMP_RATIO, axis=1) & big & np.all(np.isfinite(delta), axis=1)
        converged = _to_float(np.abs(tab.value)) * 0.1 >= tab.error
        return jump & ~converged, np.sign(signed[:, -1])


def directional_derivatives(
    fn: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    W: np.ndarray,
    f0: np.ndarray,
    sigma: np.ndarray,
    eps: float,
    method: str,
    h_max: float,
    levels: int,
    max_rows: int = 4096,
    max_refinements: int = 2,
    refine_levels: int = 6,
    target_relative_error: float = 1e-12,
) -> DirectionalDerivatives:
    """Estimate ``J w_k`` for every direction ``w_k`` with error bars.

    Parameters
    ----------
    fn : callable
        ``(B, n) -> (B, m)`` batch evaluation, float64 arrays.
    x0 : ndarray, shape (n,)
        The point.
    W : ndarray, shape (d, n)
        Directions; entries must be powers of two (or 0) times ±1 so that
        ``x0 + h w`` is exact for power-of-two steps ``h``.
    f0 : ndarray, shape (m,)
        ``fn`` at ``x0``.
    sigma : ndarray, shape (d, m)
        Noise standard deviation of each output along each direction (ECnoise).
    eps : float
        Machine epsilon of the evaluations.
    method : str
        Label of the arithmetic (``"float64"``, ``"working"``).
    h_max : float
        Largest step (power of two), in units of the direction.
    levels : int
        Number of steps in the initial ladder (ratio 2).
    max_rows : int
        Largest batch passed to ``fn``.
    max_refinements, refine_levels : int
        How often, and by how many steps, the ladder may be extended:
        downwards for directions limited by truncation at the finest step,
        upwards (up to steps of 32) for directions whose error bar exceeds
        ``target_relative_error`` times the derivative.
    target_relative_error : float
        Accuracy below which the ladder is not extended upwards.

    Returns
    -------
    DirectionalDerivatives
    """
    steps = step_ladder(h_max, levels)
    sigma = np.broadcast_to(sigma, (W.shape[0], f0.size)).copy()
    Y = _evaluate(fn, x0, W, steps, max_rows)
    evals = Y.shape[0] * Y.shape[1] * 2
    c, r, l = _tableaus(Y, f0, steps, sigma, eps)
    jump_r, sgn_r = _jumps(Y, f0, sigma, 0, r)
    jump_l, sgn_l = _jumps(Y, f0, sigma, 1, l)
    for _ in range(max_refinements):
        # The ladder moves where the best estimate sits at its edge: downwards where it
        # is still limited by truncation at the finest step (a length scale shorter
        # than |x|), upwards where it is limited by noise at the largest step (a length
        # scale longer than |x|, e.g. x near 0 for a function of scale 1).
        last = steps.size - 1
        down = np.any((c.level == last) & (c.truncation > 3.0 * c.noise), axis=1)
        cval = _to_float(np.asarray(c.value))
        up = (c.error > target_relative_error * np.abs(cval)) & (cval != 0)
        up = np.any(up, axis=1) & ~down
        up &= steps[0] * 2.0**refine_levels <= 2.0**5
        if not np.any(down | up):
            break
        more_dn = steps[-1] * 2.0 ** -np.arange(1, refine_levels + 1)
        more_up = steps[0] * 2.0 ** np.arange(refine_levels, 0, -1)
        new_steps = np.concatenate([more_up, steps, more_dn])
        Y_new = np.full((Y.shape[0], new_steps.size) + Y.shape[2:], np.nan)
        Y_new[:, refine_levels : refine_levels + steps.size] = Y
        if np.any(down):
            Yd = _evaluate(fn, x0, W[down], more_dn, max_rows)
            Y_new[down, refine_levels + steps.size :] = Yd
            evals += Yd.shape[0] * Yd.shape[1] * 2
        if np.any(up):
            Yu = _evaluate(fn, x0, W[up], more_up, max_rows)
            Y_new[up, :refine_levels] = Yu
            evals += Yu.shape[0] * Yu.shape[1] * 2
        need = down | up
        Y, steps = Y_new, new_steps
        c2, r2, l2 = _tableaus(Y[need], f0, steps, sigma[need], eps)
        c, r, l = (_merge(old, new, need) for old, new in ((c, c2), (r, r2), (l, l2)))
        if np.any(down):  # the finest steps changed only where the ladder moved down
            r_dn, l_dn = _tableaus(Y[down], f0, steps, sigma[down], eps)[1:]
            jump_r[down], sgn_r[down] = _jumps(Y[down], f0, sigma[down], 0, r_dn)
            jump_l[down], sgn_l[down] = _jumps(Y[down], f0, sigma[down], 1, l_dn)
        # levels of directions not refined are shifted by the steps prepended
        shift = refine_levels
        c, r, l = (_shift_levels(t, ~need, shift) for t in (c, r, l))

    def est(t) -> Estimate:
        return Estimate(
            value=np.asarray(t.value, dtype=np.float64),
            error=t.error,
            step=steps[np.minimum(t.level, steps.size - 1)],
            noise=np.array(sigma, copy=True),
            method=method,
            evaluations=evals,
        )

    right, left = est(r), est(l)
    right = _with_jumps(right, jump_r, sgn_r)
    left = _with_jumps(left, jump_l, sgn_l)
    return DirectionalDerivatives(est(c), right, left, jump_r, jump_l)


def _shift_levels(t: TableauResult, rows: np.ndarray, shift: int) -> TableauResult:
    level = np.array(t.level, copy=True)
    level[rows] += shift
    return TableauResult(t.value, t.error, t.truncation, t.noise, level, t.order)


def _merge(old, new, need: np.ndarray):
    fields = {}
    for name in ("value", "error", "truncation", "noise", "level", "order"):
        a = np.array(getattr(old, name), copy=True)
        a[need] = getattr(new, name)
        fields[name] = a
    return type(old)(**fields)


def _with_jumps(e: Estimate, jump: np.ndarray, sign: np.ndarray) -> Estimate:
    with np.errstate(invalid="ignore"):
        value = np.where(jump, sign * np.inf, e.value)
    error = np.where(jump, np.inf, e.error)
    return Estimate(value, error, e.step, e.noise, e.method, e.evaluations)
