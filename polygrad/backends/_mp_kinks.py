"""Whether an operation of NumPy code, run on mpmath numbers, sits exactly at its kink.

Autodiff of a composition takes one side of every kink an intermediate sits on (a ReLU
at 0, a tie of ``max``), and where the composition is differentiable that side is not
the derivative (Bolte & Pauwels, 2020): a check calls such entries NONSMOOTH (see
:func:`polygrad.pipeline.kinks.kinks_of_intermediates`). NumPy code run once on the
array subclass of :mod:`polygrad.backends._mp_ufuncs` at the point, exactly, shows
every ufunc and array function it calls, so it can say whether any of them sits at a
kink there; where none does, a rule that takes another value at the point alone is
wrong there, not a side of a kink.

An operation is *at its kink* when it switches branch exactly at its arguments:

* ``maximum``, ``minimum``, ``fmax``, ``fmin`` and the comparisons (``greater``,
  ``less_equal``, ``equal``...): two arguments equal (a ``where`` reads a comparison);
* ``absolute``, ``fabs``, ``sign``, ``heaviside``: an argument 0;
* ``floor``, ``ceil``, ``trunc``: an integer; ``rint``: a half-integer;
* ``np.max``, ``np.min``, ``maximum.reduce``, ``minimum.reduce``: a tie of the extreme;
* ``np.clip``: an entry at a bound; ``np.sort``, ``np.argsort``, ``np.argmax``,
  ``np.argmin``, ``np.median``, ``np.percentile``, ``np.quantile``, ``np.partition``,
  ``np.unique``: two equal entries.

Branches taken in Python (``if v > 0``) are not seen.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["function_at_kink", "ufunc_at_kink"]

_TIES = frozenset(
    {"maximum", "minimum", "fmax", "fmin", "greater", "greater_equal", "less", "less_equal",
     "equal", "not_equal"}
)  # fmt: skip
_AT_ZERO = frozenset({"absolute", "fabs", "sign", "heaviside"})
_AT_INTEGER = frozenset({"floor", "ceil", "trunc"})
_EXTREMES = frozenset({"maximum", "minimum", "fmax", "fmin"})
_ORDERING = frozenset(
    {"sort", "argsort", "argmax", "argmin", "median", "percentile", "quantile", "partition",
     "argpartition", "unique", "nanmax", "nanmin"}
)  # fmt: skip


def _any(mask: Any) -> bool:
    return bool(np.any(np.asarray(mask, dtype=bool)))


def _integral(a: Any, offset: float = 0.0) -> bool:
    values = np.asarray(a, dtype=object).ravel()
    return any(v - offset == int(v - offset) for v in values if _finite(v))


def _finite(v: Any) -> bool:
    try:
        return bool(abs(v) < float("inf"))
    except TypeError:
        return False


def _tied_extreme(ufunc: np.ufunc, a: Any, axis: Any) -> bool:
    """Whether the extreme (``ufunc`` ``maximum`` or ``minimum``) of ``a`` along ``axis``
    (None: all of it) is attained twice somewhere."""
    a = np.asarray(a, dtype=object)
    if a.size == 0:
        return False
    if axis is None:
        a, axis = a.ravel(), 0
    extreme = np.asarray(ufunc.reduce(a, axis=axis, keepdims=True), dtype=object)
    return _any(np.sum(a == extreme, axis=axis) >= 2)


def ufunc_at_kink(name: str, method: str, inputs: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
    """Whether the ufunc ``name`` (``method`` ``"__call__"`` or ``"reduce"``) sits at its
    kink at ``inputs`` (plain object arrays or mpmath scalars)."""
    if method == "reduce" and name in _EXTREMES:
        ufunc = np.maximum if name in ("maximum", "fmax") else np.minimum
        return _tied_extreme(ufunc, inputs[0], kwargs.get("axis", 0))
    if method != "__call__":
        return False
    if name in _TIES and len(inputs) == 2:
        return _any(np.equal(inputs[0], inputs[1]))
    if name in _AT_ZERO:
        return _any(np.equal(inputs[0], 0))
    if name in _AT_INTEGER:
        return _integral(inputs[0])
    if name == "rint":
        return _integral(inputs[0], 0.5)
    return False


def function_at_kink(name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
    """Whether the array function ``name`` (``np.clip``, ``np.sort``...) sits at its kink."""
    if name == "clip" and args:
        a = np.asarray(args[0], dtype=object)
        bounds = [*args[1:3], *(kwargs.get(k) for k in ("a_min", "a_max", "min", "max"))]
        return any(b is not None and _any(np.equal(a, b)) for b in bounds)
    if name in ("max", "amax", "min", "amin") and args:
        ufunc = np.maximum if "max" in name else np.minimum
        axis = args[1] if len(args) > 1 else kwargs.get("axis")
        return _tied_extreme(ufunc, args[0], axis)
    if name in _ORDERING and args:
        values = np.asarray(args[0], dtype=object).ravel()
        return len(set(values.tolist())) < values.size
    return False
