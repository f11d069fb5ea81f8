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
from dataclasses import dataclass, replace

import numpy as np

from .richardson import Estimate, TableauResult, _to_float, neville, step_ladder

__all__ = [
    "DirectionalDerivatives",
    "UnseenNoise",
    "directional_derivatives",
    "evaluate_ladder",
    "merge_rows",
    "rows_per_batch",
]

BATCH_BYTES = 1 << 25
"""Largest block of points (float64) built at once: a batch of rows of a large input is
cut so that the points, not only the rows, stay within this many bytes."""


def rows_per_batch(n: int, max_rows: int) -> int:
    """How many points of ``n`` float64 coordinates to build and evaluate at once.

    Parameters
    ----------
    n : int
        Number of coordinates of a point (the flattened input size).
    max_rows : int
        The caller's own limit on rows per batch (``batch_size``).

    Returns
    -------
    int
        ``min(max_rows, BATCH_BYTES // (8 n))``, at least 1: a batch of rows never
        holds more than :data:`BATCH_BYTES` of points (32 MiB), whatever ``n``.
    """
    return max(1, min(int(max_rows), BATCH_BYTES // (8 * max(int(n), 1))))


FINE_LEVELS = 4
"""The finest steps of a ladder whose own estimate must confirm the one chosen (see the
``fine_levels`` of :func:`polygrad.reference.richardson.neville`)."""

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
    digits : int or None
        For an mp reference, the decimal digits its arithmetic used (more than asked
        where an output is exactly 0 at the digits asked; see
        :func:`polygrad.reference.mp.resolving_digits`); None otherwise.
    """

    central: Estimate
    right: Estimate
    left: Estimate
    jump_right: np.ndarray
    jump_left: np.ndarray
    digits: int | None = None


@dataclass(frozen=True)
class UnseenNoise:
    """Where the noise measurement saw ``f`` constant, and how to measure it there.

    Attributes
    ----------
    mask : ndarray of bool, shape (d, m)
        Outputs along directions over whose noise samples ``f`` did not move (ECnoise's
        code 2), and whose values are no exact staircase (``floor``'s whole numbers).
    measure : callable
        ``(W_rows (k, n), moved_at (k,)) -> (sigma (k, m), evaluations)``: the noise along
        those directions, given the step at which ``f`` first moved along each (see
        :func:`polygrad.reference.noise.tread_noise`).
    """

    mask: np.ndarray
    measure: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, int]]


def evaluate_ladder(
    fn: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    W: np.ndarray,
    steps: np.ndarray,
    max_rows: int,
    center: dict[str, np.ndarray] | None = None,
) -> np.ndarray:
    """``fn`` at ``x0 ± h w`` for every direction and step, in batches of whole directions.

    Parameters
    ----------
    fn : callable
        ``(B, n) -> (B, m)`` batch evaluation.
    x0 : ndarray, shape (n,)
    W : ndarray, shape (d, n)
    steps : ndarray, shape (L,)
    max_rows : int
        Largest batch passed to ``fn`` (whole directions where one direction's
        ``2 L`` rows fit the byte budget of :func:`rows_per_batch`, else pieces of
        one direction).
    center : dict, optional
        If given, ``x0`` itself is evaluated as the first row of the first batch
        (through the same code path as its neighbours) and stored under ``"f0"``.

    Returns
    -------
    ndarray, shape (d, L, 2, m)
        ``[..., 0, :]`` at ``x0 + h w``, ``[..., 1, :]`` at ``x0 - h w``.
    """
    d, n = W.shape
    L = steps.size
    per_dir = 2 * L
    cap = rows_per_batch(n, max_rows)
    coef = (steps[:, None] * np.array([1.0, -1.0])[None, :]).reshape(-1)  # (2 L,): +h, -h
    if cap < per_dir + 1:  # one direction's points alone exceed the batch budget
        return _ladder_in_pieces(fn, x0, W, coef, cap, center)
    dirs_per_chunk = max(1, cap // per_dir)
    out = []
    # one buffer reused from chunk to chunk: a fresh block of a large input costs more in
    # first-touch page faults than in arithmetic
    buf = np.empty((1 + min(d, dirs_per_chunk) * per_dir, n))
    for a in range(0, d, dirs_per_chunk):
        Wc = W[a : a + dirs_per_chunk]
        extra = 1 if center is not None and a == 0 else 0
        X = buf[: extra + Wc.shape[0] * per_dir]
        X[:extra] = x0
        pts = X[extra:].reshape(Wc.shape[0], per_dir, n)
        np.multiply(coef[None, :, None], Wc[:, None, :], out=pts)
        pts += x0
        Y = fn(X)
        if extra and center is not None:
            center["f0"] = Y[0]
        out.append(Y[extra:].reshape(Wc.shape[0], L, 2, -1))
    return np.concatenate(out, axis=0)


def _ladder_in_pieces(
    fn: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    W: np.ndarray,
    coef: np.ndarray,
    cap: int,
    center: dict[str, np.ndarray] | None,
) -> np.ndarray:
    """:func:`evaluate_ladder` for an input so wide that one direction's points exceed
    the batch budget (a long ladder at n = 1e6: 21 points, 168 MB): each direction's
    points (after ``x0``, where ``center`` asks for it) in pieces of at most ``cap``
    rows, built in one reused buffer, with the same values as a whole batch's."""
    d, n = W.shape
    buf = np.empty((cap, n))
    out = []
    for j in range(d):
        rows: list[float | None] = [None] if center is not None and j == 0 else []  # None: x0
        rows += [float(c) for c in coef]
        values = []
        for a in range(0, len(rows), cap):
            piece = rows[a : a + cap]
            X = buf[: len(piece)]
            for i, c in enumerate(piece):
                if c is None:
                    X[i] = x0
                else:
                    np.multiply(c, W[j], out=X[i])
                    X[i] += x0
            values.append(fn(X))
        Y = np.concatenate(values)
        if center is not None and j == 0:
            center["f0"] = Y[0]
            Y = Y[1:]
        out.append(Y.reshape(1, coef.size // 2, 2, -1))
    return np.concatenate(out, axis=0)


def _tableaus(
    Y: np.ndarray,
    f0: np.ndarray,
    steps: np.ndarray,
    sigma: np.ndarray,
    value_eps: float,
    cross_check: bool = False,
    sides: bool = True,
) -> tuple:
    """Central, right and left tableaus of values ``Y`` ``(d, L, 2, m)``; with ``sides``
    False only the central one (``(c,)``)."""
    h = steps[:, None, None]
    Yp = np.moveaxis(Y[:, :, 0], 1, 0)  # (L, d, m)
    Ym = np.moveaxis(Y[:, :, 1], 1, 0)
    with np.errstate(all="ignore"):
        D = (Yp - Ym) / (2 * h)
        Fp = (Yp - f0) / h
        Fm = (f0 - Ym) / h
    # Round-off grows with the size of the values: the noise measured at x is scaled
    # to each step by |g(±h)| / |g(0)| (large steps can reach much larger values).
    # The size of f near x is that over the finest steps, not |g(0)| alone, which can
    # be an accidental zero (cancelling terms) far below its neighbours.
    mag = _to_float(np.maximum(np.abs(Yp), np.abs(Ym)))
    with np.errstate(all="ignore"):
        f0a = np.maximum(_to_float(np.abs(f0))[None, :], np.nan_to_num(mag[-1]))
    with np.errstate(all="ignore"):
        grow = np.where(f0a > 0, mag / np.where(f0a > 0, f0a, 1.0), 1.0)
    grow = np.where(np.isfinite(grow), np.maximum(grow, 1.0), 1.0)
    sig = np.maximum(sigma[None] * grow, value_eps * np.where(np.isfinite(mag), mag, 0.0))
    sd_c = np.sqrt(2.0) / 2.0 * sig / h
    sd_1 = np.sqrt(2.0) * sig / h
    const = _constant_entries(Y, f0, sd_c)
    tail = constant_tail(Y, f0)
    c = _neville(D, steps, 2, 2, sd_c, value_eps, cross_check, const)
    c = _on_constant_tails(c, D, steps, 2, sd_c, value_eps, cross_check, tail)
    if not sides:
        return (c,)
    r = _neville(Fp, steps, 1, 1, sd_1, value_eps, cross_check, const)
    l = _neville(Fm, steps, 1, 1, sd_1, value_eps, cross_check, const)
    r = _on_constant_tails(r, Fp, steps, 1, sd_1, value_eps, cross_check, tail)
    l = _on_constant_tails(l, Fm, steps, 1, sd_1, value_eps, cross_check, tail)
    return c, r, l


def constant_tail(Y: np.ndarray, f0: np.ndarray) -> np.ndarray:
    """``(d, m)`` int: how many of the finest steps see ``f(x +- h w)`` equal to ``f(x)``
    bitwise on both sides (0 for mpmath values).

    Where that holds at some of the finest steps but not at the largest, ``f`` is
    constant near ``x`` along the direction and its larger steps cross a step of it
    (``floor`` 0.28 from an integer, with steps up to 2): the derivative there is that
    of the constant run, and larger steps only cross more of its steps.
    """
    if Y.dtype == object:
        return np.zeros((Y.shape[0], Y.shape[-1]), dtype=np.int64)
    with np.errstate(invalid="ignore"):
        same = (Y[:, :, 0] == f0) & (Y[:, :, 1] == f0)  # (d, L, m)
    return np.sum(np.cumprod(same[:, ::-1], axis=1), axis=1)


def _on_constant_tails(
    t: TableauResult, D: np.ndarray, steps: np.ndarray, p: int, sd: np.ndarray,
    value_eps: float, cross_check: bool, tail: np.ndarray,
) -> TableauResult:  # fmt: skip
    """``t`` with the entries constant on two or more of the finest steps, but not on all
    (:func:`constant_tail`), estimated from those steps alone (their quotients are all
    exactly 0; the error bar is that of the noise at the largest of them)."""
    L = steps.size
    local = (tail >= 2) & (tail < L)
    if not np.any(local):
        return t
    fields = {f: np.array(getattr(t, f), copy=True) for f in _FIELDS}
    for T in np.unique(tail[local]):
        rows, cols = np.nonzero(local & (tail == T))
        run = slice(L - T, L)
        sub = neville(D[run, rows, cols][:, None], steps[run], p, p,
                      sd[run, rows, cols][:, None], value_eps, cross_check=cross_check)  # fmt: skip
        for f in _FIELDS:
            v = getattr(sub, f)[0]
            fields[f][rows, cols] = v + (L - T) if f == "level" else v
    return TableauResult(*(fields[f] for f in _FIELDS))


def _constant_entries(Y: np.ndarray, f0: np.ndarray, sd: np.ndarray) -> np.ndarray | None:
    """``(d, m)`` bool: outputs whose every value along the direction equals ``f(x)``
    bitwise (an off-diagonal entry of an elementwise function, a padded zero), with
    finite noise; None for mpmath values, or where there are none."""
    if Y.dtype == object:
        return None
    with np.errstate(invalid="ignore"):
        const = np.all(Y == f0, axis=(1, 2)) & np.all(np.isfinite(sd), axis=0)
    return const if np.any(const) else None


_SCALABLE = (2.0**-900, 2.0**900)
"""Noise of a constant entry for which one tableau, scaled, stands (see :func:`_neville`);
a subnormal one does not scale exactly, and entries with the same noise share a tableau."""


def _neville(
    D: np.ndarray, steps: np.ndarray, p0: int, dp: int, sd: np.ndarray, value_eps: float,
    cross_check: bool, const: np.ndarray | None,
) -> TableauResult:  # fmt: skip
    """:func:`~polygrad.reference.richardson.neville` of ``D`` ``(L, d, m)``, where the
    entries ``const`` are constant along their direction.

    Their quotients are all exactly 0, and the noise at each step scales like ``1/h``
    from one value: every such entry's tableau is one tableau scaled (its value and
    truncation 0, its noise and error bar proportional to the noise, the entry chosen
    the same), and entries with the same noise have the same tableau. So a full check
    of a function with a sparse Jacobian (elementwise, padding, indexing) builds
    tableaus only for the entries that move, and a few for the rest.
    """
    if const is None:
        return neville(D, steps, p0, dp, sd, value_eps, cross_check=cross_check)
    L = D.shape[0]
    Df, sdf, flat = D.reshape(L, -1), sd.reshape(L, -1), const.reshape(-1)
    out: dict[str, np.ndarray] = {}
    live = np.flatnonzero(~flat)
    if live.size:
        t = neville(Df[:, live], steps, p0, dp, sdf[:, live], value_eps,
                    cross_check=cross_check, size=D.size)  # fmt: skip
        _put(out, t, live, None, flat.size, np.arange(live.size))
    where = np.flatnonzero(flat)
    sd_max = np.max(sdf[:, where], axis=0)
    scalable = (sd_max >= _SCALABLE[0]) & (sd_max <= _SCALABLE[1])
    if np.any(scalable):  # one tableau, scaled
        idx = where[scalable]
        one = neville(Df[:, idx[:1]], steps, p0, dp, sdf[:, idx[:1]], value_eps,
                      cross_check=cross_check, size=D.size)  # fmt: skip
        scale = sd_max[scalable] / sd_max[scalable][0]
        _put(out, one, idx, scale, flat.size)
    rest = where[~scalable]
    if rest.size:  # one tableau per distinct noise (grouped by its largest value)
        _, first, group = np.unique(sd_max[~scalable], return_index=True, return_inverse=True)
        reps = rest[first]
        group = np.asarray(group).reshape(-1)
        same = np.all(sdf[:, rest] == sdf[:, reps[group]], axis=0)
        some = neville(np.zeros_like(Df[:, reps]), steps, p0, dp, sdf[:, reps], value_eps,
                       cross_check=cross_check, size=D.size)  # fmt: skip
        _put(out, some, rest[same], None, flat.size, group[same])
        odd = rest[~same]
        if odd.size:
            t = neville(Df[:, odd], steps, p0, dp, sdf[:, odd], value_eps,
                        cross_check=cross_check, size=D.size)  # fmt: skip
            _put(out, t, odd, None, flat.size, np.arange(odd.size))
    return TableauResult(*(out[name].reshape(const.shape) for name in _FIELDS))


_FIELDS = ("value", "error", "truncation", "noise", "level", "order")


def _put(
    out: dict[str, np.ndarray], t: TableauResult, idx: np.ndarray, scale: np.ndarray | None,
    size: int, pick: np.ndarray | None = None,
) -> None:  # fmt: skip
    """Write tableau results ``t`` (its first entry scaled by ``scale``, or its entries
    ``pick``) into the flat arrays ``out`` at ``idx``."""
    for name in _FIELDS:
        a = getattr(t, name)
        if name not in out:
            out[name] = np.zeros(size, dtype=a.dtype)
        if pick is not None:
            out[name][idx] = a[pick]
        elif name in ("noise", "error"):
            out[name][idx] = a[0] * scale
        else:
            out[name][idx] = a[0]


def _jumps(
    Y: np.ndarray,
    f0: np.ndarray,
    sigma: np.ndarray,
    side: int,
    tab: TableauResult,
    value_eps: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Whether ``g(±h) - g(0)`` does not vanish like ``h``, and its sign.

    Three conditions: ``|g(±h_k) - g(0)|`` stops shrinking over the three finest
    steps (ratio above :data:`JUMP_RATIO`); the one-sided tableau did not
    converge (its error bar exceeds 10% of its value); and the odd part
    ``(g(h) - g(-h)) / 2`` or the even part ``(g(h) + g(-h)) / 2 - g(0)`` of the
    differences stops shrinking too (or cannot be formed: the other side is not
    finite, as for ``sqrt`` at 0). The last two keep strong curvature, whose
    one-sided differences shrink slowly where linear and quadratic terms cancel,
    from being mistaken for a jump: a one-sided difference is the sum of the two
    parts, and where each shrinks like ``h`` or faster, so does it. (A random
    direction of a sum over ``n`` inputs meets this: its second derivative grows
    like ``n``, its first like ``sqrt(n)``.)
    """
    with np.errstate(all="ignore"):
        signed = _to_float((Y[:, -3:, side] - f0) * (1.0 if side == 0 else -1.0))  # (d, 3, m)
        delta = np.abs(signed)
        ratios = delta[:, 1:] / delta[:, :-1]
        odd = np.abs(_to_float(Y[:, -3:, 0] - Y[:, -3:, 1]))
        even = np.abs(_to_float(Y[:, -3:, 0] + Y[:, -3:, 1] - 2 * f0))
        # where the other side is not finite (sqrt at 0) the parts say nothing
        stalls = (
            np.any(odd[:, 1:] > JUMP_RATIO * odd[:, :-1], axis=1)
            | np.any(even[:, 1:] > JUMP_RATIO * even[:, :-1], axis=1)
            | ~np.all(np.isfinite(odd) & np.isfinite(even), axis=1)
        )
        # an offset of a few units of round-off between g(0) and its neighbours (two code
        # paths, e.g. one point alone and a vectorized batch, round differently) does not
        # shrink with h either: it is not a jump
        size = np.maximum(_to_float(np.abs(f0))[None, :], _to_float(np.abs(Y[:, -1, side])))
        big = delta[:, -1] > 100.0 * np.maximum(sigma, value_eps * size)
        jump = (
            np.all(ratios > JUMP_RATIO, axis=1) & big & np.all(np.isfinite(delta), axis=1) & stalls
        )
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
    h_floor: float = 2.0**-24,
    first_levels: int = 0,
    resolution: float = 0.0,
    first_start: int = 0,
    unseen: UnseenNoise | None = None,
    verify: Callable[[np.ndarray], tuple[np.ndarray, int]] | None = None,
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
        downwards by ``refine_levels`` for directions limited by truncation at
        the finest step, whose best estimate over their :data:`FINE_LEVELS`
        finest steps alone is still limited by truncation and short of the
        target (the estimate chosen above them is unconfirmed: steps far beyond
        the function's length scale alias it, or see it as exactly 0, and their
        tableau looks converged), that have no finite estimate at any step, or
        whose left and right estimates disagree (unless the kink is pinned at
        x, see ``resolution``); upwards for
        directions whose error bar exceeds ``target_relative_error`` times the
        derivative (or, if larger, times the length of the direction times the
        root mean square of that output's derivatives per unit length along all
        ``W``), by the levels the excess asks for, at most ``refine_levels`` at a
        time, ``2 refine_levels`` in all and up to steps of 32.
    target_relative_error : float
        Accuracy below which the ladder is not extended upwards.
    h_floor : float
        The ladder is not extended below this step. Left and right
        derivatives that still disagree at the finest step mark a kink.
    first_levels : int
        With ``0 < first_levels < levels``, only the ``first_levels`` largest
        steps are evaluated first. A direction is *settled* there, and gets no
        other evaluation, when its values are finite, its central estimate meets
        ``target_relative_error`` (error bar included) and its left and right
        estimates agree with it. A direction that misses the target through noise
        alone moves up by the levels it needs (see ``_levels_up``); every other
        one gets the rest of the ladder below. Two steps are the fewest that give
        an error bar (the difference of the two central differences bounds the
        truncation of the finer one); a smooth direction usually settles on them,
        which halves the cost of a large check. Meant for a short ladder, whose
        steps all lie where round-off and truncation are both small.
    first_start : int
        Index of the ladder step that the first steps begin at (0: the largest).
        Directions that do not settle there, nor only need larger steps against
        noise, get the ladder's steps above as well as those below, so that
        their tableau is the whole ladder's. A start one step below the largest
        quarters the truncation the error bar of the first pair carries, while
        the round-off of a short ladder's steps stays far below its target.
    resolution : float
        Distance (in units of the direction) below which two points cannot be
        told apart in the working dtype (its epsilon, for directions scaled like
        the input). Left and right derivatives that disagree, but are each
        resolved so well that a kink explaining them must lie within this
        distance of ``x``, are not refined further: the kink is at ``x`` as far
        as the working dtype can tell.
    unseen : UnseenNoise, optional
        Outputs whose noise was not seen. Where the ladder shows one move along a
        direction, ``f`` is a staircase wider than the noise samples (an intermediate
        rounding far coarser than ``f``), whose noise ``unseen.measure`` measures over
        several treads before any estimate (read at its own ulps, it gives 0, or one
        tread's slope, with an error bar of ulps).
    verify : callable, optional
        ``W_rows (k, n) -> (sigma (k, m), evaluations)``: the noise measured again in a way
        that no pattern of the round-off fools (jittered samples,
        :func:`polygrad.reference.noise.jittered_noise`). Before a direction's ladder
        goes below its steps (where round-off weighs most), its ``sigma`` is raised to
        it, and the move is decided again: a noise that ECnoise's equally spaced samples
        aliased to a fraction of itself reads as truncation at every step and drives the
        ladder down to steps whose differences are all round-off.

    Returns
    -------
    DirectionalDerivatives
    """
    steps = step_ladder(h_max, levels)
    d = W.shape[0]
    norms = np.sqrt(np.einsum("ij,ij->i", W, W))
    sigma = np.broadcast_to(sigma, (d, f0.size)).copy()
    staged = 0 < first_levels < levels
    # g(0), in every one-sided difference, is evaluated again in the first batch: alone it
    # can round otherwise than its batched neighbours, which reads as a jump of a constant
    center: dict[str, np.ndarray] = {}
    start = min(max(first_start, 0), levels - first_levels) if staged else 0
    steps = steps[start : start + first_levels] if staged else steps
    Y = evaluate_ladder(fn, x0, W, steps, max_rows, center)
    f0 = center.get("f0", f0)
    evals = d * steps.size * 2 + len(center)
    measured = np.zeros(d, dtype=bool)  # directions whose staircase noise is measured
    evals += _measure_treads(unseen, W, Y, f0, steps, sigma, measured)
    sol = _solve(Y, f0, steps, sigma, eps)
    settled = np.zeros(d, dtype=bool)
    raised = np.zeros(d, dtype=np.int64)  # levels each direction has moved above the ladder
    if staged:
        below = levels - start - first_levels
        settled, k_up, k_dn = _first_moves(
            sol, Y, norms, target_relative_error, resolution, refine_levels, start, below
        )
        raised += np.maximum(k_up - start, 0)
        if np.any(k_up) or np.any(k_dn):
            Y, steps, added = _extend(fn, x0, W, Y, steps, k_up, k_dn, max_rows)
            evals += added
            evals += _measure_treads(unseen, W, Y, f0, steps, sigma, measured)
            sol = _solve(Y, f0, steps, sigma, eps)
    kinked = np.zeros(d, dtype=bool)
    verified = np.zeros(d, dtype=bool)  # directions whose noise jittered samples measured
    for _ in range(max_refinements):
        args = (Y, f0, steps, norms, target_relative_error, resolution, h_floor, settled,
                kinked, refine_levels)  # fmt: skip
        k_up, k_dn, kinked = _refinement_moves(sol, *args)
        if verify is not None and np.any((k_dn > 0) & ~verified):
            evals += _verify_noise(verify, W, sigma, k_dn > 0, verified)
            sol = _solve(Y, f0, steps, sigma, eps)
            k_up, k_dn, kinked = _refinement_moves(sol, *args)
        # each direction moves up by at most 2 refine_levels in all (and to steps of 32)
        k_up = np.minimum(k_up, 2 * refine_levels - raised)
        raised += k_up
        if not np.any(k_up) and not np.any(k_dn):
            break
        Y, steps, added = _extend(fn, x0, W, Y, steps, k_up, k_dn, max_rows)
        evals += added
        evals += _measure_treads(unseen, W, Y, f0, steps, sigma, measured)
        sol = _solve(Y, f0, steps, sigma, eps)

    def est(t: TableauResult, step: np.ndarray) -> Estimate:
        value, noise = np.asarray(t.value, dtype=np.float64), np.array(sigma, copy=True)
        return Estimate(value, t.error, step, noise, method=method, evaluations=evals)

    sol = _confirmed(_solve(Y, f0, steps, sigma, eps, final=sol), Y, f0, steps, sigma)
    right = _with_jumps(est(sol.r, sol.step_r), sol.jump_r, sol.sgn_r)
    left = _with_jumps(est(sol.l, sol.step_l), sol.jump_l, sol.sgn_l)
    return DirectionalDerivatives(est(sol.c, sol.step_c), right, left, sol.jump_r, sol.jump_l)


def _measure_treads(
    unseen: UnseenNoise | None, W: np.ndarray, Y: np.ndarray, f0: np.ndarray, steps: np.ndarray,
    sigma: np.ndarray, measured: np.ndarray,
) -> int:  # fmt: skip
    """Raise ``sigma`` (``(d, m)``, in place) where an unseen output moved on the ladder
    ``Y`` (``(d, L, 2, m)``) to the noise ``unseen.measure`` finds, along the directions
    not ``measured`` before (``(d,)``, updated in place); its evaluations."""
    if unseen is None or Y.dtype == object:
        return 0
    with np.errstate(invalid="ignore"):
        moved = np.any(Y != f0, axis=2) & unseen.mask[:, None, :]  # (d, L, m)
    at = np.where(moved, steps[None, :, None], np.inf).min(axis=(1, 2))  # (d,)
    rows = np.flatnonzero(np.isfinite(at) & ~measured)
    if rows.size == 0:
        return 0
    measured[rows] = True
    found, evals = unseen.measure(W[rows], at[rows])
    sigma[rows] = np.where(unseen.mask[rows], np.fmax(sigma[rows], found), sigma[rows])
    return evals


def _verify_noise(
    verify: Callable[[np.ndarray], tuple[np.ndarray, int]], W: np.ndarray, sigma: np.ndarray,
    descending: np.ndarray, verified: np.ndarray,
) -> int:  # fmt: skip
    """Raise ``sigma`` (``(d, m)``, in place) to ``verify``'s noise along the ``descending``
    directions (``(d,)``) not ``verified`` before (updated in place); its evaluations."""
    rows = np.flatnonzero(descending & ~verified)
    verified[rows] = True
    found, evals = verify(W[rows])
    sigma[rows] = np.fmax(sigma[rows], found)
    return evals


def _confirmed(
    sol: _Solution, Y: np.ndarray, f0: np.ndarray, steps: np.ndarray, sigma: np.ndarray
) -> _Solution:
    """``sol`` with its central and one-sided estimates checked against the plain
    differences of the finer steps (:func:`_confirmed_by_finer_steps`)."""
    plus, minus = Y[:, :, 0], Y[:, :, 1]
    with np.errstate(all="ignore"):
        h = steps[None, :, None]
        central = (plus - minus) / (2.0 * h)
        right, left = (plus - f0) / h, (f0 - minus) / h
    return replace(
        sol,
        c=_confirmed_by_finer_steps(sol.c, sol.step_c, central, (plus, minus), steps, sigma),
        r=_confirmed_by_finer_steps(sol.r, sol.step_r, right, (plus,), steps, 2.0 * sigma),
        l=_confirmed_by_finer_steps(sol.l, sol.step_l, left, (minus,), steps, 2.0 * sigma),
    )


FINER_NOISE = 4.0
"""A plain central difference at step ``h`` is allowed ``FINER_NOISE sigma / h`` of
round-off in :func:`_confirmed_by_finer_steps`."""

FINER_GROWTH = 4.0
"""How far a finer step's truncation may exceed the chosen step's in
:func:`_confirmed_by_finer_steps` (higher-order terms)."""


def _confirmed_by_finer_steps(
    c: TableauResult, step_c: np.ndarray, T: np.ndarray, ends: tuple[np.ndarray, ...],
    steps: np.ndarray, sigma: np.ndarray,
) -> TableauResult:  # fmt: skip
    """``c`` with its error bar widened where a finer step contradicts it.

    In the region where the tableau's assumption holds (``T(h) = D + c_k h^k + ...``),
    a plain difference ``T(h)`` (central, or one-sided) at a step below the chosen one
    is no further from the estimate ``D`` than the chosen step's own difference is,
    beyond its round-off. A tableau whose steps all lie on a plateau of ``f`` (erf saturated to
    1 at both ends: every difference there exactly 0, so it looks converged) chooses
    ``D = 0 +- 3e-16`` while the steps between it and the finest ones give 5e-14 to
    3e-9: those finer steps, not the plateau, are the Taylor region, and ``D`` is
    unconfirmed. Its error bar is widened to the largest such excess, so that the
    entry reads as unresolved instead of being decided on a wrong reference. Where
    the end points at the chosen step hold exactly the values of the step above it
    (``f`` constant there: a plateau, whose one-sided differences fall like ``1/h``
    and pass for noise at every step), no round-off is granted to the finer steps.
    ``T`` is ``(d, L, m)`` on ``steps`` (``(L,)``, largest first, NaN where a
    direction has no value), ``ends`` the values ``(d, L, m)`` it is made of (both
    ends of a central difference, one of a one-sided one); ``sigma`` ``(d, m)``
    (the noise of one difference is ``sigma / h``); ``step_c`` ``(d, m)``.
    """
    with np.errstate(all="ignore"):
        D = np.asarray(c.value, dtype=np.float64)[:, None, :]
        at = np.abs(steps[None, :, None] - step_c[:, None, :]) <= 0.0  # the chosen step
        above = np.roll(at, -1, axis=1)  # the step above the chosen one (twice as long)
        above[:, -1] = False
        flat = np.ones(c.value.shape, dtype=bool)
        for g in ends:
            here = np.nanmax(np.where(at, g, np.nan), axis=1)
            there = np.nanmax(np.where(above, g, np.nan), axis=1)
            flat &= here == there
        grant = np.where(flat, 0.0, FINER_NOISE)[:, None, :]
        off = np.abs(T - D) - grant * sigma[:, None, :] / steps[None, :, None]
        own = np.nanmax(np.where(at, np.abs(T - D), np.nan), axis=1)
        finer = steps[None, :, None] < step_c[:, None, :]
        excess = np.nanmax(np.where(finer & np.isfinite(off), off, -np.inf), axis=1)
        allowed = FINER_GROWTH * np.fmax(np.nan_to_num(own), c.error)
        widen = np.isfinite(excess) & (excess > allowed) & np.isfinite(c.error)
    if not np.any(widen):
        return c
    return replace(c, error=np.where(widen, np.maximum(c.error, excess), c.error))


def _refinement_moves(
    sol: _Solution, Y: np.ndarray, f0: np.ndarray, steps: np.ndarray, norms: np.ndarray,
    accuracy: float, resolution: float, h_floor: float, settled: np.ndarray,
    kinked: np.ndarray, refine_levels: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """Levels each direction's ladder moves up and down in one refinement, and the
    directions known to have a kink.

    The ladder moves where the best estimate sits at its edge: downwards where it is
    still limited by truncation at the finest step (a length scale shorter than
    ``|x|``), upwards where it is limited by noise (a length scale longer than ``|x|``,
    e.g. ``x`` near 0 for a function of scale 1). ``settled`` directions (on their
    first steps) move neither way; a direction whose one-sided derivatives disagreed
    (``kinked``, now or before) has a kink above its finest steps: longer steps would
    cross it again, so its ladder never moves up.
    """
    c = sol.c
    finest = sol.finest[:, None]
    truncated = c.truncation > 3.0 * c.noise
    down = np.any((sol.step_c <= finest) & truncated, axis=1)
    size = _size(c, norms)
    with np.errstate(invalid="ignore"):
        miss = c.error > accuracy * size
        # the best estimate of the finest steps alone is still limited by truncation
        # and short of the target: the estimate chosen above them is unconfirmed (a
        # length scale far shorter than |x| aliases the large steps, or f is exactly
        # 0 on both sides of them, and their tableau looks converged)
        fine = sol.fine
        unconfirmed = (fine.truncation > 3.0 * fine.noise) & (fine.error > accuracy * size)
    down |= np.any(unconfirmed, axis=1)
    # no finite estimate at any step (f is not finite on one side of each): smaller
    # steps may stay inside the domain (a matrix a step away from indefinite)
    down |= ~np.any(np.isfinite(np.asarray(c.value, dtype=np.float64)), axis=1)
    # left and right derivatives that disagree: a kink within the finest step, or
    # one that the finer steps of a longer ladder resolve (then they agree again)
    # (for a smooth function central, left and right estimates share one limit)
    split_any, resolved = _kinks(sol, resolution)
    down |= split_any & ~resolved
    # a kink pinned at x whose central estimate meets the target needs no finer steps
    down &= ~(resolved & ~np.any(miss, axis=1))
    down &= (sol.finest > h_floor) & ~settled
    kinked = kinked | split_any
    up = ~down & ~kinked & ~settled
    # an entry constant on its finest steps whose larger ones change: f has a step
    # between them, and larger steps only cross more of its steps
    with np.errstate(invalid="ignore"):
        tail = constant_tail(Y, f0)
    up &= ~np.any((tail >= 2) & (tail < steps.size), axis=1)
    k_up = np.where(up, _levels_up(sol, size, accuracy, refine_levels), 0)
    return k_up, np.where(down, refine_levels, 0), kinked


def _first_moves(
    sol: _Solution,
    Y: np.ndarray,
    norms: np.ndarray,
    accuracy: float,
    resolution: float,
    most: int,
    above: int,
    below: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(settled, k_up, k_dn)``, each ``(d,)``, after the first steps of a staged ladder
    (``above`` of its steps lie above them, ``below`` below): settled directions get
    nothing more; a direction that misses the target only through noise moves up by the
    levels it needs (at most ``most``); a kink pinned at x by the first steps needs no
    finer ones (see the refinement loop of :func:`directional_derivatives`); every other
    direction gets the rest of the ladder, above and below."""
    size = _size(sol.c, norms)
    settled, noisy = _triage(sol, Y, size, accuracy)
    _, resolved = _kinks(sol, resolution)
    pinned = resolved & np.all(np.isfinite(Y), axis=(1, 2, 3))
    k_up = np.where(noisy, _levels_up(sol, size, accuracy, most), 0)
    rest = ~settled & ~pinned & ~(noisy & (k_up > 0))
    return settled, np.where(rest, above, k_up), np.where(rest, below, 0)


def _extend(
    fn: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    W: np.ndarray,
    Y: np.ndarray,
    steps: np.ndarray,
    k_up: np.ndarray,
    k_dn: np.ndarray,
    max_rows: int,
) -> tuple[np.ndarray, np.ndarray, int]:
    """Evaluate ``k_up[i]`` more steps above and ``k_dn[i]`` below direction ``i``'s
    own steps (contiguous with them, so its tableau sees no gap); the shared ladder
    ``steps`` grows as needed. Returns the new values, steps and evaluations."""
    valid = ~np.all(np.isnan(Y), axis=(2, 3))  # (d, L)
    L = steps.size
    top = np.argmax(valid, axis=1)
    bottom = L - 1 - np.argmax(valid[:, ::-1], axis=1)
    grow_up = int(max(0, np.max(k_up - top)))
    grow_dn = int(max(0, np.max(bottom + k_dn - (L - 1))))
    new_steps = np.concatenate(
        [
            steps[0] * 2.0 ** np.arange(grow_up, 0, -1),
            steps,
            steps[-1] * 2.0 ** -np.arange(1, grow_dn + 1),
        ]
    )
    Y_new = np.full((Y.shape[0], new_steps.size) + Y.shape[2:], np.nan)
    Y_new[:, grow_up : grow_up + L] = Y
    added = 0
    # directions that need the same new steps are evaluated together
    first = np.where(k_up > 0, top + grow_up - k_up, -1)
    last = np.where(k_dn > 0, bottom + grow_up + 1, -1)
    for starts, counts in ((first, k_up), (last, k_dn)):
        groups = sorted({(int(a), int(b)) for a, b in zip(starts, counts, strict=True) if b > 0})
        for start, count in groups:
            rows = np.flatnonzero((starts == start) & (counts == count))
            cols = slice(start, start + count)
            Y_new[rows, cols] = evaluate_ladder(fn, x0, W[rows], new_steps[cols], max_rows)
            added += rows.size * count * 2
    return Y_new, new_steps, added


def _split(c: TableauResult, r: TableauResult, l: TableauResult) -> np.ndarray:
    """``(d, m)``: central, left and right estimates that disagree beyond their error bars."""
    with np.errstate(all="ignore"):
        rv, lv = _to_float(np.asarray(r.value)), _to_float(np.asarray(l.value))
        cv = _to_float(np.asarray(c.value))
        split = (
            (np.abs(rv - lv) > 2.0 * (r.error + l.error))
            | (np.abs(cv - rv) > 2.0 * (c.error + r.error))
            | (np.abs(cv - lv) > 2.0 * (c.error + l.error))
        )
    return split & np.isfinite(rv) & np.isfinite(lv)


def _kinks(sol: _Solution, resolution: float) -> tuple[np.ndarray, np.ndarray]:
    """``(split, resolved)``, each ``(d,)``: some output's left, right and central
    estimates disagree (a kink within the finest step, or one that the finer steps of
    a longer ladder resolve, where they agree again); and every such disagreement is
    *pinned*: each side is resolved so well that the kink explaining it lies within
    ``resolution`` of x (a one-sided difference that crosses a kink at distance
    ``delta < h`` changes by about ``|r - l| delta / (2 h)`` from ``h`` to ``2 h``), so
    finer steps cannot tell it from a kink at x in the working dtype."""
    c, r, l = sol.c, sol.r, sol.l
    split = _split(c, r, l)
    split_any = np.any(split, axis=1)
    with np.errstate(all="ignore"):
        gap = np.abs(_to_float(np.asarray(r.value)) - _to_float(np.asarray(l.value)))
        pinned = 2.0 * sol.finest[:, None] * np.maximum(r.error, l.error) <= resolution * gap
    return split_any, np.all(~split | pinned, axis=1) & split_any


def _size(c: TableauResult, norms: np.ndarray) -> np.ndarray:
    """``(d, m)``: the size an error is judged against: the entry, or, if larger, the
    length of its direction (``norms``, ``(d,)``) times the root mean square of that
    output's derivatives per unit length over all directions. An entry far smaller
    than its neighbours needs no more digits than they do; measuring them per unit
    length keeps a coordinate with a tiny step scale (an input near 0) to the same
    relative accuracy, in the user's units, as its neighbours."""
    return _size_of_values(_to_float(np.asarray(c.value)), norms)


def _size_of_values(cval: np.ndarray, norms: np.ndarray) -> np.ndarray:
    """:func:`_size` of float64 values ``(d, m)``."""
    with np.errstate(all="ignore"):
        unit = cval / np.where(norms > 0, norms, 1.0)[:, None]
        finite = np.isfinite(unit)  # the mean square over the finite ones (0 if none)
        typical = np.sqrt(
            np.sum(np.where(finite, unit, 0.0) ** 2, axis=0) / np.maximum(finite.sum(axis=0), 1)
        )
    return np.maximum(np.abs(cval), norms[:, None] * np.nan_to_num(typical)[None, :])


def _levels_up(sol: _Solution, size: np.ndarray, accuracy: float, most: int) -> np.ndarray:
    """``(d,)``: levels (factors of two) to move the steps up by, 0 where the central
    estimate meets ``accuracy`` times ``size`` (:func:`_size`). A noise-limited error
    falls like ``1/h``: the steps move up by as many levels as the error exceeds the
    target (in powers of two), plus one for the tableau, at most ``most`` and never
    beyond a step of 32."""
    with np.errstate(all="ignore"):
        ratio = sol.c.error / (accuracy * size)
        excess = np.max(np.where(size != 0, ratio, 0.0), axis=1)
    room = np.floor(np.log2(2.0**5 / sol.largest)).astype(np.int64)
    excess = np.where(np.isnan(excess), 0.0, np.minimum(excess, 2.0**most))  # inf: all the way
    k = np.ceil(np.log2(np.maximum(excess, 1.0))).astype(np.int64) + 1
    k = np.minimum(np.minimum(k, most), room)
    return np.where((excess > 1.0) & (k >= 1), k, 0)


def _triage(
    sol: _Solution, Y: np.ndarray, size: np.ndarray, accuracy: float
) -> tuple[np.ndarray, np.ndarray]:
    """``(settled, noisy)``, each ``(d,)``, after the first steps (values ``Y``):
    settled directions already give the reference (see ``first_levels`` of
    :func:`directional_derivatives`); noisy ones are smooth there and miss the
    target only through noise, so larger steps, not smaller, will meet it. ``size``
    is what the error is judged against (:func:`_size`)."""
    with np.errstate(invalid="ignore"):
        short = sol.c.error > accuracy * size
    finite = np.all(np.isfinite(Y), axis=(1, 2, 3))
    smooth = ~np.any(_split(sol.c, sol.r, sol.l), axis=1)
    no_jump = ~np.any(sol.jump_r | sol.jump_l, axis=1)
    clean = finite & smooth & no_jump
    settled = clean & ~np.any(short, axis=1)
    truncated = np.any(short & (sol.c.truncation > 3.0 * sol.c.noise), axis=1)
    return settled, clean & ~settled & ~truncated


@dataclass
class _Solution:
    c: TableauResult
    r: TableauResult
    l: TableauResult
    step_c: np.ndarray
    step_r: np.ndarray
    step_l: np.ndarray
    jump_r: np.ndarray
    sgn_r: np.ndarray
    jump_l: np.ndarray
    sgn_l: np.ndarray
    finest: np.ndarray
    largest: np.ndarray
    fine: TableauResult


def _solve(
    Y: np.ndarray,
    f0: np.ndarray,
    steps: np.ndarray,
    sigma: np.ndarray,
    eps: float,
    final: _Solution | None = None,
) -> _Solution:
    """Tableaus and jump flags per direction, each on the steps evaluated for it.

    Directions are grouped by which steps of the ladder were evaluated for them
    (the ladder is extended only where needed), so no tableau sees a gap.
    With ``final`` (the plain solution of the same ``Y``), the error bars
    reported are cross-checked between tableau columns (see
    :func:`polygrad.reference.richardson.neville`), and the jump flags are
    ``final``'s: the jump test and the ladder's moves use the plain tableaus (a
    jump or a kink makes the columns diverge, and the ladder must still move
    towards it), which are not computed again.
    """
    valid = ~np.all(np.isnan(Y), axis=(2, 3))  # (d, L)
    patterns, inverse = np.unique(valid, axis=0, return_inverse=True)
    inverse = np.asarray(inverse).reshape(-1)
    parts: dict[str, list[np.ndarray]] = {}
    tabs: dict[str, list] = {"c": [], "r": [], "l": [], "fine": []}
    order = []
    for p, pattern in enumerate(patterns):
        rows = np.flatnonzero(inverse == p)
        cols = np.flatnonzero(pattern)
        if cols.size == 0:
            cols = np.arange(steps.size)
        st = steps[cols]
        Yg = Y[rows][:, cols]
        order.append(rows)
        c, r, l = _tableaus(Yg, f0, st, sigma[rows], eps, cross_check=final is not None)
        for key, t in (("c", c), ("r", r), ("l", l)):
            tabs[key].append((t, st[np.minimum(t.level, st.size - 1)]))
        if final is None:
            _steer(Yg, f0, st, sigma[rows], eps, (c, r, l), tabs, parts)
    (c, sc), (r, sr_), (l, sl_) = (_gathered(tabs[k], order) for k in ("c", "r", "l"))
    if final is not None:
        return replace(final, c=c, r=r, l=l, step_c=sc, step_r=sr_, step_l=sl_)
    fine, _ = _gathered(tabs["fine"], order)
    g = {key: _gather(v, order) for key, v in parts.items()}
    return _Solution(
        c, r, l, sc, sr_, sl_, g["jump_r"], g["sgn_r"], g["jump_l"], g["sgn_l"],
        g["finest"], g["largest"], fine,
    )  # fmt: skip


def _steer(
    Yg: np.ndarray,
    f0: np.ndarray,
    st: np.ndarray,
    sigma: np.ndarray,
    eps: float,
    plain: tuple[TableauResult, TableauResult, TableauResult],
    tabs: dict[str, list],
    parts: dict[str, list[np.ndarray]],
) -> None:
    """Append one group's quantities that steer the ladder (its finest steps' own
    estimate, jump flags, step range) to ``tabs`` and ``parts``."""
    c, r, l = plain
    fine = c
    if st.size > FINE_LEVELS:
        fine = _tableaus(Yg[:, -FINE_LEVELS:], f0, st[-FINE_LEVELS:], sigma, eps, sides=False)[0]
    tabs["fine"].append((fine, st[-FINE_LEVELS:][np.minimum(fine.level, FINE_LEVELS - 1)]))
    jr, sr = _jumps(Yg, f0, sigma, 0, r, eps)
    jl, sl = _jumps(Yg, f0, sigma, 1, l, eps)
    rows = Yg.shape[0]
    for key, v in (
        ("jump_r", jr), ("sgn_r", sr), ("jump_l", jl), ("sgn_l", sl),
        ("finest", np.full(rows, st[-1])), ("largest", np.full(rows, st[0])),
    ):  # fmt: skip
        parts.setdefault(key, []).append(v)


def _gather(items: list[np.ndarray], order: list[np.ndarray]) -> np.ndarray:
    """Groups' arrays (rows ``order``) concatenated back into direction order."""
    idx = np.concatenate(order)
    back = np.empty(idx.size, dtype=np.int64)
    back[idx] = np.arange(idx.size)
    return np.concatenate(items)[back]


def _gathered(
    items: list[tuple[TableauResult, np.ndarray]], order: list[np.ndarray]
) -> tuple[TableauResult, np.ndarray]:
    """Groups' (tableau result, step) pairs, back in direction order."""
    ts = [t for t, _ in items]
    fields = ("value", "error", "truncation", "noise", "level", "order")
    res = TableauResult(*(_gather([getattr(t, f) for t in ts], order) for f in fields))
    return res, _gather([s for _, s in items], order)


def _with_jumps(e: Estimate, jump: np.ndarray, sign: np.ndarray) -> Estimate:
    with np.errstate(invalid="ignore"):
        value = np.where(jump, sign * np.inf, e.value)
    error = np.where(jump, np.inf, e.error)
    return Estimate(value, error, e.step, e.noise, e.method, e.evaluations)


def merge_rows(
    dd: DirectionalDerivatives, sub: DirectionalDerivatives, rows: np.ndarray
) -> DirectionalDerivatives:
    """``dd`` (``(d, m)`` arrays) with its ``rows`` replaced by ``sub``'s (``(len(rows), m)``)."""

    def put(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = np.array(a, dtype=np.result_type(a, b), copy=True)
        out[rows] = b
        return out

    def est(a: Estimate, b: Estimate) -> Estimate:
        value, error, step, noise = (
            put(getattr(a, f), np.asarray(getattr(b, f), dtype=np.float64))
            for f in ("value", "error", "step", "noise")
        )
        return replace(a, value=value, error=error, step=step, noise=noise,
                       evaluations=a.evaluations + b.evaluations)  # fmt: skip

    return DirectionalDerivatives(
        est(dd.central, sub.central),
        est(dd.right, sub.right),
        est(dd.left, sub.left),
        put(dd.jump_right, sub.jump_right),
        put(dd.jump_left, sub.jump_left),
    )
