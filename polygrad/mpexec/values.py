"""Exact conversion of binary floating-point values to mpmath numbers.

Every value the interpreters receive (inputs, captured weights, literals) is
a binary float, an integer or a boolean, and each of them is an exact
``mpf``: no rounding happens on the way in. Floating tensors are held as
NumPy object arrays of ``mpf`` of one private context
(:func:`polygrad.mpexec.context.make_context`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["leaves_at", "mp_array", "mpf_of", "point_at", "vjp_rows"]

_LAST_POINT: dict[str, tuple[Any, bytes, list[Any]]] = {}
"""The last point converted (its context, its bytes, its ``mpf`` values): an mp reference
evaluates many steps from one point."""


def mpf_of(ctx: Any, v: Any) -> Any:
    """``v`` as a ``ctx.mpf``, exactly.

    Parameters
    ----------
    ctx : mpmath.MPContext
        The context of the result.
    v : bool, int, float, NumPy scalar or ctx.mpf
        Binary floats of any width (float16/32/64, bfloat16) convert exactly;
        an ``mpf`` of ``ctx`` is returned as it is.

    Returns
    -------
    ctx.mpf
    """
    if isinstance(v, ctx.mpf):
        return v
    if isinstance(v, (bool, np.bool_, int, np.integer)):
        return ctx.mpf(int(v))
    return ctx.mpf(float(v))


def mp_array(ctx: Any, a: Any) -> np.ndarray:
    """Object array of ``ctx.mpf`` holding ``a`` exactly.

    Parameters
    ----------
    ctx : mpmath.MPContext
    a : array_like
        Floats, integers, booleans or ``mpf`` (an object array may mix them),
        any shape.

    Returns
    -------
    numpy.ndarray
        dtype ``object``, the shape of ``a``; a new array.
    """
    arr = np.asarray(a)
    out = np.empty(arr.shape, dtype=object)
    out.flat[:] = [mpf_of(ctx, v) for v in arr.flat]
    return out


def leaves_at(
    ctx: Any, x0: np.ndarray, dx: np.ndarray, shapes: Sequence[tuple[int, ...]]
) -> list[np.ndarray]:
    """The point ``x0 + dx``, summed exactly in ``ctx``, cut into input leaves.

    Parameters
    ----------
    ctx : mpmath.MPContext
        Its precision must hold the exact sum (any ``dps`` of 40 or more holds
        the sum of two float64 numbers of similar size; the mp reference uses 50).
    x0, dx : numpy.ndarray
        float64, shape ``(n,)``: the flat point and the step of one evaluation.
    shapes : sequence of tuple of int
        Shapes of the leaves, in the order of the flat vector; their sizes add
        up to ``n``.

    Returns
    -------
    list of numpy.ndarray
        One object array of ``ctx.mpf`` per shape (each its own memory).
    """
    flat = point_at(ctx, x0, dx)
    leaves, off = [], 0
    for shape in shapes:
        size = int(np.prod(shape, dtype=np.int64))
        leaves.append(flat[off : off + size].copy().reshape(shape))
        off += size
    return leaves


def point_at(ctx: Any, x0: np.ndarray, dx: np.ndarray) -> np.ndarray:
    """The flat point ``x0 + dx`` as an object array of ``ctx.mpf``, summed exactly.

    ``x0`` is converted once for the steps taken from it (the last point is
    kept), and only the nonzero entries of ``dx`` are added: a step along a
    coordinate direction costs one conversion and one addition.

    Parameters
    ----------
    ctx : mpmath.MPContext
        Its precision must hold the exact sum (see :func:`leaves_at`).
    x0, dx : numpy.ndarray
        float64, ``n`` entries each (any shape; read flat).

    Returns
    -------
    numpy.ndarray
        dtype ``object``, shape ``(n,)``; a new array.
    """
    x = np.ravel(np.asarray(x0, dtype=np.float64))
    d = np.ravel(np.asarray(dx, dtype=np.float64))
    if x.shape != d.shape:
        raise ValueError(f"x0 has {x.size} entries and dx {d.size}")
    key = x.tobytes()
    last = _LAST_POINT.get("point")
    if last is not None and last[0] is ctx and last[1] == key:
        base = last[2]
    else:
        base = [ctx.mpf(float(a)) for a in x]
        _LAST_POINT["point"] = (ctx, key, base)
    flat = np.empty(x.size, dtype=object)
    flat[:] = base
    for i in np.flatnonzero(d):
        flat[i] = base[i] + ctx.mpf(float(d[i]))
    return flat


def vjp_rows(
    evaluate: Callable[[np.ndarray, np.ndarray, int], np.ndarray],
) -> Callable[[np.ndarray, np.ndarray, int], np.ndarray]:
    """A VJP on mpmath numbers, row by row, from an evaluator of ``(inputs, cotangent)``.

    Parameters
    ----------
    evaluate : callable
        ``(z0, dz, dps) -> object ndarray (n,)``: a captured VJP program whose flat
        input ``z`` is the checked inputs ``x`` (``n`` values) followed by one
        cotangent ``u`` (``m`` values), as the mp evaluators of
        :mod:`polygrad.mpexec` take it.

    Returns
    -------
    callable
        ``(x0: ndarray (n,), U: ndarray (k, m), dps: int) -> object ndarray (k, n)``:
        one evaluation at ``(x0, u)`` per row ``u`` of ``U``, each exact on the way
        in (float64 values convert exactly).
    """

    def vjp_mp(x0: np.ndarray, U: np.ndarray, dps: int) -> np.ndarray:
        x = np.ravel(np.asarray(x0, dtype=np.float64))
        rows = []
        for u in np.atleast_2d(np.asarray(U, dtype=np.float64)):
            at = np.concatenate([x, u])
            rows.append(evaluate(at, np.zeros_like(at), dps))
        return np.stack(rows) if rows else np.empty((0, x.size), dtype=object)

    return vjp_mp
