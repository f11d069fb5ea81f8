"""Scalar mpmath functions shared by the JAX and PyTorch interpreters.

Each function takes and returns ``mpf`` numbers of one context and follows the
IEEE conventions both frameworks share for poles and domains: a NaN argument
gives NaN, a value outside the real domain (``sqrt(-1)``, ``asin(2)``,
``log(-1)``) gives NaN, a pole gives a signed infinity (``log(0) = -inf``,
``atanh(1) = inf``, ``lgamma`` at the non-positive integers ``= inf``), and
``max``/``min`` propagate NaN. mpmath has no negative zero, so ``1 / 0`` is
``+inf`` and ``-1 / 0`` is ``-inf``.

The interpreters add the functions whose conventions differ between the
frameworks (``pow``, ``digamma`` at 0, ``fmod``/``rem`` at infinities,
rounding) in their own tables: :mod:`.jaxpr_rules` and :mod:`.torch_env`.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

__all__ = ["common_functions", "real"]


def real(ctx: Any, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` restricted to real numbers: NaN in, a complex result or a pole give NaN.

    Parameters
    ----------
    ctx : mpmath.MPContext
    fn : callable
        A scalar function of ``mpf`` arguments.

    Returns
    -------
    callable
        Same arguments; returns ``ctx.nan`` when an argument is NaN, when
        ``fn`` raises ``ZeroDivisionError``, ``ValueError`` or
        ``OverflowError``, or when its result is not a real ``mpf``.
    """
    nan, isnan, mpf = ctx.nan, ctx.isnan, ctx.mpf

    def g(*a: Any) -> Any:
        for x in a:  # a loop, not any(): this runs once per element
            if isnan(x):
                return nan
        try:
            r = fn(*a)
        except (ZeroDivisionError, ValueError, OverflowError):
            return nan
        return r if isinstance(r, mpf) else nan

    return g


def common_functions(ctx: Any) -> dict[str, Callable[..., Any]]:
    """The scalar functions whose conventions JAX and PyTorch share.

    Parameters
    ----------
    ctx : mpmath.MPContext
        The context (and precision) of the arithmetic.

    Returns
    -------
    dict of str to callable
        Unary: ``neg abs sign exp exp2 expm1 log log1p sqrt rsqrt sin cos tan
        asin acos atan sinh cosh tanh asinh acosh atanh sigmoid erf erfc
        erfinv lgamma``; binary: ``div max min atan2``. Every function is
        wrapped by :func:`real`.
    """
    c = ctx
    nan, inf = c.nan, c.inf
    one, zero = c.mpf(1), c.mpf(0)

    def sign(x: Any) -> Any:
        return one if x > 0 else (-one if x < 0 else zero)

    def div(a: Any, b: Any) -> Any:
        if b == 0:
            if a == 0:
                return nan
            return inf if a > 0 else -inf
        return a / b

    def log(x: Any) -> Any:
        return -inf if x == 0 else (nan if x < 0 else c.log(x))

    def lgamma(x: Any) -> Any:
        if c.isinf(x):
            return inf
        if x > 0:
            return c.loggamma(x)
        if c.isint(x):
            return inf
        return c.log(abs(c.gamma(x)))

    def erfinv(x: Any) -> Any:
        if abs(x) == 1:
            return sign(x) * inf
        return nan if abs(x) > 1 else c.erfinv(x)

    def vmax(a: Any, b: Any) -> Any:
        return a if a >= b else b

    def vmin(a: Any, b: Any) -> Any:
        return a if a <= b else b

    f: dict[str, Callable[..., Any]] = {
        "neg": operator.neg,
        "abs": abs,
        "sign": sign,
        "exp": c.exp,
        "exp2": lambda x: c.power(2, x),
        "expm1": c.expm1,
        "log": log,
        "log1p": lambda x: log(1 + x) if x <= -1 else c.log1p(x),
        "sqrt": lambda x: nan if x < 0 else c.sqrt(x),
        "rsqrt": lambda x: inf if x == 0 else (nan if x < 0 else 1 / c.sqrt(x)),
        "sin": c.sin,
        "cos": c.cos,
        "tan": c.tan,
        "asin": lambda x: nan if abs(x) > 1 else c.asin(x),
        "acos": lambda x: nan if abs(x) > 1 else c.acos(x),
        "atan": c.atan,
        "sinh": c.sinh,
        "cosh": c.cosh,
        "tanh": c.tanh,
        "asinh": c.asinh,
        "acosh": lambda x: nan if x < 1 else c.acosh(x),
        "atanh": lambda x: nan if abs(x) > 1 else (sign(x) * inf if abs(x) == 1 else c.atanh(x)),
        "sigmoid": lambda x: 1 / (1 + c.exp(-x)),
        "erf": c.erf,
        "erfc": c.erfc,
        "erfinv": erfinv,
        "lgamma": lgamma,
        "div": div,
        "max": vmax,
        "min": vmin,
        "atan2": c.atan2,
    }
    return {k: real(c, v) for k, v in f.items()}
