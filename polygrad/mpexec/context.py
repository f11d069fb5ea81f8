"""The mpmath context the mp interpreters and evaluators compute in.

A private ``mpmath.MPContext`` per precision whose numbers answer NumPy's ufuncs
(``np.exp`` of an object array of them calls ``ctx.exp``), and refuse conversion to a
machine float while the user's code runs on them. Below the backends and the
interpreters of captured programs (:mod:`polygrad.mpexec`), which both compute in it;
:mod:`polygrad.backends.mpmath` re-exports it.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from ..reference.operand_moves import OPERAND_MOVES

__all__ = ["MP_UFUNC_METHODS", "CONVERTING", "make_context", "mp_array", "shared_context"]


# ufunc name -> mpmath function name (unary unless listed in _BINARY)
MP_UFUNC_METHODS: dict[str, str] = {
    "exp": "exp",
    "exp2": "_exp2",
    "expm1": "expm1",
    "log": "log",
    "log2": "_log2",
    "log10": "log10",
    "log1p": "log1p",
    "sqrt": "sqrt",
    "cbrt": "cbrt",
    "sin": "sin",
    "cos": "cos",
    "tan": "tan",
    "arcsin": "asin",
    "arccos": "acos",
    "arctan": "atan",
    "sinh": "sinh",
    "cosh": "cosh",
    "tanh": "tanh",
    "arcsinh": "asinh",
    "arccosh": "acosh",
    "arctanh": "atanh",
    "rint": "nint",
    "fabs": "fabs",
    "deg2rad": "radians",
    "rad2deg": "degrees",
    "radians": "radians",
    "degrees": "degrees",
    "arctan2": "atan2",
    "hypot": "hypot",
    "fmod": "fmod",
    "conjugate": "conj",
}
_BINARY = {"arctan2", "hypot", "fmod"}


def make_context(dps: int) -> Any:
    """A private ``mpmath.MPContext`` at ``dps`` digits whose numbers answer NumPy's ufuncs."""
    import mpmath

    ctx = mpmath.MPContext()
    ctx.dps = dps

    def _exp2(x: Any) -> Any:
        return ctx.power(2, x)

    def _log2(x: Any) -> Any:
        return ctx.log(x, 2)

    def _fmod(x: Any, y: Any) -> Any:
        return x - y * ctx.floor(x / y) if x * y >= 0 else x - y * ctx.ceil(x / y)

    extra: dict[str, Callable[..., Any]] = {"_exp2": _exp2, "_log2": _log2, "fmod": _fmod}
    for ufunc_name, fname in MP_UFUNC_METHODS.items():
        impl = extra.get(fname) or getattr(ctx, fname)
        if ufunc_name in _BINARY:
            setattr(ctx.mpf, ufunc_name, (lambda g: lambda self, other: g(self, other))(impl))
        else:
            setattr(ctx.mpf, ufunc_name, (lambda g: lambda self: g(self))(impl))
    ctx.mpf.__trunc__ = lambda self: int(self)
    # NumPy's object loops of floor and ceil call math.floor and math.ceil, which use
    # these or else round the number to a machine float first
    ctx.mpf.__floor__ = lambda self: ctx.floor(self)
    ctx.mpf.__ceil__ = lambda self: ctx.ceil(self)
    _refuse_machine_floats(ctx.mpf)
    _move_operands_when_asked(ctx)
    return ctx


CONVERTING: contextvars.ContextVar[bool] = contextvars.ContextVar("mp_user_code", default=False)
"""True while the user's code runs on mpmath numbers (:func:`mp_evaluator`)."""


def _refuse_machine_floats(mpf: type) -> None:
    """Make ``float(v)`` (and ``complex(v)``) of ``mpf`` numbers raise while the user's code
    runs on them: ``math.exp(x[0])``, ``np.float64(x[i])`` or a write into a float array
    (``r = np.zeros(n); r[i] = ...``) would round a term to float64, its variation along
    an mp step (far below float64's resolution) would vanish, and the mp reference would
    lose the term's derivative without a trace. Raising makes the check fall back to a
    float64 reference and say why."""
    to_float, to_complex = mpf.__float__, mpf.__complex__  # type: ignore[attr-defined]

    def refuse(kind: str) -> TypeError:
        return TypeError(
            f"the function converts an mpmath number to a machine {kind} (float(), math.*, "
            "np.float64(), .astype(), a write into a float array such as np.zeros(n)): a "
            "conversion to machine precision"
        )

    def as_float(self: Any) -> float:
        if CONVERTING.get():
            raise refuse("float")
        return float(to_float(self))

    def as_complex(self: Any) -> complex:
        if CONVERTING.get():
            raise refuse("complex")
        return complex(to_complex(self))

    mpf.__float__ = as_float  # type: ignore[attr-defined]
    mpf.__complex__ = as_complex  # type: ignore[attr-defined]


def _move_operands_when_asked(ctx: Any) -> None:
    """Make the additions and subtractions of ``ctx.mpf`` numbers move both operands by a
    random relative ``u 2^(k - prec)`` while :data:`~polygrad.reference.operand_moves.
    OPERAND_MOVES` is set (measuring ``f``'s round-off where it cancels; see
    :mod:`polygrad.reference.operand_moves`); exact to the precision otherwise."""
    mpf = ctx.mpf
    add, mul = mpf.__add__, mpf.__mul__  # the exact operations, before wrapping

    def moved(v: Any, moves: tuple[Any, int]) -> Any:
        rng, bits = moves
        return add(v, mul(v, ctx.ldexp(ctx.mpf(rng.uniform(-1.0, 1.0)), bits - ctx.prec)))

    def wrap(op: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        def operation(self: Any, other: Any) -> Any:
            moves = OPERAND_MOVES.get()
            if moves is None or not isinstance(other, (mpf, int, float)):
                return op(self, other)
            return op(moved(self, moves), moved(ctx.mpf(other), moves))

        return operation

    for name in ("__add__", "__radd__", "__sub__", "__rsub__"):
        setattr(mpf, name, wrap(getattr(mpf, name)))


@functools.lru_cache(maxsize=8)
def shared_context(dps: int) -> Any:
    """The context at ``dps`` digits that every evaluator shares (building one costs ~10 ms;
    nothing changes a context's precision after it is made)."""
    return make_context(dps)


def mp_array(ctx: Any, values: np.ndarray) -> np.ndarray:
    """Object array of ``ctx.mpf`` holding ``values`` exactly (floats convert exactly)."""
    flat = [ctx.mpf(float(v)) if not isinstance(v, ctx.mpf) else v for v in values.ravel()]
    out = np.empty(len(flat), dtype=object)
    out[:] = flat
    return out.reshape(values.shape)
