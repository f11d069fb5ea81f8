"""Run plain NumPy code on mpmath numbers at a chosen precision.

NumPy applies a ufunc to an object array by calling the method of the same
name on each element (``np.exp(a)`` calls ``a[i].exp()``). A private
``mpmath.MPContext`` (so the user's global ``mpmath.mp`` is untouched) gets a
number type with those methods, so ``np.exp``, ``np.sum``, ``@``,
broadcasting, indexing, ``np.where`` and ``np.maximum`` run unchanged on
object arrays of high-precision numbers.

What cannot run this way (the function then falls back to a float64
reference, and the report says why):

* anything that converts to a machine float: ``astype(np.float32)``,
  ``float(x)``, ``math.exp(x[0])``, ``np.float64(x[i])``, ``np.asarray(x,
  dtype=float)``, writing into a preallocated float array (``out = np.empty(n);
  out[:] = ...``). Such a conversion raises while the function runs on mpmath
  numbers: a term rounded to float64 would not move along an mp step, and the mp
  reference would silently lose its derivative;
* compiled routines: ``np.linalg``, ``np.fft``, SciPy, Numba, C extensions;
* floating-point properties with no meaning at arbitrary precision:
  ``np.spacing``, ``np.nextafter``, ``np.frexp``.

The ufuncs NumPy has no object loop for (``np.logaddexp``, ``np.copysign``,
``np.isfinite``/``np.isnan``, ``np.heaviside``, ``np.float_power``...) run on the
array subclass of :mod:`polygrad.backends._mp_ufuncs` (``mp_evaluator(...,
ufuncs=True)``), which the NumPy backend tries when plain object arrays fail.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..mpexec.context import CONVERTING as _CONVERTING
from ..mpexec.context import MP_UFUNC_METHODS, make_context, mp_array
from ..mpexec.context import shared_context as _shared_context
from ..mpexec.values import point_at
from ._mp_ufuncs import mp_array_type

__all__ = ["MP_UFUNC_METHODS", "make_context", "mp_array", "mp_evaluator", "MpmathBackend"]


def exact_zero(v: Any) -> bool:
    """Whether ``v`` is a machine float that is exactly 0: a constant of the code, exact in
    every precision (``0 * 0.25`` where a mask or ``np.zeros_like`` of an object array
    left the integer 0), not a value rounded to machine precision (converting an mpmath
    number raises while the user's code runs on them)."""
    return isinstance(v, (float, np.floating)) and not isinstance(v, np.longdouble) and v == 0


def _collect_mp_outputs(ctx: Any, out: Any) -> np.ndarray:
    """Flatten a function's output to an object array; raise if precision was lost."""
    from .._pytree import flatten

    leaves, _, _ = flatten(out)
    parts = []
    for leaf in leaves:
        arr = np.asarray(leaf, dtype=object) if not isinstance(leaf, np.ndarray) else leaf
        if arr.dtype != object:
            raise TypeError(
                f"the function returned a {arr.dtype} array on mpmath input: it converts to "
                "machine floats somewhere (astype, float(), a preallocated float array...)"
            )
        for v in arr.ravel():
            if not isinstance(v, ctx.mpf):
                # an exact integer is fine (a count, a constant 0); a machine float of any
                # width is not: NumPy's float32 scalars have is_integer() too, and a value
                # cast to float32 inside f would make a confident, wrong mp reference
                machine = isinstance(v, (float, complex, np.floating, np.complexfloating))
                if not machine and (isinstance(v, (int, np.integer)) or hasattr(v, "is_integer")):
                    continue
                if exact_zero(v):
                    continue
                why = (
                    "a complex value: a real function outside its domain there, e.g. "
                    "sqrt or log of a negative number"
                    if isinstance(v, ctx.mpc)
                    else "a conversion to machine precision"
                )
                raise TypeError(
                    f"the function produced a {type(v).__name__} value on mpmath input ({why})"
                )
        parts.append(np.asarray(arr).ravel())  # a plain object array, not a subclass
    return np.concatenate(parts) if parts else np.empty(0, dtype=object)


def mp_evaluator(
    call: Callable[[list[np.ndarray]], Any],
    shapes: list[tuple[int, ...]],
    ufuncs: bool = False,
) -> Callable[[np.ndarray, np.ndarray, int], np.ndarray]:
    """Wrap ``call(leaves)`` so that it evaluates on mpmath numbers.

    Parameters
    ----------
    call : callable
        Takes the checked input leaves (object arrays of mpmath numbers, in
        the given shapes) and returns the function's output.
    shapes : list of tuple
        Shapes of the checked leaves.
    ufuncs : bool
        Pass the leaves as :func:`~polygrad.backends._mp_ufuncs.mp_array_type`
        arrays, on which the ufuncs without an object loop (``np.logaddexp``...) run
        too (each operation then pays a Python-level dispatch).

    Returns
    -------
    callable
        ``(x0, dx, dps) -> y``: the function at ``x0 + dx`` (both float64
        arrays ``(n,)``; the sum is formed exactly at ``dps`` digits), ``y`` an
        object array ``(m,)`` of mpmath numbers.
    """

    def evaluate(x0: np.ndarray, dx: np.ndarray, dps: int) -> np.ndarray:
        ctx = _shared_context(int(dps))
        flat = point_at(ctx, x0, dx)
        leaves, off = [], 0
        for shape in shapes:
            size = int(np.prod(shape, dtype=np.int64))
            leaf = flat[off : off + size].reshape(shape)
            leaf = leaf.view(mp_array_type(ctx)) if ufuncs else leaf
            leaves.append(leaf if shape != () else leaf.reshape(()))
            off += size
        token = _CONVERTING.set(True)
        try:
            with np.errstate(all="ignore"):
                out = call(leaves)
        finally:
            _CONVERTING.reset(token)
        return _collect_mp_outputs(ctx, out)

    return evaluate


def mp_to_float(values: np.ndarray) -> np.ndarray:
    """Round an object array of mpmath numbers to float64."""
    return np.array([float(v) for v in values.ravel()], dtype=np.float64).reshape(values.shape)


class MpmathBackend:
    """Capability record of the mpmath evaluator (used by the NumPy backend).

    ``arbitrary_precision`` is its defining flag: functions written against
    NumPy run on it unchanged, which gives references far beyond float64.
    """

    name = "mpmath"
    supports_autodiff = False
    supports_float64 = True
    supports_vmap = False
    arbitrary_precision = True
