"""One-sided derivatives at fine steps along the directions of MISMATCH entries.

Where mp cannot re-examine an entry in doubt (the function does not run on mpmath
numbers: convolutions, pooling), a second, independent float64 estimate can: the
one-sided derivatives along the entry's direction, on a ladder of steps far below
the first reference's, with the noise measured at those steps.

Why the one-sided derivatives
-----------------------------
The first reference chooses its steps from the noise it measures along each
direction. A point where ``f`` has kinks at ``x`` itself (the max-pooling ties of a
ReLU CNN's blank background, crossed by every random direction) reads to ECnoise as
noise, so the steps and error bars grow until the left and right derivatives,
which differ, overlap within their bars; the central difference then averages the
two sides and autodiff, one element of the generalized derivative, is called
MISMATCH. At steps below the distance to the next kink each side converges, and
their difference is plain; the judge then finds the kink (NONSMOOTH) as it does
wherever the first reference resolved it. At a smooth point the sharper sides agree
with the central estimate, and a wrong rule stays MISMATCH.

The sides replace the first reference's only where they split from each other by more
than :data:`SPLIT` times their error bars and those bars are smaller, for at most
:data:`MOST_DIRECTIONS` directions (worst entries first), so a wrong rule in every
entry of a large Jacobian does not multiply the cost of its check.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from ..backends.base import Target
from ..reference import directional_derivatives, estimate_noise
from ..reference.differences import DirectionalDerivatives
from ..reference.noise import output_resolution
from ..reference.richardson import Estimate
from ..reference.steps import F64_EPS, ecnoise_step
from ..report import SEVERITY, Entries, Verdict
from .plan import raising_points_as_nan

__all__ = ["MOST_DIRECTIONS", "doubtful_directions", "sharpen_sides"]

MOST_DIRECTIONS = 32
"""Directions re-examined at most (those of the worst MISMATCH entries first, then those
of INCONCLUSIVE ones)."""
FINE_STEP = 2.0**-12
"""Largest step of the fine ladder, in units of the direction."""
FINE_LEVELS = 12
"""Steps of the fine ladder (ratio 2): down to ``FINE_STEP / 2^11``."""
NOISE_STEP = 2.0**-30
"""Step of the noise table along the re-examined directions (below most kinks' distance)."""
SPLIT = 4.0
"""Left and right derivatives differ by more than this many times their summed error
bars: only such a kink replaces the first sides (a staircase of f's rounded values,
read with too small a noise, must not pass for one)."""

_MISMATCH = SEVERITY[Verdict.MISMATCH]
_INCONCLUSIVE = SEVERITY[Verdict.INCONCLUSIVE]


def doubtful_directions(blocks: list[Entries], d: int) -> list[int]:
    """Indices of the directions holding a MISMATCH or an INCONCLUSIVE entry: those of
    MISMATCH entries first, worst first.

    An INCONCLUSIVE entry can sit at a kink that the first steps, crossing it, read
    as noise: its rule moved by the size of the entry when the input moved by a few
    ulps (ReLU pre-activations at 0 in a CNN at a digit), and its one-sided
    derivatives, unresolved at those steps, did not show the kink.

    Parameters
    ----------
    blocks : list of Entries
        One block per autodiff mode, its entries ordered direction by direction.
    d : int
        Number of directions.

    Returns
    -------
    list of int
        At most :data:`MOST_DIRECTIONS` direction indices.
    """
    worst: dict[int, tuple[int, float]] = {}
    for b in blocks:
        per = b.status.size // d
        for i in np.flatnonzero(np.isin(b.status, (_MISMATCH, _INCONCLUSIVE))):
            k = int(i) // per
            key = (int(b.status[i] == _MISMATCH), float(np.nan_to_num(b.badness[i], nan=0.0)))
            worst[k] = max(worst.get(k, key), key)
    return sorted(worst, key=lambda k: (-worst[k][0], -worst[k][1]))[:MOST_DIRECTIONS]


def _sharper(old: Estimate, new: Estimate, rows: np.ndarray, split: np.ndarray) -> Estimate:
    """``old`` with the entries of ``rows`` replaced by ``new``'s where ``new`` is sharper
    and shows a kink (``split``, ``(len(rows), m)``)."""
    take = split & (np.nan_to_num(new.error, nan=np.inf) < old.error[rows])

    def put(field: str) -> np.ndarray:
        a = np.array(getattr(old, field), dtype=np.float64, copy=True)
        a[rows] = np.where(take, getattr(new, field), a[rows])
        return a

    return replace(
        old, value=put("value"), error=put("error"), step=put("step"), noise=put("noise"),
        evaluations=old.evaluations + new.evaluations,
    )  # fmt: skip


def sharpen_sides(
    target: Target,
    dd: DirectionalDerivatives,
    blocks: list[Entries],
    directions: tuple[int, Callable[[np.ndarray], np.ndarray]],
    method: str,
    scales: np.ndarray,
    rng: np.random.Generator,
) -> tuple[DirectionalDerivatives, list[int]] | None:
    """``dd`` with sharper one-sided derivatives along the directions in doubt (MISMATCH or
    INCONCLUSIVE entries), or None.

    Parameters
    ----------
    target : Target
        The function; ``evaluate64`` is used for a float64 reference, else ``evaluate``.
    dd : DirectionalDerivatives
        The first reference, ``(d, m)`` arrays.
    blocks : list of Entries
        The judged entries, one block per mode.
    directions : (int, callable)
        The number of directions and the rows ``(k, n)`` of given indices.
    method : {"float64", "working"}
        The first reference's arithmetic.
    scales : ndarray, shape (n,)
        The inputs' scales (where the grid of ``f``'s values is read).
    rng : numpy.random.Generator
        Draws the points that read that grid.

    Returns
    -------
    (DirectionalDerivatives, list of int) or None
        The merged estimates and the directions re-examined; None when no entry is
        MISMATCH or INCONCLUSIVE, or the fine steps show no kink.
    """
    d, rows_of = directions
    dirs = doubtful_directions(blocks, d)
    if not dirs:
        return None
    wide = method == "float64" and target.evaluate64 is not None
    raw = target.evaluate64 if wide else target.evaluate
    assert raw is not None
    # points where f raises (a matrix a fine step from indefinite) are NaN, as on the
    # first ladder: they are no reason to give up the kink's evidence
    fn = raising_points_as_nan(raw, target.m, {})
    eps = F64_EPS if wide else target.eps
    idx = np.asarray(dirs)
    W = rows_of(idx)
    f0 = fn(target.x0[None, :])[0]
    # the grid f's values round on (a small f made of large terms rounds at their size)
    grid, _ = output_resolution(fn, target.x0, f0, scales, ecnoise_step(eps), rng)
    sigma = estimate_noise(fn, target.x0, W, f0, eps, NOISE_STEP, resolution=grid).sigma
    sub = directional_derivatives(
        fn, target.x0, W, f0, sigma, eps, method, FINE_STEP, FINE_LEVELS, max_refinements=0
    )
    r, l = sub.right, sub.left
    with np.errstate(invalid="ignore"):
        split = np.abs(r.value - l.value) > SPLIT * (r.error + l.error)
    split &= np.isfinite(r.value) & np.isfinite(l.value)
    if not split.any():
        return None
    merged = replace(
        dd,
        right=_sharper(dd.right, r, idx, split),
        left=_sharper(dd.left, l, idx, split),
    )
    return merged, dirs
