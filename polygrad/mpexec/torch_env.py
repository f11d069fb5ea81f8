"""Values, the rule registry and PyTorch's scalar conventions for the graph interpreter.

Floating tensors are NumPy object arrays of ``mpf`` (a private context at
``dps`` digits); integer and bool tensors are ``int64``/``bool`` arrays.
A rule is a function ``rule(E, args)`` of the environment :class:`_Env` and
the overload's arguments by name (schema defaults filled in); the rule
modules register theirs in :data:`RULES` under the overload's name
(``"aten.add.Tensor"``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from .context import make_context
from .elementwise import common_functions, real
from .errors import UnsupportedOperatorError
from .values import mp_array, mpf_of

Rule = Callable[["_Env", dict[str, Any]], Any]
RULES: dict[str, Rule] = {}


def _rule(*names: str) -> Callable[[Rule], Rule]:
    def deco(fn: Rule) -> Rule:
        for name in names:
            RULES[name] = fn
        return fn

    return deco


# ------------------------------------------------------------------ the environment


class _Env:
    """A private mpmath context and the conversions between value kinds.

    Floating tensors are object arrays of ``ctx.mpf``; integer and bool
    tensors are ``int64``/``bool`` arrays. ``val`` is the tensor (or tuple)
    PyTorch produced for the node being evaluated, while tracing.
    """

    def __init__(self, dps: int):
        self.ctx = make_context(dps)
        self.mpf = self.ctx.mpf
        self.zero = self.ctx.mpf(0)
        self.one = self.ctx.mpf(1)
        self.inf = self.ctx.inf
        self.nan = self.ctx.nan
        self.val: Any = None
        self.fns = _scalar_functions(self)

    # conversions
    def scalar(self, v: Any) -> Any:
        """A Python or NumPy scalar (or an mpf) as an mpf; exact for binary floats."""
        return mpf_of(self.ctx, v)

    def F(self, v: Any) -> np.ndarray:
        """``v`` as an object array of mpf (a floating tensor)."""
        if isinstance(v, np.ndarray):
            return v if v.dtype == object else mp_array(self.ctx, v)
        return self._obj(self.scalar(v))

    @staticmethod
    def _obj(v: Any) -> np.ndarray:
        if isinstance(v, np.ndarray) and v.dtype == object:
            return v
        out = np.empty(np.shape(v), dtype=object)
        out[...] = v
        return out

    def O(self, v: Any) -> np.ndarray:  # noqa: E743 - short name for "object array"
        """Wrap a ufunc result (an array or a bare scalar) as an object array."""
        if isinstance(v, np.ndarray):
            return v if v.dtype == object else self.F(v)
        return self._obj(self.scalar(v))

    @staticmethod
    def uf(fn: Callable[..., Any], nin: int = 1) -> Any:
        """``np.frompyfunc`` of ``fn`` (not cached: rules build closures per call)."""
        return np.frompyfunc(fn, nin, 1)

    def map(self, fn: Callable[..., Any], *args: Any) -> np.ndarray:
        """Apply a scalar mp function elementwise (with broadcasting) → object array."""
        return self.O(self.uf(fn, len(args))(*[self.F(a) for a in args]))

    def filled(self, value: Any) -> np.ndarray:
        """A tensor shaped and typed like the traced output, filled with ``value``."""
        return self.coerce(np.full(tuple(self.val.shape), self.scalar(value), dtype=object))

    def coerce(self, v: Any, dtype: Any = None) -> np.ndarray:
        """``v`` converted to the kind of ``dtype`` (default: the traced output's dtype)."""
        dtype = self.val.dtype if dtype is None else dtype
        if not isinstance(v, np.ndarray):
            v = self.F(v) if isinstance(v, (float, self.mpf)) else np.asarray(v)
        if dtype.is_floating_point:
            return self.F(v)
        if dtype.is_complex:
            raise UnsupportedOperatorError("complex tensors are not covered by the mp interpreter")
        if v.dtype == object:
            # (a ufunc of a 0-d array returns a scalar: np.asarray keeps it an array)
            if str(dtype) == "torch.bool":
                return np.asarray(self.uf(lambda a: bool(a != 0))(v)).astype(bool)
            return np.asarray(self.uf(_trunc_int)(v)).astype(np.int64)
        if str(dtype) == "torch.bool":
            return v.astype(bool)
        return v.astype(np.int64)

    def is_float(self, v: Any) -> bool:
        return (isinstance(v, np.ndarray) and v.dtype == object) or isinstance(v, (float, self.mpf))


def _trunc_int(v: Any) -> int:
    return int(v)


def _arr(v: Any) -> np.ndarray:
    return v if isinstance(v, np.ndarray) else np.asarray(v)


def _dims(dim: Any, ndim: int) -> tuple[int, ...]:
    """Normalise a dim / list of dims (None or [] = all) to non-negative axes."""
    if dim is None:
        return tuple(range(ndim))
    if isinstance(dim, (int, np.integer)):
        dim = [dim]
    dim = list(dim)
    if not dim:
        return tuple(range(ndim))
    return tuple(int(d) % max(ndim, 1) for d in dim)


def _ax(dim: int, ndim: int) -> int:
    return int(dim) % max(ndim, 1)


def _tup(v: Any, n: int) -> tuple[int, ...]:
    if isinstance(v, (int, np.integer)):
        return (int(v),) * n
    v = list(v)
    return tuple(int(a) for a in v) * (n if len(v) == 1 else 1)


# ------------------------------------------------------------------ scalar functions


# ------------------------------------------------------------------ scalar functions


def _scalar_functions(E: _Env) -> dict[str, Callable[..., Any]]:
    """Scalar mp functions with PyTorch's conventions for poles and domains."""
    c = E.ctx
    nan, inf = E.nan, E.inf
    common = common_functions(c)
    log, sign, div = common["log"], common["sign"], common["div"]
    vmax, vmin, sigmoid = common["max"], common["min"], common["sigmoid"]

    def digamma(x: Any) -> Any:
        if x == 0:
            return -inf
        if x < 0 and c.isint(x):
            return nan
        return c.digamma(x)

    def power(a: Any, b: Any) -> Any:
        if a == 0 and b < 0:
            return inf
        if isinstance(b, int) or c.isint(b):
            return a ** int(b)
        if a < 0:
            return nan
        return c.power(a, b)

    def fmod(a: Any, b: Any) -> Any:
        if b == 0:
            return nan
        q = a / b
        return a - b * (c.floor(q) if q >= 0 else c.ceil(q))

    def remainder(a: Any, b: Any) -> Any:
        if b == 0:
            return nan
        return a - b * c.floor(a / b)

    def xlogy(a: Any, b: Any) -> Any:
        return E.zero if a == 0 else a * log(b)

    f = {
        "log2": lambda x: log(x) / c.ln2 if x != 0 else -inf,
        "log10": lambda x: log(x) / c.ln10 if x != 0 else -inf,
        "digamma": digamma,
        "reciprocal": lambda x: div(E.one, x),
        "sgn": sign,
        "floor": c.floor,
        "ceil": c.ceil,
        "round": c.nint,
        "trunc": lambda x: c.mpf(int(x)) if c.isfinite(x) else x,
        "frac": lambda x: x - int(x),
        "relu": lambda x: x if x > 0 else E.zero,
        "silu": lambda x: x * sigmoid(x),
        "pow": power,
        "hypot": c.hypot,
        "fmod": fmod,
        "remainder": remainder,
        "xlogy": xlogy,
    }
    # fmax/fmin ignore a NaN argument (IEEE maxNum), so they bypass real()'s NaN-in rule
    nan_ignoring = {
        "fmax": lambda a, b: b if c.isnan(a) else (a if c.isnan(b) else vmax(a, b)),
        "fmin": lambda a, b: b if c.isnan(a) else (a if c.isnan(b) else vmin(a, b)),
    }
    return {**common, **{k: real(c, v) for k, v in f.items()}, **nan_ignoring}


@functools.lru_cache(maxsize=8)
def _env(dps: int) -> _Env:
    return _Env(dps)


_SHAPE_OPS = {"squeeze", "unsqueeze", "t", "transpose", "swapdims", "swapaxes"}
_WRITES_ITSELF = {
    "aten.copy_.default",
    "aten.fill_.Scalar",
    "aten.fill_.Tensor",
    "aten.zero_.default",
}


def _base_rule(name: str) -> tuple[Rule | None, bool]:
    """The rule for ``name``, and whether the result must be written into ``self``."""
    if name in RULES:
        return RULES[name], False
    ns, op, ov = name.split(".") if name.count(".") == 2 else (name, "", "")
    if op.endswith("_") and not op.startswith("_"):
        base = RULES.get(f"{ns}.{op[:-1]}.{ov}")
        if base is not None:
            # an in-place view operator changes the tensor's shape, not its values: its
            # result replaces the tensor (later nodes use this node's output)
            return base, op[:-1] not in _SHAPE_OPS
    return None, False
