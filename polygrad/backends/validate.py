"""The checks every front door runs on a built target before any work.

:func:`polygrad.check`, :func:`polygrad.compare`, :func:`polygrad.sweep` and
:func:`polygrad.taylor_test` all run them: a function that is not finite at the point,
or not deterministic, gets a clear error, never a verdict or a curve.
"""

from __future__ import annotations

import numpy as np

from ..errors import InputValueError, NondeterministicFunctionError
from ..reference.steps import F64_EPS
from .base import Target

__all__ = ["check_deterministic", "check_target", "validate_target"]


def check_deterministic(target: Target) -> list[str]:
    """Evaluate twice more at x0; notes on round-off-sized differences.

    Raises
    ------
    NondeterministicFunctionError
        The evaluations differ beyond round-off.
    """
    notes = []
    x = target.x0[None, :]
    fns = [("working", target.evaluate, target.eps)]
    if target.evaluate64 is not None and target.evaluate64 is not target.evaluate:
        fns.append(("float64", target.evaluate64, F64_EPS))
    for label, fn, eps in fns:
        a = fn(np.repeat(x, 2, axis=0))
        ref = target.y0 if label == "working" else a[0]
        diffs = [np.max(np.abs(a[i] - ref)) if a[i].size else 0.0 for i in range(2)]
        diffs.append(np.max(np.abs(a[0] - a[1])) if a[0].size else 0.0)
        worst = float(max(diffs))
        if worst > 0 or not np.array_equal(np.isnan(a[0]), np.isnan(a[1])):
            size = float(np.max(np.abs(ref))) if ref.size else 0.0
            if worst > 64 * eps * size:
                raise NondeterministicFunctionError(
                    f"the function is not deterministic: two evaluations at the same input "
                    f"({label}) differ by {worst:.3g} (output size {size:.3g}). A gradient "
                    "check needs a deterministic function: call the model in inference mode "
                    "(dropout off, e.g. training=False / model.eval()) and fix random seeds."
                )
            notes.append(
                f"the function is not bitwise deterministic ({label} results differ by "
                f"{worst:.2g}, within round-off); the difference is treated as noise"
            )
    return notes


def check_target(target: Target) -> None:
    """Something to check, and a finite value of ``f`` at the point.

    Raises
    ------
    InputValueError
        No input or no output; or ``f`` is not finite at the point (its derivative
        cannot be checked, swept or Taylor-tested there).
    """
    n, m = target.n, target.m
    if n == 0 or m == 0:
        raise InputValueError(f"nothing to check: {n} inputs and {m} outputs")
    if not np.all(np.isfinite(target.y0)):
        raise InputValueError(
            "the function value at the point is not finite "
            f"({int(np.sum(~np.isfinite(target.y0)))} of {m} outputs); its derivative cannot "
            "be checked there"
        )


def validate_target(target: Target) -> list[str]:
    """Both checks, in the order every front door runs them: :func:`check_target`, then
    :func:`check_deterministic`.

    Returns
    -------
    list of str
        Notes on round-off-sized differences between evaluations at the point.

    Raises
    ------
    InputValueError, NondeterministicFunctionError
        As the two checks raise them.
    """
    check_target(target)
    return check_deterministic(target)
