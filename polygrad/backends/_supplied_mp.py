"""A supplied NumPy derivative (``grad=``, ``jac=``, ``vjp=``) evaluated on mpmath numbers.

A NumPy function that runs on mpmath numbers (its mp reference) usually has a
hand-written derivative that does too. Evaluated there, at the point, it is the
rule in exact arithmetic: beside the reference it tells a rule that is right
but rounds badly in float64 from a wrong one (see ``Target.vjp_mp``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ._common import PointFunction
from .base import Supplied
from .mpmath import _shared_context, mp_array, mp_evaluator

__all__ = ["supplied_vjp_mp"]


def _as_rows(flat: np.ndarray, m: int, sizes: Sequence[int]) -> np.ndarray:
    """A Jacobian flattened one argument after another, ``(m * n_1 + ...,)``, as ``(m, n)``."""
    parts, off = [], 0
    for size in sizes:
        parts.append(flat[off : off + m * size].reshape(m, size))
        off += m * size
    return np.concatenate(parts, axis=1)


def supplied_vjp_mp(
    pf: PointFunction, supplied: Supplied, n_args: int, out_shape: tuple[int, ...]
) -> Callable[[np.ndarray, int], np.ndarray] | None:
    """``vjp_mp`` of the supplied derivative: ``(U (k, m), dps) -> object (k, n)``, or None.

    ``grad=`` and ``jac=`` are evaluated once per call and multiplied by the
    cotangents on mpmath numbers; ``vjp=`` is called with each cotangent as an
    array of mpmath numbers. None for ``jvp=`` (it gives no VJP). A rule that does
    not run on mpmath numbers raises when called (the check then keeps its
    verdicts).
    """
    shapes = [leaf.shape for leaf in pf.layout.leaves]
    sizes = [leaf.size for leaf in pf.layout.leaves]

    def at(rule: Callable[..., Any], dps: int) -> np.ndarray:
        def call(leaves: list[Any]) -> Any:
            value = rule(*pf.args_with(leaves))
            return value if n_args > 1 else (value,)

        try:
            return mp_evaluator(call, shapes)(pf.x0, np.zeros_like(pf.x0), dps)
        except TypeError:  # a ufunc without an object loop (np.logaddexp...)
            return mp_evaluator(call, shapes, ufuncs=True)(pf.x0, np.zeros_like(pf.x0), dps)

    whole = supplied.grad if supplied.grad is not None else supplied.jac
    if whole is not None:
        rule = whole

        def from_jacobian(U: np.ndarray, dps: int) -> np.ndarray:
            J = _as_rows(at(rule, dps), int(np.shape(U)[1]), sizes)
            return np.dot(mp_array(_shared_context(dps), np.asarray(U, dtype=np.float64)), J)

        return from_jacobian
    vjp = supplied.vjp
    if vjp is None:
        return None

    def from_vjp(U: np.ndarray, dps: int) -> np.ndarray:
        ctx = _shared_context(dps)
        rows = []
        for u in np.asarray(U, dtype=np.float64):
            cot = mp_array(ctx, u.reshape(out_shape))
            rows.append(at(lambda *args, cot=cot: vjp(cot, *args), dps))
        return np.stack(rows)

    return from_vjp
