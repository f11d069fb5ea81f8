"""Reductions, cumulative operations and sorting of object arrays of mpf.

Shared by the JAX and PyTorch interpreters. The scalar combining function is
given by the caller (``a + b``, a NaN-propagating ``max``...), so the same
fold serves ``reduce_sum``/``aten.sum``, ``reduce_max``/``aten.amax`` and the
others, with each framework's scalar conventions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["cumulative", "fold", "sort_permutation"]


def fold(
    x: np.ndarray,
    axes: Sequence[int],
    op: Callable[[Any, Any], Any],
    init: Any,
    keepdims: bool = False,
) -> np.ndarray:
    """Reduce ``x`` over ``axes`` with a binary ``op``, left to right from ``init``.

    Parameters
    ----------
    x : numpy.ndarray
        Object array of mpf, any shape.
    axes : sequence of int
        Non-negative axes of ``x`` to reduce (empty: ``x`` is returned as a copy).
    op : callable
        ``op(acc, element) -> acc``.
    init : mpf
        The value of an empty reduction (``0`` for a sum, ``-inf`` for a max).
    keepdims : bool, optional
        Keep the reduced axes with length 1.

    Returns
    -------
    numpy.ndarray
        Object array, ``x``'s shape without (or with length-1) ``axes``.
    """
    axes = tuple(int(a) for a in axes)
    keep = [i for i in range(x.ndim) if i not in axes]
    y = np.transpose(np.asarray(x, dtype=object), keep + list(axes))
    lead = y.shape[: len(keep)]
    y = y.reshape(lead + (-1,))
    out = np.empty(lead, dtype=object)
    out[...] = np.frompyfunc(op, 2, 1).reduce(y, axis=-1, initial=init)
    return np.expand_dims(out, axes) if keepdims and axes else out


def cumulative(
    x: np.ndarray, axis: int, op: Callable[[Any, Any], Any], reverse: bool = False
) -> np.ndarray:
    """Running ``op`` along ``axis``: ``out[k] = op(out[k - 1], x[k])``, ``out[0] = x[0]``.

    Parameters
    ----------
    x : numpy.ndarray
        Object array of mpf, at least 1-D.
    axis : int
        Non-negative axis to accumulate along.
    op : callable
        Binary scalar function (``a + b``, ``a * b``, a NaN-propagating max...).
    reverse : bool, optional
        Accumulate from the last element backwards.

    Returns
    -------
    numpy.ndarray
        Object array, the shape of ``x``.
    """
    x = np.asarray(x, dtype=object)
    if reverse:
        x = np.flip(x, axis)
    out = np.frompyfunc(op, 2, 1).accumulate(x, axis=axis, dtype=object)
    out = np.asarray(out, dtype=object)
    return np.flip(out, axis).copy() if reverse else out


def sort_permutation(ctx: Any, keys: Sequence[np.ndarray], axis: int) -> np.ndarray:
    """Stable ascending order along ``axis``, by several keys, NaN last.

    Parameters
    ----------
    ctx : mpmath.MPContext
        The context of the mpf keys (to recognise NaN).
    keys : sequence of numpy.ndarray
        Arrays of one shape (object arrays of mpf, or integer/bool arrays);
        the first decides, the next ones break ties (lexicographic order).
    axis : int
        Non-negative axis to sort along.

    Returns
    -------
    numpy.ndarray
        int64, the shape of the keys: for every position along ``axis``, the
        index of the element that goes there (use ``np.take_along_axis``).
        Equal keys keep their order; NaN sorts after every number, as in
        XLA's and PyTorch's total order.
    """
    moved = [np.moveaxis(np.asarray(k), axis, -1) for k in keys]
    lead, n = moved[0].shape[:-1], moved[0].shape[-1]
    order = np.empty(moved[0].shape, dtype=np.int64)

    def key(v: Any) -> tuple[int, Any]:
        if isinstance(v, ctx.mpf) and ctx.isnan(v):
            return (1, 0)
        return (0, v)

    for idx in np.ndindex(*lead):
        rows = [[key(m[idx][k]) for m in moved] for k in range(n)]
        order[idx] = sorted(range(n), key=lambda k: rows[k])
    return np.moveaxis(order, -1, axis)
