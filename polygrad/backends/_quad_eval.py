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

__all__ = ["defer_quad", "disagreement", "quad_evaluator", "quad_of_mp_program"]

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
    f: Callable[..., Any], pf: PointFunction
) -> tuple[Callable[[np.ndarray], np.ndarray] | None, str | None]:
    """``f`` on quad rows (``Target.evaluate_quad``), or None and the reason it is not.

    Parameters
    ----------
    f : callable
        The user's NumPy function.
    pf : PointFunction
        ``f`` as a function of its flat checked inputs.

    Returns
    -------
    evaluate_quad : callable or None
        ``(B, n)`` quad -> ``(B, m)`` quad; ``f`` is called once per row (not yet
        vetted: see :func:`defer_quad`).
    reason : str or None
        Why there is no quad evaluation (where ``evaluate_quad`` is None).
    """
    q = quad_dtype()
    if q is None:
        return None, quad_missing_reason()

    def evaluate_quad(X: np.ndarray) -> np.ndarray:
        return np.stack([_row_values(f, pf, row, q) for row in X])

    return evaluate_quad, None


def disagreement(
    evaluate_quad: Callable[[np.ndarray], np.ndarray], x0: np.ndarray, y64: np.ndarray
) -> str | None:
    """Why ``evaluate_quad`` at ``x0`` is not ``f``: it fails, changes the output size, or
    differs from the float64 values ``y64`` by more than :data:`QUAD_AGREEMENT`; None when
    it agrees."""
    q = quad_dtype()
    try:
        with np.errstate(all="ignore"):
            y = evaluate_quad(x0.astype(q)[None, :])[0].astype(np.float64)
    except Exception as exc:  # noqa: BLE001 - any failure means: no quad reference
        return f"{type(exc).__name__}: {exc}"
    if y.shape != y64.shape:
        return "the output size changed on quad input"
    with np.errstate(all="ignore"):
        off = np.max(np.abs(y - y64), initial=0.0)
        scale = np.max(np.abs(y64), initial=0.0)
    if not (np.all(np.isfinite(y)) and np.all(np.isfinite(y64)) and off <= QUAD_AGREEMENT * scale):
        return (
            f"its quad value at x differs from its float64 value by {off:.2g} (largest "
            f"|f(x)| {scale:.2g}), beyond what float64 round-off explains"
        )
    return None


def quad_of_mp_program(
    target: Any, build: Callable[[Any, Any], Callable[[np.ndarray], np.ndarray]]
) -> tuple[Callable[[np.ndarray], np.ndarray] | None, str | None]:
    """The quad evaluator of a backend whose mp reference interprets a captured program
    (``target.evaluate_mp``, built first): ``build(evaluate_mp, q)``, once per captured
    program (kept on ``evaluate_mp``, which the capture cache keeps); or None and why."""
    q = quad_dtype()
    if q is None:
        return None, quad_missing_reason()
    if not target.mp_mode():
        return None, f"no captured program to run on quad arrays ({target.mp_unavailable_reason})"
    evaluate_mp = target.evaluate_mp
    built = getattr(evaluate_mp, "quad", None)
    if built is None:
        try:
            built = (build(evaluate_mp, q), None)
        except Exception as exc:  # noqa: BLE001 - any failure means: no quad reference
            built = (None, str(exc))
        try:
            evaluate_mp.quad = built
        except AttributeError:  # not a function object: built again next time
            pass
    return built  # type: ignore[no-any-return]


QuadMaker = Callable[[Any], tuple[Callable[[np.ndarray], np.ndarray] | None, str | None]]
"""Builds a target's quad evaluation: ``target -> (evaluate_quad or None, reason or None)``
(the target is an argument, not closed over: a target that holds a closure holding it
would be garbage only the cyclic collector frees, with the tensors it holds)."""


def defer_quad(target: Any, make: QuadMaker, interpreted: bool = False) -> None:
    """Leave the quad evaluator of ``target`` to be built when a check asks for it
    (:meth:`~polygrad.backends.base.Target.quad_mode`).

    ``make(target)`` builds it, and it is kept only where it agrees with the float64 evaluation
    at the point (:func:`disagreement`) and, unless ``interpreted``, follows moves below
    float64's resolution (:func:`follows_fine_moves`). An *interpreted* evaluator runs
    every operation of the captured program on quad arrays by construction (the jaxpr,
    the ATen graph; constants enter exactly), so no value of ``f`` can round to float64 on
    the way, which is what the moves detect in a user's NumPy code.
    """

    def build(t: Any) -> None:
        if t.evaluate64 is None:
            t.quad_unavailable_reason = "the function has no float64 evaluation to check it by"
            return
        evaluate_quad, reason = make(t)
        if evaluate_quad is not None:
            reason = disagreement(evaluate_quad, t.x0, t.evaluate64(t.x0[None, :])[0])
        if evaluate_quad is not None and reason is None and not interpreted:
            try:
                follows = follows_fine_moves(evaluate_quad, t.evaluate64, t.x0)
            except Exception as exc:  # noqa: BLE001 - as above
                follows, reason = False, f"{type(exc).__name__}: {exc}"
            reason = reason or (None if follows else ROUNDED_REASON)
        t.evaluate_quad = evaluate_quad if reason is None else None
        t.quad_unavailable_reason = reason

    target.deferred["quad"] = build


ROUNDED_REASON = (
    "its quad values do not follow a move of the input far below float64's resolution "
    "(f rounds to machine precision on the way: math.* of an element, np.vectorize, a "
    "float64 cast or constant)"
)

FINE_MOVE = 2.0**-64
"""Relative size of the move that only a faithful quad evaluation of ``f`` follows."""

COARSE_MOVES = (2.0**-36, 2.0**-30, 2.0**-24, 2.0**-18, 2.0**-12, 2.0**-6)
"""Relative sizes of the float64 moves that measure each output's change along the same
direction, by a central difference: the smallest whose change is :data:`RESOLVED_ULPS`
or more (far above float64's round-off, as far below the function's length scale as
float64 allows: a relative move is an absolute one of ``|x|`` times it, and ``sin`` near
``1e6`` has a length scale of 1); the largest for a small derivative, tanh of a
saturated erf, whose change over the others stays below that."""

RESOLVED_ULPS = 1e5
"""Change (in float64 ulps of the output) at which a float64 difference is resolved: its
round-off, a few ulps, is then within :data:`FOLLOW_AGREEMENT` of it."""

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
    direction (central differences, scaled by the ratio of the moves), at every output
    that float64 sees move, and float64 sees at least one move.

    A function that rounds to float64 on the way (``math.erf`` of each element through
    ``np.vectorize``, a float64 constant or cast) still returns quad arrays with the
    right value at ``x``, but its values stay on float64's grid: a move far below
    float64's resolution changes them by 0 (or by a whole float64 ulp), and its quad
    differences are float64 differences whose error bars say otherwise. So an output
    whose values are float64 numbers at the point and at three points moved by multiples
    of :data:`FINE_MOVE` is not followed either.
    """
    from ..reference.steps import pow2_scales

    q = quad_dtype()
    signs = np.where(np.arange(x0.size) % 2 == 0, 1.0, -1.0)
    w = signs * pow2_scales(x0)
    with np.errstate(all="ignore"):
        xq = x0.astype(q)
        fine = evaluate_quad(np.stack([xq + (k * FINE_MOVE * w).astype(q) for k in (0, 1, -1, 2)]))
        change_q = ((fine[1] - fine[2]) / 2).astype(np.float64)
        rows = [x0] + [x0 + s * move * w for move in COARSE_MOVES for s in (1.0, -1.0)]
        coarse = evaluate64(np.stack(rows))
        resolved = 2 * RESOLVED_ULPS * np.spacing(np.abs(coarse[0]))
        seen = np.zeros(fine.shape[1], dtype=bool)
        off = np.zeros(fine.shape[1], dtype=bool)
        for k, move in enumerate(COARSE_MOVES):  # the smallest well-resolved move
            diff = coarse[1 + 2 * k] - coarse[2 + 2 * k]
            now = ~seen & (np.abs(diff) > resolved)
            change64 = diff / 2 * (FINE_MOVE / move)
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
