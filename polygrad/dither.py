"""The round-off of an autodiff value, seen by moving the input a few ulps.

``check`` allows an autodiff value ``64 eps`` times its scale of round-off.
A right rule evaluated in floating point can exceed that: a softmax or
log-sum-exp of many large logits rounds its logits at their size, and the
gradient inherits those rounding errors (a float32 log-sum-exp of 500 logits
near 500 is off by about 100 eps times its scale); a float64 rule written as
a difference of large terms (``2x/n - 2 mean(x)/n`` at ``x ≈ 100``) is off by
an ulp of the terms. Such round-off is not a property of the rule but of
evaluating it at a rounded point: moving the input by a couple of ulps, which
changes the function by far less than the tolerance, re-rounds every
intermediate and moves the autodiff value by about as much as its round-off,
plus the true change of the derivative over the move, which must not count:
``check`` takes it out using the float64 evaluation of the rule at the same
moved inputs (an input where the derivative changes fast, ``cos`` near 1000
in float32, must not hide a wrong rule), and, for a float64 function, by
pairing each move with its opposite.

:func:`dithered_args` builds those moved inputs; ``check`` re-evaluates the
autodiff values there only when some entry fails, and allows each entry twice
the largest move it saw (:data:`ALLOWANCE`). A wrong rule does not move with
the input (it is wrong by the same amount a few ulps away), so it still
fails; a rule that loses digits to cancellation of its own making, such as
``sin(x)/x^2 - 2 (1 - cos x)/x^3`` for the derivative of ``(1 - cos x)/x^2``
near 0, rounds the same way a few ulps away and is still ``UNSTABLE``. An
autodiff value that does not move at all under a move of a few ulps
(``1 - tanh(x)^2`` at ``x = 8`` in float64, whose ``tanh(x)`` rounds to the
same number) is moved further (:func:`move_sizes`), and so is one that
still fails with the allowance it got: a move of a few ulps of the input can
leave an intermediate far larger than the entry on the same rounding (``u =
0.5 x_0 + ...`` near -89.5, moved by whole ulps of its own), and only a
larger move re-rounds it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._pytree import flatten, unflatten
from .backends.base import Backend, dtype_eps, dtype_tiny

__all__ = [
    "ALLOWANCE",
    "DITHERS",
    "MOVED_DTYPES",
    "ULPS",
    "dithered_args",
    "move_sizes",
    "spread",
    "ulp_of_move",
]

DITHERS = 5
"""How many moved inputs the autodiff value is re-evaluated at."""

ULPS = 2
"""Each input coordinate moves by a random whole number of ulps in ``[-ULPS, ULPS]``."""

ALLOWANCE = 2.0
"""Multiple of the largest move of the autodiff value added to its tolerance."""

MOVED_DTYPES = ("float16", "bfloat16", "float32", "float64")
"""Names of the dtypes whose inputs are moved (bfloat16 through ml_dtypes, whose
``np.spacing`` gives its ulps)."""

GROWTH = 64
"""Factor by which the moves grow for entries whose autodiff value did not move, or that
still fail with the allowance so far."""

LARGEST_MOVE = {np.dtype(np.float64): 2.0**-33}
"""Largest relative move of the input (2^-12 for narrower dtypes). In float64 the
moves stay far below float32's resolution (2^-24), so that a rule that rounds through
float32 inside a float64 function is not excused as round-off; the derivative's own
change over a float64 move is taken out by pairing each move with its opposite."""


def move_sizes(dtype: np.dtype, first: int = ULPS) -> list[int]:
    """The sizes (in ulps of the input) of the moves, smallest first.

    ``ULPS``, then ``GROWTH`` times more each time, while the relative move stays
    within :data:`LARGEST_MOVE`. An autodiff value that does not move at all under a
    move of a few ulps (``1 - tanh(x)^2`` at ``x = 8``: ``tanh(x)`` rounds to the
    same float64 number) rounds its intermediates all the same, and only a larger
    move shows its round-off; ``check`` uses, per entry, the smallest size that
    moved it.

    Parameters
    ----------
    dtype : numpy.dtype
        The working dtype of the inputs.
    first : int
        The smallest size (``ULPS`` by default, ``Policy.dither_ulps`` in a check).

    Returns
    -------
    list of int
    """
    eps = dtype_eps(dtype)
    largest = LARGEST_MOVE.get(np.dtype(dtype), 2.0**-12)
    sizes = [first]
    while sizes[-1] * GROWTH * eps <= largest:
        sizes.append(sizes[-1] * GROWTH)
    return sizes


def ulp_of_move(a: np.ndarray) -> np.ndarray:
    """The unit of a move of each entry of ``a``, as float64: its ulp, but the smallest
    normal number of its dtype for 0 and subnormal entries. Many kernels flush
    subnormals to zero (XLA on CPU does), so a move of 0 by its own ulp, 5e-324 in
    float64, would move nothing: ``relu(x)`` at ``x = 5e-324`` takes the side of 0.

    Parameters
    ----------
    a : ndarray
        Values of a float16, bfloat16, float32 or float64 array, any shape.

    Returns
    -------
    ndarray of float64, shape of ``a``
        ``|spacing(a)|`` (in ``a``'s dtype, converted exactly), or ``finfo.tiny`` of that
        dtype where ``|a| < tiny``; in the units of ``a``.
    """
    tiny = dtype_tiny(a.dtype)
    a64 = np.abs(a.astype(np.float64))
    return np.where(a64 < tiny, tiny, np.abs(np.spacing(a).astype(np.float64)))


def dithered_args(
    be: Backend,
    args: tuple[Any, ...],
    argnums: tuple[int, ...],
    rng: np.random.Generator,
    ulps: int = ULPS,
    paired: bool = False,
    copies: int = DITHERS,
) -> list[tuple[Any, ...]] | None:
    """:data:`DITHERS` copies of ``args`` whose differentiated leaves moved a few ulps.

    Parameters
    ----------
    be : Backend
        The framework of the arrays.
    args : tuple
        The arguments of the function, as the user passed them.
    argnums : tuple of int
        Which arguments are differentiated (their leaves are moved).
    rng : numpy.random.Generator
        Source of the moves.
    ulps : int
        Each coordinate moves by a random whole number of its ulps in
        ``[-ulps, ulps]``.
    paired : bool
        Each move is followed by its opposite (``2 DITHERS`` copies): the even
        part of a pair, ``(a(x + d) + a(x - d)) / 2 - a(x)``, is free of the
        derivative's own linear change over the move.
    copies : int
        How many moved copies (``DITHERS`` by default, ``Policy.dithers`` in a check).

    Returns
    -------
    list of tuple, or None
        The moved arguments, each leaf in its own dtype; None when a leaf is not
        a float16, bfloat16, float32 or float64 array.
    """
    out = []
    for _ in range(copies):
        plus, minus = list(args), list(args)
        for i in argnums:
            leaves, _paths, treedef = flatten(args[i])
            up, down = [], []
            for leaf in leaves:
                a = np.asarray(be.to_numpy(leaf))
                if a.dtype.name not in MOVED_DTYPES:
                    return None
                k = rng.integers(-ulps, ulps + 1, size=a.shape).astype(np.float64)
                step = k * ulp_of_move(a)
                up.append(be.from_numpy((a.astype(np.float64) + step).astype(a.dtype)))
                down.append(be.from_numpy((a.astype(np.float64) - step).astype(a.dtype)))
            plus[i], minus[i] = unflatten(treedef, up), unflatten(treedef, down)
        out.append(tuple(plus))
        if paired:
            out.append(tuple(minus))
    return out


def spread(moves: list[np.ndarray]) -> np.ndarray:
    """Largest ``|move|`` over ``moves``, per entry (NaN where none is finite).

    Parameters
    ----------
    moves : list of ndarray
        Changes of the autodiff values from the input to each moved input (or
        their round-off part), all of one shape.

    Returns
    -------
    ndarray
        That shape.
    """
    with np.errstate(invalid="ignore"):
        return np.fmax.reduce(np.abs(np.stack(moves)), axis=0)
