"""Whether an operation of a captured program, run on mpmath numbers, sits at its kink.

Autodiff of a composition takes one side of every kink an intermediate sits on (a ReLU
at 0, a tie of ``max``), and where the composition is differentiable that side is not
the derivative (Bolte & Pauwels, 2020). A check that sees an entry wrong at the point
alone asks whether some operation of ``f`` sits exactly at its kink there: the
interpreters of this package (the jaxpr, the ATen graph, the TensorFlow graph) run ``f``
once at the point under :func:`recording_kinks`, and each operation they apply is looked
up in their table of operations with kinks, whose test (below) is evaluated on its exact
arguments. Operations not in a table are differentiable wherever their value is finite
(``exp``, ``matmul``, ``reshape``...).

Tests, on object arrays of ``mpf`` (or exact integers):

* :func:`tie`: two arguments equal somewhere (``max``, ``min``, comparisons that a
  ``where`` reads);
* :func:`at_zero`: an argument 0 (``abs``, ``sign``, ReLU, ``sqrt``);
* :func:`power_at_zero`: a power's base 0 where its exponent is not a whole number
  (``x ** 0.5``; ``x ** 2`` is smooth at 0);
* :func:`at_integer`: an integer (``floor``, ``ceil``, ``trunc``); with an offset of
  one half, a half-integer (rounding to nearest);
* :func:`repeated`: two equal entries anywhere in an argument (reductions to an extreme,
  ``argmax``, sorting, max pooling): a superset of the ties that matter, so that no tie
  is missed;
* :func:`at_values`: an argument equal to one of some values (``clamp`` bounds,
  ``hardtanh`` at -1 and 1, ``hardswish`` at -3 and 3).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "KinkRecord",
    "at_integer",
    "at_values",
    "at_zero",
    "floating",
    "is_recording",
    "note_operation",
    "power_at_zero",
    "recording_kinks",
    "region_at_kink",
    "repeated",
    "suspended",
    "tie",
]


@dataclass
class KinkRecord:
    """What one run of an interpreter under :func:`recording_kinks` saw.

    ``ran`` is True once an interpreter that consults its kink table applied an
    operation; ``found`` names the operations that sat exactly at their kink.
    """

    ran: bool = False
    found: list[str] = field(default_factory=list)


_RECORD: ContextVar[KinkRecord | None] = ContextVar("polygrad_kink_record", default=None)


@contextlib.contextmanager
def recording_kinks() -> Iterator[KinkRecord]:
    """While active, the interpreters note every operation applied at its kink."""
    record = KinkRecord()
    token = _RECORD.set(record)
    try:
        yield record
    finally:
        _RECORD.reset(token)


@contextlib.contextmanager
def suspended() -> Iterator[None]:
    """While active, nothing is recorded (the inside of a custom rule's region)."""
    token = _RECORD.set(None)
    try:
        yield
    finally:
        _RECORD.reset(token)


def is_recording() -> bool:
    """Whether :func:`recording_kinks` is active (interpreters test kinks only then)."""
    return _RECORD.get() is not None


def note_operation(name: str, at_kink: Any) -> None:
    """Called by an interpreter for every operation it applies.

    Parameters
    ----------
    name : str
        The operation.
    at_kink : callable or None
        ``() -> bool``: whether the operation sits at its kink at its arguments (its
        entry in the interpreter's table), or None for an operation without kinks. It
        is called only while :func:`recording_kinks` is active.
    """
    record = _RECORD.get()
    if record is None:
        return
    record.ran = True
    if at_kink is not None and at_kink():
        record.found.append(name)


def _objects(a: Any) -> np.ndarray:
    return np.asarray(a, dtype=object)


def _any(mask: Any) -> bool:
    return bool(np.any(np.asarray(mask, dtype=bool)))


def floating(*values: Any) -> bool:
    """Whether some value is floating (mpmath numbers, or a float): exact integers, such
    as index arithmetic, have no derivative and no kink."""
    return any(np.asarray(v).dtype.kind in "fO" for v in values)


def tie(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` (broadcast) are equal somewhere."""
    return _any(np.equal(_objects(a), _objects(b)))


def at_zero(a: Any) -> bool:
    """Whether an entry of ``a`` is 0."""
    return _any(np.equal(_objects(a), 0))


def power_at_zero(base: Any, exponent: Any) -> bool:
    """Whether an entry of ``base`` is 0 where its exponent (broadcast) is not a whole
    number >= 0: ``x ** a`` is smooth at 0 for ``a = 0, 1, 2, ...`` (a polynomial), and
    has an infinite slope (``0 < a < 1``) or no left side (other ``a``) there."""
    if exponent is None:
        return at_zero(base)
    b, e = np.broadcast_arrays(_objects(base), _objects(exponent))
    return any(v == 0 and not _whole(a) for v, a in zip(b.ravel(), e.ravel(), strict=True))


def _whole(a: Any) -> bool:
    """Whether ``a`` is a whole number >= 0 (an exact int, a float or an mpf)."""
    try:
        return bool(a >= 0 and a == int(a))
    except (TypeError, ValueError, OverflowError):
        return False


def at_values(a: Any, *values: Any) -> bool:
    """Whether an entry of ``a`` equals one of ``values`` (None values are skipped)."""
    return any(v is not None and tie(a, v) for v in values)


def at_integer(a: Any, offset: float = 0.0) -> bool:
    """Whether an entry of ``a`` minus ``offset`` is an integer (finite entries only)."""
    for v in _objects(a).ravel():
        try:
            w = v - offset
            if abs(w) < float("inf") and w == int(w):
                return True
        except (TypeError, ValueError, OverflowError):
            continue
    return False


def repeated(a: Any) -> bool:
    """Whether two entries of ``a`` are equal."""
    values = _objects(a).ravel().tolist()
    try:
        return len(set(values)) < len(values)
    except TypeError:  # unhashable entries: compare pairwise after sorting
        values = sorted(values)
        return any(u == v for u, v in zip(values, values[1:], strict=False))


REGION_ENTRIES = 256
"""Most floating input entries of a custom rule's region whose one-sided derivatives are
compared; a larger region counts as at a kink wherever an operation inside it is."""


def region_at_kink(ctx: Any, run: Callable[[list[Any]], np.ndarray], invals: list[Any]) -> bool:
    """Whether a custom rule's region sits at a kink of its own function.

    Its rule replaces the derivative of the operations inside it, so their kinks are not
    autodiff's (the ``max`` inside a stable ``logaddexp``); the region is at a kink where
    its own function is (a ReLU written as a custom rule, at 0). Nothing is recorded
    while the region runs here.

    Parameters
    ----------
    ctx : mpmath context
        The context of the values (30 digits or so: steps are ``2^-40`` of an entry).
    run : callable
        ``list of inputs -> (k,) object array``: the region's floating outputs,
        flattened, at those inputs.
    invals : list
        The region's inputs at the point; object arrays of ``mpf`` are floating.

    Returns
    -------
    bool
        True where a right and a left difference quotient along some floating input
        entry differ (see :func:`_one_sided_differ`), or where the region has more than
        :data:`REGION_ENTRIES` floating input entries (assumed so).
    """
    floats = [i for i, v in enumerate(invals) if np.asarray(v).dtype == object]
    if sum(np.size(invals[i]) for i in floats) > REGION_ENTRIES:
        return True
    with suspended():
        base = run(invals)
        for i in floats:
            for j in range(np.size(invals[i])):
                x = _objects(invals[i]).ravel()[j]
                h = ctx.mpf(2) ** (ctx.mag(x) - 40) if x != 0 else ctx.mpf(2) ** -40
                up, down = (run(_moved(invals, i, j, s * h)) for s in (1, -1))
                if _one_sided_differ(base, up, down, h):
                    return True
    return False


def _moved(invals: list[Any], i: int, j: int, h: Any) -> list[Any]:
    """``invals`` with entry ``j`` of argument ``i`` moved by ``h``."""
    a = np.array(invals[i], dtype=object, copy=True)
    a.reshape(-1)[j] = a.reshape(-1)[j] + h
    return [a if k == i else v for k, v in enumerate(invals)]


def _one_sided_differ(base: np.ndarray, up: np.ndarray, down: np.ndarray, h: Any) -> bool:
    """Whether a right and a left difference quotient at step ``h`` (``2^-40`` of the
    entry, on 30-digit numbers) differ by more than ``2^-20`` of their size: a smooth
    function's differ by about its curvature times ``h``, a kink's by its jump."""
    for b, u, d in zip(base, up, down, strict=True):
        right, left = (u - b) / h, (b - d) / h
        if not abs(right - left) <= 2.0**-20 * (abs(right) + abs(left) + 1):
            return True  # (an infinite or undefined quotient too)
    return False
