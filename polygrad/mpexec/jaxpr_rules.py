"""JAX's value representation and scalar conventions for the jaxpr interpreter.

Floating values are object arrays of ``mpf``; integer and boolean values stay
NumPy arrays of the jaxpr's dtype and are computed exactly. :func:`_coerce`
puts every result into the representation of its abstract value (a cast from
floating to integer truncates toward zero, as XLA's conversion).

The scalar functions follow XLA: the ones JAX shares with PyTorch come from
:func:`.elementwise.common_functions`; ``pow``, ``rem``, ``round``,
``integer_pow``, ``digamma``, ``polygamma``, the incomplete gamma and beta
functions, ``zeta`` and the Bessel functions are XLA's own here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .elementwise import common_functions, real
from .values import mp_array


def _numpy_dtype(dtype: Any) -> np.dtype | None:
    """``dtype`` as a NumPy dtype; None for JAX's extended dtypes (PRNG keys)."""
    try:
        return np.dtype(dtype)
    except TypeError:
        return None


def _is_float(dtype: Any) -> bool:
    dt = _numpy_dtype(dtype)
    return dt is not None and (
        dt.kind == "f" or dt.name in ("bfloat16", "float8_e4m3fn", "float8_e5m2")
    )


def _is_key(dtype: Any) -> bool:
    """A PRNG key dtype: its values stay JAX arrays, which only JAX's own random
    primitives read (exact integer work)."""
    return dtype is not None and _numpy_dtype(dtype) is None


def _aval_dtype(aval: Any) -> Any:
    return getattr(aval, "dtype", None)


def _trunc_int(ctx: Any, v: Any) -> int:
    if ctx.isnan(v) or ctx.isinf(v):
        return 0
    return int(v)  # mpf -> int truncates toward zero, as XLA's float->int conversion


def _coerce(ctx: Any, val: Any, aval: Any) -> Any:
    """Put a rule's result into the representation of ``aval``'s dtype and shape."""
    dtype = _aval_dtype(aval)
    if dtype is None or _is_key(dtype):  # a token, a PRNG key: as JAX made it
        return val
    shape = tuple(aval.shape)
    if _is_float(dtype):
        arr = np.asarray(val, dtype=object) if not isinstance(val, np.ndarray) else val
        if arr.dtype != object:
            arr = mp_array(ctx, arr)
        if arr.shape != shape:
            arr = np.broadcast_to(arr, shape).copy()
        return arr
    arr = np.asarray(val)
    if arr.dtype == object:
        if np.dtype(dtype).kind == "b":
            arr = np.array([bool(v) for v in arr.flat], dtype=bool).reshape(arr.shape)
        else:
            arr = np.array(
                [_trunc_int(ctx, v) if isinstance(v, ctx.mpf) else int(v) for v in arr.flat],
                dtype=np.int64,
            ).reshape(arr.shape)
    arr = arr.astype(np.dtype(dtype), copy=False)
    if arr.shape != shape:
        arr = np.broadcast_to(arr, shape).copy()
    return arr


def _literal(ctx: Any, lit: Any) -> Any:
    return _coerce(ctx, np.asarray(lit.val), lit.aval)


# --------------------------------------------------------------------------------------
# scalar functions with XLA's conventions
# --------------------------------------------------------------------------------------
def _rem(ctx: Any, x: Any, y: Any) -> Any:
    if y == 0 or ctx.isinf(x) or ctx.isnan(x) or ctx.isnan(y):
        return ctx.nan
    if ctx.isinf(y):
        return x
    q = x / y
    return x - y * (ctx.floor(q) if q >= 0 else ctx.ceil(q))


def _pow(ctx: Any, x: Any, y: Any) -> Any:
    if x == 0:
        if y == 0:
            return ctx.mpf(1)
        return ctx.mpf(0) if y > 0 else ctx.inf
    if x < 0 and y != int(y):
        return ctx.nan
    r = ctx.power(x, y)
    return r if isinstance(r, ctx.mpf) else ctx.nan


def _integer_pow(ctx: Any, x: Any, n: int) -> Any:
    if n >= 0:
        return x**n
    if x == 0:
        return ctx.inf if n % 2 == 0 else ctx.inf * (1 if x >= 0 else -1)
    return 1 / x**-n


def _round(ctx: Any, x: Any, method: int) -> Any:
    if ctx.isnan(x) or ctx.isinf(x):
        return x
    if int(method) == 1:  # TO_NEAREST_EVEN
        return ctx.nint(x)
    f = ctx.floor(abs(x) + ctx.mpf(0.5))  # AWAY_FROM_ZERO
    return f if x >= 0 else -f


def _digamma(ctx: Any, x: Any) -> Any:
    if x <= 0 and x == ctx.floor(x):
        return ctx.nan
    return ctx.digamma(x)


def _polygamma(ctx: Any, m: Any, x: Any) -> Any:
    if m != ctx.floor(m) or m < 0:
        return ctx.nan
    if x <= 0 and x == ctx.floor(x):
        return ctx.nan
    return ctx.polygamma(int(m), x)


def _igamma(ctx: Any, a: Any, x: Any) -> Any:
    if a <= 0 or x < 0:
        return ctx.nan
    return ctx.gammainc(a, 0, x, regularized=True)


def _igammac(ctx: Any, a: Any, x: Any) -> Any:
    if a <= 0 or x < 0:
        return ctx.nan
    return ctx.gammainc(a, x, ctx.inf, regularized=True)


def _betainc(ctx: Any, a: Any, b: Any, x: Any) -> Any:
    if a <= 0 or b <= 0 or x < 0 or x > 1:
        return ctx.nan
    return ctx.betainc(a, b, 0, x, regularized=True)


def _float_unary(ctx: Any) -> dict[str, Callable[..., Any]]:
    c = ctx
    common = common_functions(c)
    shared = (
        "neg abs sign exp exp2 log log1p expm1 sqrt rsqrt sin cos tan asin acos atan sinh cosh "
        "tanh asinh acosh atanh erf erfc lgamma"
    ).split()
    return {
        **{k: common[k] for k in shared},
        "logistic": common["sigmoid"],
        "erf_inv": common["erfinv"],
        "floor": lambda x: c.floor(x) if c.isfinite(x) else x,
        "ceil": lambda x: c.ceil(x) if c.isfinite(x) else x,
        "cbrt": lambda x: c.cbrt(x) if x >= 0 else -c.cbrt(-x),
        "square": lambda x: x * x,
        "digamma": real(c, lambda x: _digamma(c, x)),
        "bessel_i0e": lambda x: c.besseli(0, x) * c.exp(-abs(x)),
        "bessel_i1e": lambda x: c.besseli(1, x) * c.exp(-abs(x)),
        "is_finite": lambda x: bool(c.isfinite(x)),
        "copy": lambda x: x,
        "copy_p": lambda x: x,
    }


def _float_binary(ctx: Any) -> dict[str, Callable[..., Any]]:
    c = ctx
    common = common_functions(c)
    return {
        "add": lambda x, y: x + y,
        "add_any": lambda x, y: x + y,  # the sum of cotangents in a VJP program
        "sub": lambda x, y: x - y,
        "mul": lambda x, y: x * y,
        "div": common["div"],
        "rem": lambda x, y: _rem(c, x, y),
        "pow": lambda x, y: _pow(c, x, y),
        "max": common["max"],
        "min": common["min"],
        "atan2": common["atan2"],
        "eq": lambda x, y: bool(x == y),
        "ne": lambda x, y: bool(x != y),
        "lt": lambda x, y: bool(x < y),
        "le": lambda x, y: bool(x <= y),
        "gt": lambda x, y: bool(x > y),
        "ge": lambda x, y: bool(x >= y),
        "igamma": real(c, lambda a, x: _igamma(c, a, x)),
        "igammac": real(c, lambda a, x: _igammac(c, a, x)),
        "polygamma": real(c, lambda m, x: _polygamma(c, m, x)),
        "zeta": real(c, lambda s, q: c.zeta(s, q)),
    }


_FLOAT_TERNARY = {"regularized_incomplete_beta": _betainc}

# integer/bool versions of the same names, exact in NumPy (XLA semantics)
_INT_OPS: dict[str, Callable[..., Any]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": lambda x, y: np.sign(x) * np.sign(y) * (np.abs(x) // np.where(y == 0, 1, np.abs(y))),
    "rem": lambda x, y: np.fmod(x, np.where(y == 0, 1, y)),
    "max": np.maximum,
    "min": np.minimum,
    "neg": np.negative,
    "abs": np.abs,
    "sign": np.sign,
    "square": np.square,
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "and": np.bitwise_and,
    "or": np.bitwise_or,
    "xor": np.bitwise_xor,
    "not": np.invert,
}
