"""Where finite differences of machine numbers cannot tell a step function from rounding.

A step function (``floor``, a quantizer ``round(16 x) / 16``) and a smooth function
whose value is rounded to a coarse grid (a small result of cancelling terms) give the
same float64 values (or float32 values, for a reference in the working dtype): constant
on treads, jumping by one cell of the grid between them.
Read over steps that cross many treads, both have the slope of the staircase; it is the
derivative of the smooth function and not of the step function, whose derivative is 0.
Nothing in the float64 values tells the two apart; arithmetic of more digits does (the
smooth function moves within a tread there, the step function does not).

Such a reading is recognized by two measurements, each far beyond what rounding an
ordinary function's value gives:

* the grid of ``f``'s values (:func:`~polygrad.reference.noise.output_resolution`) is at
  least :data:`COARSE_ULPS` ulps of the values near ``x`` (an ordinary value is rounded
  at about one);
* a tread, one cell of that grid over the slope read, is at least :data:`COARSE_ULPS`
  ulps of the input (of the direction's length) wide.

There the estimate keeps its value and loses its error bar (infinite): float64 bounds
neither reading, the slope or 0, so that no verdict rests on it. An error bar of the
size of the slope would cover both, yet decide an entry small beside the largest of its
row (it would not be too coarse against that row's scale, and a rule off by up to twice
the entry would pass). The entry is judged again on a higher-precision reference where
one is available, and is INCONCLUSIVE where none is.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .differences import DirectionalDerivatives
from .richardson import Estimate

__all__ = ["COARSE_ULPS", "ambiguous_staircase", "covering_both_readings"]

COARSE_ULPS = 2.0**16
"""Ulps (of the values near ``x``, and of the input) from which a grid and its treads are
a staircase, not the rounding of an ordinary value: a value whose intermediates cancel
to ``2^-16`` of themselves and change with the input far more slowly than they are
large, or a step function's whole numbers (at ``1e6``, ``2^-36`` of themselves in
float64)."""


def ambiguous_staircase(
    slope: np.ndarray,
    grid: np.ndarray,
    f0: np.ndarray,
    eps: float,
    sides: np.ndarray | None = None,
) -> np.ndarray:
    """Where a difference quotient of machine numbers reads a staircase.

    Parameters
    ----------
    slope : ndarray, shape (d, m)
        The derivative read along each direction, per unit of the direction.
    grid : ndarray, shape (m,)
        The grid of each output's values (0 where none, or a staircase of small whole
        numbers, which the ladder reads as the constant run it is).
    f0 : ndarray, shape (m,)
        The outputs at the point.
    eps : float
        Machine epsilon of the arithmetic of the values.
    sides : ndarray, shape (d, m), optional
        The larger one-sided slope in size: with ``|f0|`` and ``|slope|``, how far the
        values range over one unit of the direction (the norm at 0 is 0, with one-sided
        slopes of 1 and a central one of 0: its grid is rounding, small beside the values
        around it).

    Returns
    -------
    ndarray of bool, shape (d, m)
        Both the grid (relative to the size of the values near ``x``) and a tread
        (``grid / |slope|``, relative to the direction) are :data:`COARSE_ULPS` ulps or
        coarser.
    """
    g = np.asarray(grid, dtype=np.float64)[None, :]
    size = np.maximum(np.abs(np.asarray(f0, np.float64))[None, :], np.abs(slope))
    if sides is not None:
        size = np.maximum(size, np.abs(sides))
    with np.errstate(divide="ignore", invalid="ignore"):
        coarse = COARSE_ULPS * eps
        coarse_grid = (g > 0) & (g >= coarse * size)
        wide_tread = g >= coarse * np.abs(slope)
    return coarse_grid & wide_tread


def covering_both_readings(dd: DirectionalDerivatives, grid: np.ndarray, f0: np.ndarray,
                           eps: float) -> tuple[DirectionalDerivatives, int]:  # fmt: skip
    """``dd`` with the error bars of every estimate infinite where
    :func:`ambiguous_staircase` holds for the central estimate and some estimate reads a
    slope other than exactly 0 (a reading of exactly 0 is both readings: a constant run
    keeps its own error bar), and how many directions that touched."""
    sides = np.fmax(np.abs(dd.right.value), np.abs(dd.left.value))
    mask = ambiguous_staircase(dd.central.value, grid, f0, eps, sides)
    mask &= np.fmax(np.abs(dd.central.value), sides) > 0  # a reading of exactly 0 is 0
    if not np.any(mask):
        return dd, 0

    def widened(e: Estimate) -> Estimate:
        return replace(e, error=np.where(mask, np.inf, e.error))

    out = replace(dd, central=widened(dd.central), right=widened(dd.right),
                  left=widened(dd.left))  # fmt: skip
    return out, int(np.sum(np.any(mask, axis=1)))
