"""Function-noise estimation from a difference table (Moré & Wild's ECnoise).

A function evaluated in floating point is a smooth function plus noise: the
round-off of every operation. Along a direction ``w``, Moré and Wild sample
``g(t) = f(x + t w)`` at ``p + 1`` equally spaced points ``t = i δ`` and
build the difference table. Differences of order ``k`` of a smooth function
shrink like ``δ^k``, while differences of noise do not: for independent noise
of standard deviation ``σ``, ``E[(Δ^k g)^2] = σ² (2k)! / (k!)²``. The noise
is read off the first order ``k`` at which three consecutive scaled levels
agree within a factor 4 and the differences change sign.

Reference
---------
J. J. Moré and S. M. Wild, "Estimating computational noise", SIAM J. Sci.
Comput. 33(3), 1292–1314 (2011); the algorithm is their ``ECnoise``.

Failure modes (``inform`` codes, as in the paper):

* 1 — noise detected;
* 2 — noise not detected: at least half of the first differences are zero,
  i.e. the step ``δ`` is below the function's resolution (or the function is
  exactly representable, such as a linear function of small integers);
* 3 — the step ``δ`` is too large: the function changes by more than 10%
  over the samples (not applied where the samples change sign: near a zero
  of ``f`` every change is large relative to ``f``), or no order shows
  noise-dominated differences.

:func:`estimate_noise` retries with a smaller step on code 3 and a larger
step on code 2, and reports the code it ended with.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .differences import rows_per_batch
from .steps import rademacher

__all__ = [
    "NoiseEstimate",
    "ecnoise",
    "estimate_noise",
    "generic_bits",
    "output_resolution",
    "tread_noise",
    "value_grid",
]

SQRT12 = float(np.sqrt(12.0))
"""Rounding to a grid of spacing ``q`` has standard deviation ``q / sqrt(12)``."""

SPREAD_CELLS = 1024
"""Sampled values that span fewer cells of their grid barely move (see ``STAIRCASE_CELLS``)."""

STAIRCASE_CELLS = 8
"""Values that barely move and are at most this many cells of their grid from 0 are an
exact staircase (whole numbers), whose grid is not rounding."""

NOISE_DETECTED = 1
NOISE_NOT_DETECTED = 2
STEP_TOO_LARGE = 3


def ecnoise(fval: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Moré & Wild's ECnoise on samples at equally spaced points.

    Parameters
    ----------
    fval : ndarray, shape (p + 1, ...)
        Function values at ``p + 1`` equally spaced points (``p >= 4``; the
        paper uses ``p = 8``). Trailing axes are independent problems (several
        outputs or directions).

    Returns
    -------
    sigma : ndarray, shape (...)
        Estimated standard deviation of the noise (0 where not detected).
    inform : ndarray of int, shape (...)
        1 noise detected, 2 noise not detected (step too small), 3 step too
        large.
    """
    fval = np.asarray(fval, dtype=np.float64)
    # work relative to the largest value so that squares neither under- nor overflow
    unit = np.max(np.abs(fval), axis=0)
    unit = np.where((unit > 0) & np.isfinite(unit), unit, 1.0)
    fval = fval / unit
    nf = fval.shape[0]
    p = nf - 1
    batch = fval.shape[1:]
    sigma = np.zeros(batch)
    inform = np.full(batch, STEP_TOO_LARGE, dtype=np.int64)
    fmin, fmax = fval.min(axis=0), fval.max(axis=0)
    scale = np.maximum(np.abs(fmax), np.abs(fmin))
    with np.errstate(divide="ignore", invalid="ignore"):
        # Moré & Wild's "changes by more than 10%" test is meaningless where f crosses
        # zero (every sample is a large relative change); the difference table decides
        too_large = ((fmax - fmin) > 0.1 * scale) & ~((fmin < 0) & (fmax > 0))
    levels = np.zeros((p,) + batch)
    dsgn = np.zeros((p,) + batch, dtype=bool)
    diff = fval.copy()
    gamma = 1.0
    not_detected = np.zeros(batch, dtype=bool)
    for j in range(1, p + 1):
        diff = diff[1:] - diff[:-1]
        if j == 1:
            not_detected = np.sum(diff == 0, axis=0) >= nf / 2
        gamma *= 0.5 * j / (2 * j - 1)
        levels[j - 1] = np.sqrt(gamma * np.mean(diff**2, axis=0))
        dsgn[j - 1] = diff.min(axis=0) * diff.max(axis=0) < 0
    done = np.zeros(batch, dtype=bool)
    for k in range(p - 2):
        window = levels[k : k + 3]
        ok = (window.max(axis=0) <= 4 * window.min(axis=0)) & dsgn[k] & ~done
        sigma = np.where(ok, levels[k], sigma)
        inform = np.where(ok, NOISE_DETECTED, inform)
        done |= ok
    inform = np.where(not_detected, NOISE_NOT_DETECTED, inform)
    inform = np.where(too_large & ~not_detected, STEP_TOO_LARGE, inform)
    sigma = np.where(inform == NOISE_DETECTED, sigma * unit, 0.0)
    return sigma, inform


@dataclass(frozen=True)
class NoiseEstimate:
    """Noise of a function near a point.

    Attributes
    ----------
    sigma : ndarray, shape (d, m)
        Standard deviation of the noise of each output along each direction,
        in the output's units; at least the floor.
    floor : ndarray, shape (m,)
        The round-off floor used where no noise is detected: ``eps * |f(x)|``, or
        the rounding of ``f``'s grid where that is larger (``resolution``).
    inform : ndarray of int, shape (d, m)
        ECnoise code per direction and output (1, 2 or 3; see the module
        docstring).
    step : float
        Sampling step ``δ`` finally used (in units of the direction).
    evaluations : int
        Function evaluations spent.
    """

    sigma: np.ndarray
    floor: np.ndarray
    inform: np.ndarray
    step: float
    evaluations: int

    @property
    def detected(self) -> bool:
        return bool(np.all(self.inform == NOISE_DETECTED))


def value_grid(values: np.ndarray) -> np.ndarray:
    """The coarsest power of two of which every value is an integer multiple.

    Parameters
    ----------
    values : ndarray, shape (k, m)
        ``k`` float64 values of each of ``m`` outputs.

    Returns
    -------
    ndarray, shape (m,)
        Per output, the largest ``2^e`` dividing every finite nonzero value
        (each value is ``M 2^e'`` with an odd integer ``M``; this is the smallest
        such ``2^e'``), or 0 where no value is finite and nonzero.
    """
    v = np.asarray(values, dtype=np.float64)
    usable = np.isfinite(v) & (v != 0)
    mant, expo = np.frexp(np.where(usable, v, 1.0))
    whole = np.abs(np.ldexp(mant, 53)).astype(np.int64)  # exact: 53-bit integer mantissa
    lowest = (whole & -whole).astype(np.float64)  # its lowest set bit
    grain = np.where(usable, np.ldexp(lowest, expo - 53), np.inf)
    grid = np.min(grain, axis=0)
    return np.where(np.isfinite(grid), grid, 0.0)


def output_resolution(
    fn: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    f0: np.ndarray,
    scales: np.ndarray,
    step: float,
    rng: np.random.Generator,
    points: int = 3,
) -> tuple[np.ndarray, int]:
    """The grid on which ``fn`` rounds its results near ``x0``, per output.

    A result computed as a small difference of large terms (a sum of values
    that cancel, ``f(x) - f(y)`` of nearby points) is rounded at the magnitude
    of the terms, not at its own: its values near ``x0`` are multiples of a
    power of two far coarser than their own ulp, and that grid, not ``eps
    |f|``, is its resolution. Sampled on equally spaced binary points, such a
    function can even be locally an exact staircase with equal treads, in
    which ECnoise finds no noise at all. The grid is read off the values at
    ``points`` generic points (every coordinate moved by ``step`` times its
    scale times a random factor with a full mantissa, so that an exactly
    computed function does not land on a coarse grid) and at ``x0``. Values
    that span fewer than :data:`SPREAD_CELLS` cells of their grid and lie within
    :data:`STAIRCASE_CELLS` cells of 0 are a function constant in pieces
    (``floor``), whose grid is not rounding.

    Parameters
    ----------
    fn : callable
        ``(B, n) -> (B, m)`` batch evaluation.
    x0 : ndarray, shape (n,)
    f0 : ndarray, shape (m,)
        ``fn`` at ``x0``.
    scales : ndarray, shape (n,)
        Size of each coordinate (the direction scales).
    step : float
        Relative size of the moves.
    rng : numpy.random.Generator
    points : int
        Number of generic points.

    Returns
    -------
    grid : ndarray, shape (m,)
        See :func:`value_grid` (0 where the values are an exact staircase);
        rounding at this grid has standard deviation ``grid / sqrt(12)``.
    evaluations : int
    """
    signs = rademacher(rng, points, x0.size)
    X = x0 + step * scales * signs * rng.uniform(0.5, 1.0, size=(points, x0.size))
    values = np.vstack([np.asarray(f0, dtype=np.float64)[None, :], fn(X)])
    grid = value_grid(values)
    # values that are a few whole cells of their grid and barely move are a function that
    # is constant in pieces (an exact staircase such as floor: 3 and 4), not a rounded
    # continuous one (cosh(x) - 1 near 0 is 20 cells of ulp(1) and does not move either)
    with np.errstate(invalid="ignore"):
        spread = np.nanmax(values, axis=0) - np.nanmin(values, axis=0)
        size = np.nanmax(np.abs(values), axis=0)
        staircase = (spread < SPREAD_CELLS * grid) & (size <= STAIRCASE_CELLS * grid)
    return np.where(staircase, 0.0, grid), points


GENERIC = 0.3819660112501051
"""``2 - φ``: a fraction far from every short binary fraction (its continued fraction is
all ones), so that the increments of the sampled values avoid simple ratios with the
output grid."""


def generic_bits(eps: float, step: float) -> int:
    """Bits of the fraction added to ECnoise's step, at most 20.

    As many as keep every sample ``x0 + i δ w`` (``|i| <= 4``, ``|x0|`` up to
    1.5 times the direction's scale) exact in arithmetic with machine epsilon
    ``eps``: 20 for float64, 10 for float32, none (a plain power of two) for
    bfloat16 or for ``eps = 0`` (unknown arithmetic). After a retry with a
    smaller step the samples may round to the input's grid: that adds the
    input's own rounding to the noise, which only widens error bars.
    """
    if eps <= 0.0:
        return 0
    room = int(np.floor(-np.log2(eps))) - int(np.ceil(-np.log2(step))) - 3
    return int(min(20, max(0, room)))


def _on_lines(
    fn: Callable[[np.ndarray], np.ndarray], x0: np.ndarray, W: np.ndarray, coef: np.ndarray
) -> np.ndarray:
    """``fn`` at the points ``x0 + coef[i, j] W[i]``, ``(k, p, m)`` for ``coef`` ``(k, p)``.

    Directions are evaluated in blocks, so that a large input's points stay within the
    byte budget (:func:`~polygrad.reference.differences.rows_per_batch`), and one
    direction's points of a large input a batch at a time.
    """
    k, p = coef.shape
    most = rows_per_batch(x0.size, 1 << 30)
    per = max(1, most // p)
    blocks, buf = [], np.empty((min(per, k), p, x0.size))
    for a in range(0, k, per):
        X = _samples(buf[: min(per, k - a)], x0, coef[a : a + per], W[a : a + per])
        Y = np.concatenate([fn(X[b : b + most]) for b in range(0, X.shape[0], most)])
        blocks.append(Y.reshape(-1, p, Y.shape[-1]))
    return np.concatenate(blocks)


def _samples(buf: np.ndarray, x0: np.ndarray, coef: np.ndarray, W: np.ndarray) -> np.ndarray:
    """The points ``x0 + coef[i, j] W[i]`` (``(k * p, n)``), built in ``buf`` (``(k, p, n)``).

    Written into one buffer reused from block to block: a fresh block of a large input
    costs more in first-touch page faults than in arithmetic.
    """
    np.multiply(coef[:, :, None], W[:, None, :], out=buf)
    buf += x0
    return buf.reshape(-1, x0.size)


def estimate_noise(
    fn: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    directions: np.ndarray,
    f0: np.ndarray,
    eps: float,
    step: float,
    points: int = 8,
    retries: int = 2,
    resolution: np.ndarray | float = 0.0,
) -> NoiseEstimate:
    """Estimate the noise of ``fn`` at ``x0`` along each of ``directions``.

    Parameters
    ----------
    fn : callable
        ``(B, n) -> (B, m)`` batch evaluation (float64 arrays).
    x0 : ndarray, shape (n,)
        The point.
    directions : ndarray, shape (d, n)
        Directions to sample along, holding powers of two (or 0) times ±1; the
        samples are ``x0 + i δ w`` with ``δ = step (1 + r)``, where ``r`` is a
        fraction of :func:`generic_bits` bits, so that every sample is exact in
        binary but the increments ``δ g'`` are not commensurate with the
        power-of-two grid on which ``f`` rounds its results. On a binary step a
        function whose derivative is near a power of two (``exp`` near 0, a sum of
        ``sin`` near 0) rounds every sample the same way, and ECnoise, seeing an
        exact staircase with equal treads, finds no noise at all.
    f0 : ndarray, shape (m,)
        ``fn`` at ``x0``.
    eps : float
        Machine epsilon of the arithmetic ``fn`` uses (sets the floor).
    step : float
        Initial sampling step (a power of two) in units of the direction; ``δ``
        is slightly larger (see ``directions``).
    points : int
        ``p``: the table uses ``p + 1`` points centred on ``x0``.
    retries : int
        How many times to shrink the step by 2^6 on code 3. On code 2 (no
        noise: the function is constant at this resolution along ``w``) the
        floor is used without retrying: a wider step would cross kinks and
        report them as noise.
    resolution : ndarray of shape (m,) or float
        The grid on which ``fn`` rounds its results (see
        :func:`output_resolution`): the floor is at least ``resolution /
        sqrt(12)``. When ``f`` is a small result of cancelling terms, its
        round-off is set by the terms, and ``eps |f|`` alone is far too small.

    Returns
    -------
    NoiseEstimate
    """
    # one rounding of f, and never below the smallest subnormal (underflow resolution)
    subnormal = 2.0**-1074 if eps < 1e-10 else 2.0**-149
    floor = np.maximum(np.maximum(eps * np.abs(f0), subnormal), np.asarray(resolution) / SQRT12)
    d = directions.shape[0]
    offsets = np.arange(points + 1) - points // 2
    evals = 0
    delta0 = generic_step(eps, step)
    delta = np.full(d, delta0)
    best_sigma = np.zeros((d,) + f0.shape)
    best_inform = np.full((d,) + f0.shape, STEP_TOO_LARGE)
    slope = np.zeros((d,) + f0.shape)  # |f'| along each direction, roughly
    todo = np.ones(d, dtype=bool)
    for _attempt in range(retries + 1):
        idx = np.flatnonzero(todo)
        if idx.size == 0:
            break
        # (directions, p + 1, m): one table per direction
        Y = _on_lines(fn, x0, directions[idx], offsets[None, :] * delta[idx, None])
        evals += idx.size * offsets.size
        sig, inf = ecnoise(np.moveaxis(Y, 1, 0))
        # rounding noise above sqrt(eps) of the values is a function that varies on
        # the scale of the step (sin at x ~ 1e6 sampled 3 apart), not noise: a
        # smaller step tells (a truly noisy function stays as noisy)
        with np.errstate(invalid="ignore"):
            plausible = np.sqrt(eps) * np.max(np.abs(Y), axis=1)
        inf = np.where((inf == NOISE_DETECTED) & (eps > 0) & (sig > plausible), STEP_TOO_LARGE, inf)
        improve = (inf == NOISE_DETECTED) | (best_inform[idx] != NOISE_DETECTED)
        best_sigma[idx] = np.where(improve, sig, best_sigma[idx])
        with np.errstate(invalid="ignore"):
            moved = np.max(np.abs(Y - np.asarray(f0)[None, None, :]), axis=1)
        slope[idx] = np.where(improve, moved / (offsets[-1] * delta[idx, None]), slope[idx])
        best_inform[idx] = np.where(improve, inf, best_inform[idx])
        again = np.any((best_inform[idx] == STEP_TOO_LARGE).reshape(idx.size, -1), axis=1)
        delta[idx[again]] /= 64.0
        todo[idx[~again]] = False
    # ECnoise saw nothing above the floor, or f is near a zero of itself (smaller than
    # its change over a unit step: terms that cancel, whose grid its own ulp hides); not
    # where the step was too large
    with np.errstate(invalid="ignore"):
        near_zero = np.abs(np.asarray(f0))[None, :] < slope / NEAR_ZERO
    unseen = (best_inform != STEP_TOO_LARGE) & (~(best_sigma > floor[None, :]) | near_zero)
    redo = np.flatnonzero(np.any(unseen.reshape(d, -1), axis=1)) if eps > 0 else np.empty(0, int)
    if redo.size:
        first = np.full(redo.size, delta0)
        fit = _irregular_noise(fn, x0, directions[redo], first, offsets, eps)
        best_sigma[redo] = np.where(unseen[redo], np.fmax(best_sigma[redo], fit), best_sigma[redo])
        evals += 2 * redo.size * offsets.size
    return NoiseEstimate(
        sigma=np.maximum(best_sigma, floor[None, :]),
        floor=floor,
        inform=best_inform,
        step=float(np.min(delta)),
        evaluations=evals,
    )


def generic_step(eps: float, step: float) -> float:
    """ECnoise's sampling step: ``step`` plus a fraction of :func:`generic_bits` bits of it
    (see :func:`estimate_noise`)."""
    bits = generic_bits(eps, step)
    return float(step) * (1.0 + np.floor(GENERIC * 2.0**bits) / 2.0**bits)


def jittered_noise(
    fn: Callable[[np.ndarray], np.ndarray], x0: np.ndarray, W: np.ndarray, eps: float,
    step: float,
) -> tuple[np.ndarray, int]:  # fmt: skip
    """The noise along ``W`` (``(k, n)``) from jittered samples at ECnoise's step, however
    ``f``'s round-off is patterned.

    Equally spaced samples alias the rounding of an intermediate that moves linearly
    along ``W``: where each sample moves it by nearly a whole number of cells of its
    grid, the sampled round-off is a slow sawtooth, which ECnoise's difference table
    reads as the smooth part of ``f``. The mean of a layer norm of sigmoids near 0.5
    (rounded at ``2^-53``) gave ECnoise ``1.7e-16`` along one input where its round-off is
    ``1.5e-14``, and a ladder that trusted it went down to steps whose differences were
    all round-off. The samples here are moved off their equal spacing at random
    (:func:`_irregular_noise`), which no grid aliases.

    Parameters
    ----------
    fn : callable
        ``(B, n) -> (B, m)`` batch evaluation (float64 arrays).
    x0 : ndarray, shape (n,)
    W : ndarray, shape (k, n)
        Directions, as for :func:`estimate_noise`.
    eps : float
        Machine epsilon of ``fn``'s arithmetic.
    step : float
        ECnoise's step, in units of the direction.

    Returns
    -------
    sigma : ndarray, shape (k, m)
        Standard deviation of the round-off (0 where it reads as the rest of ``f``), in
        the units of ``f``'s values.
    evaluations : int
        ``2 * 9 * k``: two fits (at the step and a quarter of it) of 9 samples each.

    Raises
    ------
    Exception
        Whatever ``fn`` raises; nothing of its own.
    """
    offsets = np.arange(9) - 4
    delta = np.full(W.shape[0], generic_step(eps, step))
    return _irregular_noise(fn, x0, W, delta, offsets, eps), 2 * W.shape[0] * offsets.size


NEAR_ZERO = 16.0
"""``f`` is near a zero of itself along a direction where ``|f| < |f'| / NEAR_ZERO``
(``f'`` per unit of the direction, whose entries are the input's own scales)."""

FIT_DEGREE = 3
"""Degree of the polynomial whose residual is the noise at irregular samples."""


def _irregular_noise(
    fn: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    W: np.ndarray,
    delta: np.ndarray,
    offsets: np.ndarray,
    eps: float,
) -> np.ndarray:
    """The noise ``(d, m)`` along directions where ECnoise may have missed it, from samples
    moved off their equal spacing; 0 where it reads as the smooth part of ``f``.

    Equally spaced samples round alike where an intermediate's increments are nearly
    a whole number of cells of its grid (a sawtooth sampled once per tooth is a
    line): a layer norm of equal values after a sigmoid, whose terms near 0.5 round
    at ``2^-53`` and whose result is 0, is linear to ``1e-25`` at them, while its
    values carry round-off of ``1e-14``, which a difference over a longer step sees
    as a bias of ``1e-11``. Here sample ``i`` sits at ``t_i = i δ + ρ_i`` with ``ρ_i``
    uniform in ``±δ/2`` (jittered), a multiple of ``2 eps`` so that the point stays
    exact on the line, and the noise is the residual of a least-squares cubic in
    ``t``: round-off shows however it is patterned. The same at ``δ / 4`` tells it
    from the rest of ``f``: a residual of noise stays, one of a quartic remainder
    falls 256-fold and one of a kink within the samples (``|t|`` is no cubic) 4-fold;
    only a residual that falls less than :data:`FIT_FALL` times, and is a small part
    of the values' move (:data:`SMALL_PART`), is noise.
    """
    wide, moved = _fit_residual(fn, x0, W, delta, offsets, eps)
    narrow, _ = _fit_residual(fn, x0, W, delta / 4.0, offsets, eps)
    with np.errstate(invalid="ignore"):
        noise = (narrow * FIT_FALL >= wide) & (wide * SMALL_PART <= moved)
    return np.where(noise & np.isfinite(narrow), narrow, 0.0)


SMALL_PART = 64.0
"""Round-off of a function differentiable at the point is a small part of its move over
the samples: a residual above ``1 / SMALL_PART`` of it is a jump (``floor`` at 4) or a
kink, which the ladder's own tests tell, not noise."""


FIT_FALL = 3.0
"""How far a fit residual may fall when the step shrinks 4-fold and still be noise (two
estimates of the same noise from 5 degrees of freedom each differ by more than 3 times
in about 2% of draws; then the noise is left to ECnoise, as before)."""


TREAD_TRIES = 3
"""How many sampling steps, each 4 times the last, :func:`tread_noise` tries."""

TREAD_MAX_STEP = 2.0**-4
"""Largest sampling step of :func:`tread_noise`, in units of the direction (whose entries
are the input's own scales): beyond it the samples leave the neighbourhood of ``x``."""


def tread_noise(
    fn: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    W: np.ndarray,
    moved_at: np.ndarray,
    eps: float,
) -> tuple[np.ndarray, int]:
    """Rounding noise along directions where ``f`` was constant over ECnoise's samples but
    moved at a longer step: the staircase that an intermediate's rounding makes.

    A value computed through an intermediate far coarser than itself (``log(1 + s)`` with
    ``s`` = 1e-14, which ``1 + s`` rounds at ulp(1)) is constant over treads far wider
    than ECnoise's step, and its own ulps are no measure of its round-off: ``erf(log(1 +
    softplus(-x)))`` at ``x = 32`` is constant over 0.0175 in float64 and moves by 2.5e-16,
    1.7% of itself, from tread to tread. Its noise is measured as that of any function
    whose samples round alike (:func:`_irregular_noise`, jittered samples and a cubic),
    on samples spread over several treads: the step starts at 4 times the step
    ``moved_at`` at which ``f`` first moved along the direction and grows 4-fold, at
    most :data:`TREAD_TRIES` times and to :data:`TREAD_MAX_STEP`. The fit's own tests keep
    a kink or a jump (``floor``) within the samples from reading as noise.

    Parameters
    ----------
    fn : callable
        ``(B, n) -> (B, m)`` batch evaluation (float64 arrays).
    x0 : ndarray, shape (n,)
    W : ndarray, shape (k, n)
        The directions, as for :func:`estimate_noise`.
    moved_at : ndarray, shape (k,)
        Per direction, the shortest step (in units of the direction) at which ``f``
        differed from ``f(x)``.
    eps : float
        Machine epsilon of ``fn``'s arithmetic.

    Returns
    -------
    sigma : ndarray, shape (k, m) (or (k, 1) where no step was tried)
        Standard deviation of the rounding, 0 where none was told from the rest of ``f``.
    evaluations : int
    """
    offsets = np.arange(9) - 4
    delta = 4.0 * np.asarray(moved_at, dtype=np.float64)
    sigma: np.ndarray | None = None
    todo = np.ones(W.shape[0], dtype=bool)
    evals = 0
    for _ in range(TREAD_TRIES):
        idx = np.flatnonzero(todo & (delta <= TREAD_MAX_STEP))
        if idx.size == 0:
            break
        fit = _irregular_noise(fn, x0, W[idx], delta[idx], offsets, eps)
        evals += 2 * idx.size * offsets.size
        sigma = np.zeros((W.shape[0], fit.shape[1])) if sigma is None else sigma
        sigma[idx] = fit
        todo[idx[np.any(fit > 0, axis=1)]] = False
        delta[idx] *= 4.0
    return (np.zeros((W.shape[0], 1)) if sigma is None else sigma), evals


def _fit_residual(
    fn: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    W: np.ndarray,
    delta: np.ndarray,
    offsets: np.ndarray,
    eps: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Residual ``(d, m)`` of a least-squares cubic through jittered samples (see
    :func:`_irregular_noise`), and how far the values move over them ``(d, m)``."""
    rng = np.random.default_rng([len(offsets), W.shape[1]])
    half = np.floor(delta / (4.0 * eps))[:, None]  # δ/2 in units of 2 eps
    rho = np.floor(rng.uniform(-1.0, 1.0, size=(delta.size, offsets.size)) * half) * (2.0 * eps)
    t = offsets[None, :] * delta[:, None] + rho  # (d, p + 1), in direction units
    Y = _on_lines(fn, x0, W, t)
    out = np.zeros((W.shape[0], Y.shape[2]))
    dof = offsets.size - FIT_DEGREE - 1
    for k in range(W.shape[0]):
        V = np.vander(t[k] / np.max(np.abs(t[k])), FIT_DEGREE + 1)
        with np.errstate(all="ignore"):
            coef, *_ = np.linalg.lstsq(V, np.nan_to_num(Y[k]), rcond=None)
            out[k] = np.sqrt(np.sum((Y[k] - V @ coef) ** 2, axis=0) / dof)
    with np.errstate(invalid="ignore"):
        moved = np.max(Y, axis=1) - np.min(Y, axis=1)
    return out, moved
