"""High-precision directional derivatives through mpmath.

When a function can be evaluated on mpmath numbers (see
:mod:`polygrad.backends.mpmath`), the same central-difference ladder and
Richardson tableau as in float64 run at ``dps`` decimal digits: the points
``x + h w`` are formed exactly, the differences lose no digits to
cancellation that matter, and the error bar is set by the tableau's
truncation estimate and a noise level of a few units in the last of ``dps``
digits. At 50 digits this gives derivatives good to far beyond float64
(≲ 1e-25 relative for smooth functions).

Most directions need no ladder at all. At 75 digits a central difference
with a step of ``2^-80`` has a truncation error of order ``h²`` and a
round-off error of order ``10^-75 / h``, both far below what a float64
comparison can use; :func:`quick_mp_derivatives` takes one such difference
(two evaluations per direction, and ``f(x)`` once) and reads the gap between
the one-sided differences from the same points: ``h g''`` where ``g`` is
smooth, the size of the jump where a kink lies within the step. Only the
directions whose gap is not negligible (a kink at or near ``x``, or a length
scale below about ``1e-4`` of the direction) go through the full ladder.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import mpmath
import numpy as np

from .differences import (
    FINE_LEVELS,
    DirectionalDerivatives,
    _jumps,
    _size,
    _size_of_values,
    _tableaus,
)
from .operand_moves import rounding_scale
from .richardson import Estimate, TableauResult, step_ladder

__all__ = ["expected_mp_evaluations", "mp_directional_derivatives", "quick_mp_derivatives"]

MpFn = Callable[[np.ndarray, np.ndarray, int], np.ndarray]


MP_TARGET = 1e-20
"""Relative accuracy below which the finest steps of an mp ladder are trusted as they
are (far beyond what a float64 comparison can use)."""

QUICK_STEP = 2.0**-80
"""Step (in units of the direction) of the quick mp difference, about 8e-25. At
``dps + QUICK_EXTRA_DIGITS`` digits the round-off of a difference is ``~10^-75 / h
≈ 1e-50`` of the values; a kink or a curvature shows as the gap ``h g''`` between
the one-sided differences, which must stay below :data:`MP_TARGET`."""

QUICK_RETRY_FACTOR = 2.0**-40
"""The quick difference's step is retried once, this much smaller (about 8e-37 of the
direction), for the directions it did not settle: the gap ``h g''`` shrinks with the
step, while the round-off ``~10^-75 / h`` stays near ``1e-38`` of the values."""

QUICK_EXTRA_DIGITS = 25
"""Digits beyond ``dps`` at which the quick difference is evaluated (its step is far
smaller than the ladder's)."""


MP_SECONDS_PER_INPUT = 1e-6
"""A lower bound of what one evaluation of ``f`` on mpmath numbers costs per input
number: each input becomes an mpmath number and enters at least one operation (a bare
``sum`` of 20,000 inputs took 1.2 µs each, a ``tanh`` 7.9 µs, on a 2-core machine)."""


def mp_seconds_at_least(n: int, evaluations: int) -> float:
    """Seconds that ``evaluations`` evaluations of ``f`` on mpmath numbers take at least.

    Decides, before any is run, that mp work is out of reach for a wide input (at
    n = 1e6 one evaluation takes a second at the very least, and a minute or more for
    a real function), where timing even one evaluation would cost more than the check.

    Parameters
    ----------
    n : int
        Input numbers of ``f``.
    evaluations : int
        Evaluations (a VJP on mpmath numbers counts as about two).

    Returns
    -------
    float
        ``n * evaluations * MP_SECONDS_PER_INPUT``.
    """
    return float(n) * float(evaluations) * MP_SECONDS_PER_INPUT


def expected_mp_evaluations(d: int) -> int:
    """mp evaluations a reference along ``d`` directions is expected to take.

    The quick difference along each (two) and ``f(x)`` once, plus the ladder (two
    per step, ``levels`` steps) along one direction in ``levels``: kinks near ``x``
    and length scales below the quick step's reach are the exception. Used to
    decide whether mp is affordable before it runs.

    Parameters
    ----------
    d : int
        Number of directions (at least 0).

    Returns
    -------
    int
        ``4 d + 1``; times the seconds of one timed mp evaluation, the time expected.
    """
    return 4 * d + 1


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
        (see :func:`polygrad.reference.richardson.neville`). Directions that
        :func:`quick_mp_derivatives` settles skip the ladder.
    """
    zero = np.zeros_like(x0)
    f0_quick = evaluate_mp(x0, zero, dps + QUICK_EXTRA_DIGITS)
    raised = resolving_digits(evaluate_mp, x0, dps, f0_quick)
    if raised > dps:
        dps = raised
        f0_quick = evaluate_mp(x0, zero, dps + QUICK_EXTRA_DIGITS)
    # f's round-off measured, not assumed relative to |f| (f can be a cancellation of
    # far larger terms, to exactly 0 at any number of digits)
    scale = rounding_scale(evaluate_mp, x0, dps + QUICK_EXTRA_DIGITS, f0_quick)
    quick, settled = quick_mp_derivatives(evaluate_mp, x0, W, f0_quick, dps, scale=scale)
    if not np.all(settled):
        # once more at a far smaller step: a length scale shorter than the quick step
        # allows (a point 1e-7 from the edge of log1p(-x)'s domain) settles there, where
        # the ladder's long steps would leave the domain; a kink at x does not (its gap
        # does not shrink with the step)
        norms = np.sqrt(np.einsum("ij,ij->i", W, W))
        size = _size_of_values(_floats(quick.central.value), norms)[~settled]
        assert quick.central.value_mp is not None
        odd = _floats(quick.central.value_mp)[~settled] * QUICK_STEP  # (g(h) - g(-h)) / 2
        finer, settled_f = quick_mp_derivatives(
            evaluate_mp, x0, W[~settled], f0_quick, dps, QUICK_STEP * QUICK_RETRY_FACTOR, size,
            odd_before=odd, scale=scale,
        )  # fmt: skip
        quick = _merge(quick, finer, settled, evaluations=quick.central.evaluations)
        settled = settled.copy()
        settled[~settled] = settled_f
    if np.all(settled):
        return replace(quick, digits=dps)
    # f(x) again in the ladder's own arithmetic: its noise model reads the rounding of f0
    f0 = evaluate_mp(x0, zero, dps)
    rest = _ladder_derivatives(
        evaluate_mp, x0, W[~settled], f0, dps, h_max, levels, max_extensions, scale
    )
    merged = _merge(quick, rest, settled, evaluations=quick.central.evaluations + 1)
    return replace(merged, digits=dps)


RESOLVE_FACTOR = 4
"""How many times ``dps`` :func:`resolving_digits` looks at an output that is exactly 0
(and at ``RESOLVE_FACTOR - 1`` times, to tell a value from round-off)."""

RESOLVE_AGREE = 1e-10
"""Relative agreement of the two high-precision values of a rounded zero: a value agrees
to far more than this, the round-off of terms that cancel (a mean of a layer norm) does not
agree at all (it shrinks with the digits)."""


def resolving_digits(evaluate_mp: MpFn, x0: np.ndarray, dps: int, f0: np.ndarray) -> int:
    """The digits at which every output of ``f`` that is exactly 0 at ``x0`` is resolved.

    An output exactly 0 at ``dps`` digits can be 0 (a dead ReLU, ``x - x``), the round-off
    of terms that cancel (a ReLU of the mean of a layer norm: 0, or 1e-76, or 1e-201,
    with the digits), or a value below the digits of the terms it is made of:
    ``log(erf(u))`` at ``u`` = 15.2 is ``log(1 - 1.5e-102)``, and ``erf(u)`` rounds to
    exactly 1 at 50 digits, so ``f`` is exactly 0 on the whole neighbourhood there and its
    differences give a derivative of 0 with no error at all (it is 8.5e-99). Evaluated at
    ``(RESOLVE_FACTOR - 1) * dps`` and ``RESOLVE_FACTOR * dps`` digits, only a value is
    nonzero and the same at both (within :data:`RESOLVE_AGREE`); then the reference runs
    at ``dps + ceil(-log10 |v|)`` digits (at most ``RESOLVE_FACTOR * dps``), where it
    keeps ``dps`` digits of itself.

    Parameters
    ----------
    evaluate_mp : callable
        ``(x0, dx, dps) -> y``, ``y`` an object array ``(m,)`` of mpmath numbers.
    x0 : ndarray, shape (n,)
    dps : int
    f0 : ndarray, shape (m,), object
        ``f(x0)`` at ``dps`` digits or more.

    Returns
    -------
    int
        ``dps``, or more where an output exactly 0 at ``dps`` digits is a value.
    """
    zero_at = [k for k, v in enumerate(np.ravel(f0)) if v == 0]
    if not zero_at:
        return dps
    zero = np.zeros_like(x0)
    try:
        lower = np.ravel(evaluate_mp(x0, zero, (RESOLVE_FACTOR - 1) * dps))
        high = np.ravel(evaluate_mp(x0, zero, RESOLVE_FACTOR * dps))
    except Exception:  # noqa: BLE001 - optional evidence: the digits asked for stand
        return dps
    sizes = [
        abs(high[k])
        for k in zero_at
        if high[k] != 0 and mpmath.isfinite(high[k])
        and abs(lower[k] - high[k]) <= RESOLVE_AGREE * abs(high[k])
    ]  # fmt: skip
    if not sizes:
        return dps
    need = dps + int(mpmath.ceil(-mpmath.log10(min(sizes))))
    return int(min(max(need, dps), RESOLVE_FACTOR * dps))


def _ladder_derivatives(
    evaluate_mp: MpFn,
    x0: np.ndarray,
    W: np.ndarray,
    f0: np.ndarray,
    dps: int,
    h_max: float,
    levels: int,
    max_extensions: int,
    scale: np.ndarray,
) -> DirectionalDerivatives:
    """The full mp ladder and Richardson tableaus (see :func:`mp_directional_derivatives`);
    ``scale`` (m,) is the size of ``f``'s round-off (:func:`rounding_scale`)."""
    m = f0.size
    d = W.shape[0]
    norms = np.sqrt(np.einsum("ij,ij->i", W, W))
    f0_float = np.array([float(v) for v in f0])
    unit = 10.0 ** (-dps)
    size = np.maximum(np.abs(f0_float), scale)
    sigma = np.broadcast_to(10.0 * unit * np.maximum(size, 1e-300), (d, m)).copy()

    def ladder(k: int, hs: np.ndarray) -> np.ndarray:
        out = np.empty((hs.size, 2, m), dtype=object)
        for i, h in enumerate(hs):
            out[i, 0] = evaluate_mp(x0, h * W[k], dps)
            out[i, 1] = evaluate_mp(x0, -h * W[k], dps)
        return out

    steps = step_ladder(h_max, levels * (1 + max_extensions))
    Ys = [ladder(k, steps[:levels]) for k in range(d)]
    evals = 2 * d * levels  # f0 is counted by the caller
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


def quick_mp_derivatives(
    evaluate_mp: MpFn,
    x0: np.ndarray,
    W: np.ndarray,
    f0: np.ndarray,
    dps: int,
    h: float = QUICK_STEP,
    size: np.ndarray | None = None,
    odd_before: np.ndarray | None = None,
    scale: np.ndarray | None = None,
) -> tuple[DirectionalDerivatives, np.ndarray]:
    """One mp central difference per direction, at a step far below any length scale.

    With ``g(t) = f(x + t w)``, evaluated at :data:`QUICK_EXTRA_DIGITS` more than
    ``dps`` digits, the estimate is ``D = (g(h) - g(-h)) / 2h`` and the one-sided
    derivatives are ``(g(h) - g(0)) / h`` and ``(g(0) - g(-h)) / h``. Their gap
    ``r - l`` is ``h g''`` for a smooth ``g``, and of the size of the jump where a
    kink lies within ``h`` of ``x`` (the central difference is then off by at most
    half of it). A direction is *settled* when, for every output, the gap and the
    round-off of the difference, ``10^(1-digits) max|g| / h``, are within
    :data:`MP_TARGET` of the entry's size. That asks of ``g`` only a length scale
    above ``h / MP_TARGET`` (about ``1e-4`` of the direction), and the truncation
    ``h^2 g''' / 6`` is then far smaller still. The error bar is half the gap plus
    the round-off plus ``MP_TARGET`` times the entry's size. The other directions
    need the full ladder.

    A jump at ``x`` leaves no gap where it is odd (``sign(x) cos(x)`` at 0: both
    one-sided differences are ``cos(h) / h``), and its central difference, about
    ``J / 2h``, reads like a derivative at one step; unlike a derivative's, it grows
    like ``1 / h`` when the step shrinks (see :func:`_odd_part_stalls`). A direction
    whose odd part ``(g(h) - g(-h)) / 2`` exceeds :data:`MP_TARGET` of its values is
    therefore not settled at the first step; at the retried step (``odd_before``) it
    settles only where that odd part shrank with the step, and the others go to the
    ladder, whose jump test reports the jump. An output whose derivatives are 0
    along every direction (``size`` 0: ``floor`` between its steps) is judged
    against its values instead.

    Parameters
    ----------
    evaluate_mp : callable
        ``(x0, dx, dps) -> y``, ``y`` an object array ``(m,)`` of mpmath numbers.
    x0 : ndarray, shape (n,)
        The point.
    W : ndarray, shape (d, n), float64
        Directions.
    f0 : ndarray, shape (m,), object
        ``f(x0)`` on mpmath numbers, at ``dps + QUICK_EXTRA_DIGITS`` digits (with
        fewer, its round-off bounds the one-sided differences').
    dps : int
        Decimal digits of the mpmath arithmetic.
    h : float
        The step, a power of two (default :data:`QUICK_STEP`).
    size : ndarray, shape (d, m), optional
        What each entry's gap and round-off are judged against; by default its own
        size, or the typical size of its output over these directions where larger
        (:func:`~polygrad.reference.differences._size_of_values`). A retry of some
        directions passes the sizes of the whole set: an entry that is 0 (the
        derivative of ``sqrt(x² + e)`` at 0) has no typical size among itself alone.
    odd_before : ndarray, shape (d, m), optional
        At a retried step: the odd parts ``h D`` of these directions at the step
        before (float64). Without it, an odd part above :data:`MP_TARGET` of the
        values leaves its direction unsettled (to be retried).
    scale : ndarray, shape (m,), optional
        The size of ``f``'s round-off per output where it exceeds ``|f|`` (a
        cancellation of larger terms; :func:`rounding_scale`): the round-off of the
        difference is taken relative to it.

    Returns
    -------
    derivatives : DirectionalDerivatives
        Arrays ``(d, m)`` with ``method == "mp"``; entries of unsettled
        directions are meaningless.
    settled : ndarray, shape (d,), bool
        The directions whose estimate can be used as it is.
    """
    d, m = W.shape[0], f0.size
    digits = dps + QUICK_EXTRA_DIGITS
    f0_size = np.abs(_floats(f0)) if scale is None else np.maximum(np.abs(_floats(f0)), scale)
    Y = np.empty((d, 2, m), dtype=object)  # g(h), g(-h)
    for k in range(d):
        for j, t in enumerate((h, -h)):
            Y[k, j] = evaluate_mp(x0, t * W[k], digits)
    gp, gm = Y[:, 0], Y[:, 1]
    fz = f0[None, :]
    central, right, left = (gp - gm) / (2 * h), (gp - fz) / h, (fz - gm) / h
    with np.errstate(all="ignore"):
        mag = np.max(np.abs(_floats(Y)), axis=1)  # (d, m)
        roundoff = 10.0 ** (1 - digits) * np.maximum(mag, f0_size[None]) / h
        roundoff = roundoff.reshape(d, m)
        if size is None:
            size = _size_of_values(_floats(central), np.sqrt(np.einsum("ij,ij->i", W, W)))
        gap = np.abs(_floats(right - left))
        values = np.maximum(mag, np.abs(_floats(f0))[None])
        judged = np.where(size > 0, size, values)  # all derivatives 0: against the values
        ok = (gap <= MP_TARGET * judged) & (roundoff <= MP_TARGET * judged)
        ok &= np.isfinite(mag) & np.isfinite(gap)
        ok &= ~_odd_part_stalls(_floats(central) * h, values, odd_before)
        error = 0.5 * gap + roundoff + MP_TARGET * size
        if odd_before is not None:
            error = error + _linear_remainder(_floats(central), odd_before, h)
    settled = np.all(ok, axis=1)
    step = np.full((d, m), h)
    sigma = np.broadcast_to(10.0 ** (-digits) * f0_size, (d, m)).copy()

    def est(value_mp: np.ndarray, err: np.ndarray) -> Estimate:
        value = _floats(value_mp)
        return Estimate(
            value=value,
            error=err + 0.5 * np.finfo(np.float64).eps * np.abs(value),
            step=step,
            noise=sigma,
            method="mp",
            evaluations=2 * d + 1,
            value_mp=value_mp,
            error_mp=err,
        )

    no_jump = np.zeros((d, m), dtype=bool)
    derivs = DirectionalDerivatives(
        est(central, error), est(right, gap + roundoff), est(left, gap + roundoff),
        no_jump, no_jump.copy(),
    )  # fmt: skip
    return derivs, settled


def _linear_remainder(central: np.ndarray, odd_before: np.ndarray, h: float) -> np.ndarray:
    """``(d, m)``: what a central difference at the retried step ``h`` may still be off by
    where it moves in proportion to the step: ``|D(h) - D(h / F)| F / (1 - F)`` with
    :data:`QUICK_RETRY_FACTOR` ``F``, the linear extrapolation's change.

    A smooth ``g``'s central difference changes like ``h^2``, which makes this vanish; one
    whose odd part falls like ``h^2`` (``g = t |t|``: ``y |y|`` at a zero of ``y``, whose
    one-sided differences agree) reads ``D(h) = c h``, no derivative: its true derivative
    0 lies within this bar.
    """
    before = odd_before / (h / QUICK_RETRY_FACTOR)  # the central difference at that step
    with np.errstate(all="ignore"):
        change = np.abs(central - before)
    change = np.where(np.isfinite(change), change, 0.0)
    return change * QUICK_RETRY_FACTOR / (1 - QUICK_RETRY_FACTOR)


def _odd_part_stalls(
    odd: np.ndarray, values: np.ndarray, odd_before: np.ndarray | None
) -> np.ndarray:
    """``(d, m)`` bool: the odd part ``(g(h) - g(-h)) / 2`` may be a jump, not ``h g'``.

    At the first step (``odd_before`` None): where it exceeds :data:`MP_TARGET` of the
    values (a derivative moves it by ``h g'``, far below that unless ``g`` is near a
    zero of itself or its length scale is below the quick step's reach). At a retried
    step :data:`QUICK_RETRY_FACTOR` times smaller: where it has not shrunk by at least
    the square root of that factor (a derivative's shrinks by the factor, a jump's not
    at all: its central difference grows like ``1 / h``).
    """
    with np.errstate(invalid="ignore"):
        if odd_before is None:
            return np.abs(odd) > MP_TARGET * values
        return np.abs(odd) > np.sqrt(QUICK_RETRY_FACTOR) * np.abs(odd_before)


def _floats(a: np.ndarray) -> np.ndarray:
    """An object array of mpmath numbers as float64 (same shape)."""
    arr = np.asarray(a, dtype=object)
    return np.array([float(v) for v in arr.ravel()], dtype=np.float64).reshape(arr.shape)


def _merge(
    quick: DirectionalDerivatives,
    rest: DirectionalDerivatives,
    settled: np.ndarray,
    evaluations: int,
) -> DirectionalDerivatives:
    """The quick estimates of the settled directions, the ladder's of the others."""
    total = evaluations + rest.central.evaluations

    def pick(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = np.array(a, copy=True, dtype=np.result_type(a, b))
        out[~settled] = b
        return out

    def est(q: Estimate, r: Estimate) -> Estimate:
        assert q.value_mp is not None and r.value_mp is not None
        assert q.error_mp is not None and r.error_mp is not None
        return Estimate(
            value=pick(q.value, r.value),
            error=pick(q.error, r.error),
            step=pick(q.step, r.step),
            noise=pick(q.noise, r.noise),
            method="mp",
            evaluations=total,
            value_mp=pick(q.value_mp, r.value_mp),
            error_mp=pick(q.error_mp, r.error_mp),
        )

    return DirectionalDerivatives(
        central=est(quick.central, rest.central),
        right=est(quick.right, rest.right),
        left=est(quick.left, rest.left),
        jump_right=pick(quick.jump_right, rest.jump_right),
        jump_left=pick(quick.jump_left, rest.jump_left),
    )
