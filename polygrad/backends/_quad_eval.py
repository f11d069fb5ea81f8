"""A NumPy function on IEEE binary128 arrays: the quad tier of the reference.

NumPy code written with ufuncs, reductions and ``@`` runs unchanged on arrays of
numpy-quaddtype's ``QuadPrecDType`` (see :mod:`polygrad.reference.quad`), as fast as
NumPy loops run rather than one mpmath number at a time. Not every function does: an
operation may have no quad loop (``scipy.special.erf``, ``np.dot``), the code may leave
quad for Python floats (``math.exp`` of an element) or cast to float64, and some
array functions accept the dtype but compute nonsense (``np.einsum`` returns zeros in
numpy-quaddtype 1.0). So the evaluator is accepted only after one run at the point:
every output leaf must come back in the quad dtype, and its values must agree with the
float64 evaluation to :data:`QUAD_AGREEMENT`. Rounding to float64 somewhere inside
``f`` that these probes miss shows as noise in the reference's halving check, which
then leaves the direction to mp.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .._pytree import flatten
from ..reference.quad import quad_dtype, quad_missing_reason
from ._common import PointFunction

__all__ = ["defer_quad", "quad_evaluator"]

QUAD_AGREEMENT = 1e-6
"""Largest difference, relative to the largest ``|f(x)|`` in float64, allowed between
``f(x)`` in quad and in float64 for the quad evaluation to be trusted (far above
float64's round-off in ordinary code; a function whose float64 values lose more, or a
quad operation that computes garbage, goes to mp)."""


class QuadUnavailable(Exception):
    """``f`` does not run faithfully on quad arrays (the message says why)."""


VETTED = frozenset(
    getattr(np, name)
    for name in (
        "sum", "max", "min", "amax", "amin", "mean", "prod", "var", "std", "average",
        "stack", "concatenate", "hstack", "vstack", "where", "reshape", "ravel",
        "transpose", "squeeze", "expand_dims", "atleast_1d", "atleast_2d", "sort",
        "cumsum", "cumprod", "diff", "outer", "trace", "diag", "take", "tile", "repeat",
        "broadcast_to", "flip", "roll", "moveaxis", "swapaxes", "copy", "zeros_like",
        "ones_like", "full_like", "empty_like", "split", "array_split", "argmax",
        "argmin", "cross", "kron", "triu", "tril", "pad", "polyval", "nan_to_num",
        "round", "isclose", "shape", "ndim", "size", "result_type", "can_cast",
    )
)  # fmt: skip
"""NumPy array functions whose results on quad arrays matched float64 to round-off in
numpy-quaddtype 1.0.0 (tests/test_quad.py). Any other raises :class:`QuadUnavailable`
before it runs: ``np.einsum`` returns zeros on two quad arrays and crashes the process
on a float64 and a quad one; ``np.dot``, ``np.linalg.norm``, ``np.clip`` have no quad
loop. (Ufuncs, ``@`` included, are not array functions: the value check covers them;
``@`` ignores the strides of a transposed quad operand in 1.0.0.)"""


class _QuadArray(np.ndarray):
    """A quad array on which only the :data:`VETTED` array functions run."""

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        if func not in VETTED:
            name = getattr(func, "__name__", str(func))
            raise QuadUnavailable(f"np.{name} is not among the array functions vetted on quad")
        return super().__array_function__(func, types, args, kwargs)


def _row_values(f: Callable[..., Any], pf: PointFunction, row: np.ndarray, q: Any) -> np.ndarray:
    """``f`` at one quad point ``row`` ``(n,)``: its output leaves flattened, ``(m,)`` quad."""
    leaves = [a.reshape(leaf.shape).view(_QuadArray)
              for a, leaf in zip(pf.layout.split(row), pf.layout.leaves, strict=True)]  # fmt: skip
    out = f(*pf.args_with(leaves))
    parts = []
    for leaf in flatten(out)[0]:
        dt = getattr(leaf, "dtype", None)
        if dt != q:
            got = type(leaf).__name__ if dt is None else str(dt)
            raise QuadUnavailable(f"it returned {got} for quad input")
        parts.append(np.asarray(leaf).ravel())
    return np.concatenate(parts)


def quad_evaluator(
    f: Callable[..., Any], pf: PointFunction, y64: np.ndarray
) -> tuple[Callable[[np.ndarray], np.ndarray] | None, str | None]:
    """``f`` on quad rows (``Target.evaluate_quad``), or None and the reason it is not.

    Parameters
    ----------
    f : callable
        The user's NumPy function.
    pf : PointFunction
        ``f`` as a function of its flat checked inputs.
    y64 : ndarray, shape (m,), float64
        ``f(x0)`` evaluated in float64 (the check against garbage).

    Returns
    -------
    evaluate_quad : callable or None
        ``(B, n)`` quad -> ``(B, m)`` quad; ``f`` is called once per row.
    reason : str or None
        Why ``f`` does not run on quad arrays (where ``evaluate_quad`` is None).
    """
    q = quad_dtype()
    if q is None:
        return None, quad_missing_reason()

    def evaluate_quad(X: np.ndarray) -> np.ndarray:
        return np.stack([_row_values(f, pf, row, q) for row in X])

    try:
        with np.errstate(all="ignore"):
            y = evaluate_quad(pf.x0.astype(q)[None, :])[0].astype(np.float64)
    except Exception as exc:  # noqa: BLE001 - any failure means: no quad reference
        return None, f"{type(exc).__name__}: {exc}"
    if y.shape != y64.shape:
        return None, "the output size changed on quad input"
    with np.errstate(all="ignore"):
        off = np.max(np.abs(y - y64), initial=0.0)
        scale = np.max(np.abs(y64), initial=0.0)
    if not (np.all(np.isfinite(y)) and np.all(np.isfinite(y64)) and off <= QUAD_AGREEMENT * scale):
        return None, (
            f"its quad value at x differs from its float64 value by {off:.2g} (largest "
            f"|f(x)| {scale:.2g}), beyond what float64 round-off explains"
        )
    return evaluate_quad, None


def defer_quad(target: Any, f: Callable[..., Any], pf: PointFunction) -> None:
    """Leave the quad evaluator of ``target`` to be built when a check asks for it
    (:meth:`~polygrad.backends.base.Target.quad_mode`)."""

    def build(t: Any) -> None:
        if t.evaluate64 is None:
            t.quad_unavailable_reason = "the function has no float64 evaluation to check it by"
            return
        y64 = t.evaluate64(t.x0[None, :])[0]
        t.evaluate_quad, t.quad_unavailable_reason = quad_evaluator(f, pf, y64)
        if t.evaluate_quad is not None and not follows_fine_moves(t.evaluate_quad,
                                                                  t.evaluate64, t.x0):  # fmt: skip
            t.evaluate_quad, t.quad_unavailable_reason = None, ROUNDED_REASON

    target.deferred["quad"] = build


ROUNDED_REASON = (
    "its quad values do not follow a move of the input far below float64's resolution "
    "(f rounds to machine precision on the way: math.* of an element, np.vectorize, a "
    "float64 cast or constant)"
)

FINE_MOVE = 2.0**-64
"""Relative size of the move that only a faithful quad evaluation of ``f`` follows."""

COARSE_MOVES = (2.0**-20, 2.0**-12, 2.0**-6)
"""Relative sizes of the float64 moves that measure each output's change along the same
direction (the first whose change is 1e4 ulps or more: far above float64's round-off,
far below the function's length scale; the largest for a small derivative, tanh of a
saturated erf, whose change over the others stays below 1e4 ulps)."""

FOLLOW_AGREEMENT = 1e-3
"""How closely the quad change over the fine move must match the float64 change over the
coarse one, scaled (both measure the same first-order change)."""


def follows_fine_moves(
    evaluate_quad: Callable[[np.ndarray], np.ndarray],
    evaluate64: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
) -> bool:
    """Whether ``f`` on quad arrays changes, under a move of :data:`FINE_MOVE` of its
    inputs, as its float64 values change under one of :data:`COARSE_MOVES` along the same
    direction (scaled by the ratio of the moves), at every output that float64 sees move,
    and float64 sees at least one move.

    A function that rounds to float64 on the way (``math.erf`` of each element through
    ``np.vectorize``, a float64 constant or cast) still returns quad arrays with the
    right value at ``x``, but its values stay on float64's grid: a move far below
    float64's resolution changes them by 0 (or by a whole float64 ulp), and its quad
    differences are float64 differences whose error bars say otherwise. So an output
    whose values are float64 numbers at the point and at two points moved by multiples
    of :data:`FINE_MOVE` is not followed either.
    """
    from ..reference.steps import pow2_scales

    q = quad_dtype()
    signs = np.where(np.arange(x0.size) % 2 == 0, 1.0, -1.0)
    w = signs * pow2_scales(x0)
    with np.errstate(all="ignore"):
        xq = x0.astype(q)
        fine = evaluate_quad(np.stack([xq + (k * FINE_MOVE * w).astype(q) for k in range(3)]))
        change_q = (fine[1] - fine[0]).astype(np.float64)
        seen = np.zeros(fine.shape[1], dtype=bool)
        off = np.zeros(fine.shape[1], dtype=bool)
        for move in COARSE_MOVES:  # the first move whose float64 change is well resolved
            coarse = evaluate64(np.stack([x0, x0 + move * w]))
            change64 = (coarse[1] - coarse[0]) * (FINE_MOVE / move)
            now = ~seen & (np.abs(coarse[1] - coarse[0]) > 1e4 * np.spacing(np.abs(coarse[0])))
            off |= now & (np.abs(change_q - change64) > FOLLOW_AGREEMENT * np.abs(change64))
            seen |= now
        # values that stay on float64's grid at every point, moved or not, were rounded to
        # float64 (a saturated erf changes by less than a float64 ulp over any move here);
        # an output that is exactly constant (a ReLU at rest) is sent on too, which costs
        # the mp reference's time, never a verdict
        on_grid = np.all(fine.astype(np.float64).astype(q) == fine, axis=0)
    # no output that float64 sees move: nothing confirms that quad follows (its values
    # are sent on, as an exactly constant output's are)
    return bool(np.any(seen)) and not np.any(off) and not np.any(on_grid)
