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
    """Evaluate again at x0, twice in one batch and once alone; notes on round-off-sized
    differences.

    Two kinds of difference are told apart. Evaluations of one path (the batched
    evaluator, called twice) that differ beyond round-off of ``f`` are nondeterminism
    (dropout, an unseeded random draw, state kept between calls). The batched evaluator
    and the call that gave ``f``'s value at the point are two paths: a compiled graph
    rewrites arithmetic (constant folding, reassociation, fused operations), so they can
    differ by round-off of ``f``'s intermediates, which cancellation makes larger than
    ``f``; up to ``sqrt(eps)`` of ``f``'s size that is a note, beyond it an error.

    Raises
    ------
    NondeterministicFunctionError
        Evaluations of one path differ beyond round-off, or the two paths differ by more
        than ``sqrt(eps)`` of ``f``'s size.
    """
    notes = []
    x = target.x0[None, :]
    fns = [("working", target.evaluate, target.eps)]
    if target.evaluate64 is not None and target.evaluate64 is not target.evaluate:
        fns.append(("float64", target.evaluate64, F64_EPS))
    for label, fn, eps in fns:
        a = np.concatenate([fn(np.repeat(x, 2, axis=0)), fn(x)])
        ref = target.y0 if label == "working" else a[0]
        size = float(np.max(np.abs(ref))) if ref.size else 0.0
        repeat = _worst(a[0], a[1:])
        if repeat > 64 * eps * size:
            _refuse(f"two evaluations at the same input ({label}) differ by {repeat:.3g} "
                    f"(output size {size:.3g})")  # fmt: skip
        path = _worst(ref, a[:1])
        if path > np.sqrt(eps) * size:
            raise NondeterministicFunctionError(
                f"the function's value at the input ({label}) differs by {path:.3g} (output "
                f"size {size:.3g}) between a plain call and a batched one, far beyond "
                "round-off: the check needs one function, and this one depends on how it is "
                "called (state kept between calls, a batch statistic, or a compiled graph "
                "that rewrites arithmetic whose terms cancel)"
            )
        if path > 64 * eps * size:
            notes.append(_path_note(label, path, size))
        elif max(repeat, path) > 0:
            notes.append(
                f"the function is not bitwise deterministic ({label} results differ by "
                f"{max(repeat, path):.2g}, within round-off); the difference is treated as noise"
            )
    return notes


def _worst(ref: np.ndarray, rows: np.ndarray) -> float:
    """The largest difference of ``rows`` from ``ref``; inf where their NaNs differ."""
    if not ref.size:
        return 0.0
    if not all(np.array_equal(np.isnan(ref), np.isnan(r)) for r in rows):
        return np.inf
    with np.errstate(invalid="ignore"):
        return float(np.nanmax(np.abs(rows - ref[None]), initial=0.0))


def _refuse(what: str) -> None:
    raise NondeterministicFunctionError(
        f"the function is not deterministic: {what}. A gradient check needs a deterministic "
        "function: call the model in inference mode (dropout off, e.g. training=False / "
        "model.eval()) and fix random seeds."
    )


def _path_note(label: str, path: float, size: float) -> str:
    return (
        f"f's {label} value at the input differs by {path:.2g} (output size {size:.2g}) "
        "between a plain call and a batched one, the same from call to call: the framework "
        "computes the two differently (a compiled graph folds constants and reassociates "
        "arithmetic), and round-off of f's intermediates, larger than f where they cancel, "
        "differs with it; it is treated as noise"
    )


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
