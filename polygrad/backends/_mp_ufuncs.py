"""NumPy ufuncs that have no object loop, on mpmath numbers.

NumPy runs a ufunc on an object array by calling the element's method of the same
name (see :mod:`polygrad.backends.mpmath`); a few ufuncs have no object loop at all and
raise ``TypeError`` there: ``np.logaddexp`` (the usual stable softplus and
log-sum-exp), ``np.logaddexp2``, ``np.copysign``, ``np.isfinite``, ``np.isnan``,
``np.isinf``, ``np.signbit``, ``np.heaviside``, ``np.float_power``. Code that uses
them runs on :class:`MpArray`, an object-array subclass whose ``__array_ufunc__``
computes them on mpmath numbers and whose results (of every ufunc and array function,
reductions included) stay :class:`MpArray`, so that the next such ufunc is
intercepted too. Every other operation is NumPy's own on the object array.

Floating-point properties with no meaning at arbitrary precision (``np.spacing``,
``np.nextafter``, ``np.frexp``) are left to raise: the function then has no mp
reference, and the report says why.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from ._mp_kinks import function_at_kink, ufunc_at_kink

__all__ = ["NO_OBJECT_LOOP", "mp_array_type", "recording_kinks"]

NO_OBJECT_LOOP = (
    "logaddexp", "logaddexp2", "copysign", "isfinite", "isnan", "isinf", "signbit",
    "heaviside", "float_power",
)  # fmt: skip
"""Names of the ufuncs :class:`MpArray` computes on mpmath numbers."""

_PREDICATES = frozenset({"isfinite", "isnan", "isinf", "signbit"})


def _negative(ctx: Any, v: Any) -> bool:
    """The sign bit of ``v``: a machine float's own (``-0.0`` included); an mpf's sign
    (mpmath has no negative zero)."""
    if isinstance(v, (float, np.floating)):
        return math.copysign(1.0, float(v)) < 0
    return bool(ctx.mpf(v) < 0)


def _implementations(ctx: Any) -> dict[str, Callable[..., Any]]:
    """Each ufunc of :data:`NO_OBJECT_LOOP` as a function of ``ctx`` numbers."""
    mpf = ctx.mpf

    def logaddexp(a: Any, b: Any) -> Any:
        # the larger plus log1p of the ratio: log(e^a + e^b) at a << b would keep only
        # the digits of e^(a - b) that survive being added to 1
        a, b = mpf(a), mpf(b)
        hi, lo = (a, b) if a >= b else (b, a)
        return hi if ctx.isinf(lo) and lo < 0 else hi + ctx.log1p(ctx.exp(lo - hi))

    def logaddexp2(a: Any, b: Any) -> Any:
        a, b = mpf(a), mpf(b)
        hi, lo = (a, b) if a >= b else (b, a)
        if ctx.isinf(lo) and lo < 0:
            return hi
        return hi + ctx.log1p(ctx.power(2, lo - hi)) / ctx.ln2

    def heaviside(a: Any, h0: Any) -> Any:
        a = mpf(a)
        return mpf(h0) if a == 0 else mpf(1 if a > 0 else 0)

    return {
        "logaddexp": logaddexp,
        "logaddexp2": logaddexp2,
        "copysign": lambda a, b: -ctx.fabs(mpf(a)) if _negative(ctx, b) else ctx.fabs(mpf(a)),
        "isfinite": lambda a: bool(ctx.isfinite(mpf(a))),
        "isnan": lambda a: bool(ctx.isnan(mpf(a))),
        "isinf": lambda a: bool(ctx.isinf(mpf(a))),
        "signbit": lambda a: _negative(ctx, a),
        "heaviside": heaviside,
        "float_power": lambda a, b: ctx.power(mpf(a), mpf(b)),
    }


def _exact(ctx: Any, a: np.ndarray) -> np.ndarray:
    """An object array ``a`` as a plain one with its numbers as mpmath numbers
    (``np.maximum(u, 0)`` leaves the int 0, which has no ``exp`` method).

    A machine float in an :class:`MpArray` (a result of the mpmath input) was computed at
    machine precision (``math.erf`` of an mpmath number through ``np.vectorize``):
    ``TypeError``, which the conversion of constants in :func:`_plain` would otherwise
    hide. In a plain object array it is a constant of the code, as a float scalar is
    (``np.asarray(W, dtype=x.dtype)`` with ``x`` of dtype object): no mpmath number
    becomes a machine float unseen, since every conversion (``float()``, ``math.*``,
    ``np.float64()``) raises while ``f`` runs (see :mod:`polygrad.backends.mpmath`).
    """
    plain = a.view(np.ndarray)
    constant = type(a) is np.ndarray
    numbers = False
    for v in plain.flat:
        if isinstance(v, (float, np.floating)) and v != 0 and not constant:
            # (an exact 0.0 is a constant anywhere)
            raise TypeError(
                f"the function produced a {type(v).__name__} value on mpmath input "
                "(a conversion to machine precision)"
            )
        numbers = numbers or _machine_number(v)
    if not numbers:
        return plain
    out = np.empty(plain.shape, dtype=object)
    for i, v in enumerate(plain.flat):
        out.flat[i] = _as_mpf(ctx, v) if _machine_number(v) else v
    return out


def _machine_number(v: Any) -> bool:
    """An int or a machine float (not a bool): a constant to convert to an mpf."""
    numeric = isinstance(v, (int, np.integer, float, np.floating))
    return numeric and not isinstance(v, (bool, np.bool_))


def _as_mpf(ctx: Any, v: Any) -> Any:
    """An int or a machine float as the mpmath number of the same value."""
    return ctx.mpf(int(v)) if isinstance(v, (int, np.integer)) else ctx.mpf(float(v))


def _plain(ctx: Any, a: Any) -> Any:
    """``a`` with every object array in it (tuples, lists) as a plain one (see
    :func:`_exact`), and every binary floating scalar (a constant of the code: the
    bounds of ``np.clip``, the ``0.5`` of ``np.maximum(u, 0.5)``) as the mpmath number
    of the same value, so that a result that takes it is one too."""
    if isinstance(a, np.ndarray) and a.dtype == object:
        return _exact(ctx, a)
    if isinstance(a, (float, np.floating)) and not isinstance(a, np.longdouble):
        return ctx.mpf(float(a))
    if type(a) in (tuple, list):
        return type(a)(_plain(ctx, b) for b in a)
    return a


@contextlib.contextmanager
def recording_kinks(cls: type[np.ndarray]) -> Iterator[list[str]]:
    """The names of the operations on ``cls`` arrays (an :func:`mp_array_type`) that sit
    exactly at their kink, while inside."""
    found: list[str] = []
    cls.kinks = found  # type: ignore[attr-defined]
    try:
        yield found
    finally:
        cls.kinks = None  # type: ignore[attr-defined]


def _views(out: Any) -> Any:
    """The ``out=`` of a ufunc (an array or a tuple of them) as plain arrays, in place."""
    if isinstance(out, tuple):
        return tuple(_views(o) for o in out)
    return out.view(np.ndarray) if isinstance(out, np.ndarray) else out


def mp_array_type(ctx: Any) -> type[np.ndarray]:
    """The :class:`MpArray` class of ``ctx`` (one per context, cached on it)."""
    cls = getattr(ctx, "_polygrad_mp_array", None)
    if cls is None:
        cls = _make_class(ctx)
        ctx._polygrad_mp_array = cls
    return cls


def _make_class(ctx: Any) -> type[np.ndarray]:
    impls = _implementations(ctx)

    def wrap(out: Any) -> Any:
        """Object arrays and mpmath scalars as ``MpArray`` (a 0-d one for a scalar, so
        that a reduction's result still meets the ufuncs above); others unchanged."""
        if isinstance(out, np.ndarray):
            return out.view(MpArray) if out.dtype == object and type(out) is np.ndarray else out
        if isinstance(out, ctx.mpf):
            zero_d = np.empty((), dtype=object)
            zero_d[()] = out
            return zero_d.view(MpArray)
        if type(out) in (tuple, list):
            return type(out)(wrap(o) for o in out)
        return out

    class MpArray(np.ndarray):
        """An object array of mpmath numbers on which every ufunc runs (see the module).

        While ``kinks`` is a list (see :func:`recording_kinks`), the name of every
        operation that sits exactly at its kink is appended to it (see
        :mod:`polygrad.backends._mp_kinks`)."""

        kinks: list[str] | None = None

        def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
            if method == "at":  # np.add.at(a, idx, b) writes a in place: a view, not a copy
                ufunc.at(_views(inputs[0]), *_plain(ctx, inputs[1:]), **kwargs)
                return None
            inputs = _plain(ctx, inputs)
            # out= is written in place: a view of the same memory, never a converted copy
            kwargs = {k: _views(v) if k == "out" else _plain(ctx, v) for k, v in kwargs.items()}
            if MpArray.kinks is not None and ufunc_at_kink(ufunc.__name__, method, inputs, kwargs):
                MpArray.kinks.append(ufunc.__name__)
            impl = impls.get(ufunc.__name__)
            if impl is None or method != "__call__" or "out" in kwargs:
                return wrap(getattr(ufunc, method)(*inputs, **kwargs))
            out = np.frompyfunc(impl, ufunc.nin, 1)(*inputs)
            if ufunc.__name__ in _PREDICATES:
                return np.asarray(out, dtype=bool)
            return wrap(out if isinstance(out, np.ndarray) else np.asarray(out, dtype=object))

        def __array_function__(
            self, func: Any, types: Any, args: Iterable[Any], kwargs: Mapping[str, Any]
        ) -> Any:
            plain = _plain(ctx, tuple(args))
            name = getattr(func, "__name__", "")
            if MpArray.kinks is not None and function_at_kink(name, plain, kwargs):
                MpArray.kinks.append(name)
            out = func(*plain, **{k: _plain(ctx, v) for k, v in kwargs.items()})
            # a new array's machine numbers (np.zeros_like's int 0) become mpmath numbers
            # now: converted later, each view of it (np.moveaxis) would be a copy, and an
            # in-place write through the view (np.add.at) would be lost
            fresh = isinstance(out, np.ndarray) and out.dtype == object and out.base is None
            return wrap(_exact(ctx, out) if fresh else out)

    return MpArray
