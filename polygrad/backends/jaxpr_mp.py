"""Re-execute a JAX function's jaxpr on mpmath numbers, primitive by primitive.

A function is traced once (``jax.make_jaxpr``, in float64) and its jaxpr is
then interpreted on NumPy object arrays of ``mpf`` numbers of a private
``mpmath`` context (:func:`polygrad.backends.mpmath.make_context`), so the
very code the user wrote is evaluated at ``dps`` decimal digits. That gives a
reference derivative good to far beyond float64 for framework code.

Values
------
Floating values are object arrays of ``mpf``; integer and boolean values stay
NumPy integer/boolean arrays of the jaxpr's dtype and are computed exactly.
Constants the function captures (float32 or float64 weights) enter exactly:
every binary float converts to ``mpf`` without rounding.

Rounding to a narrower float
----------------------------
The mp reference computes the *mathematical function the code expresses*.
``convert_element_type`` between floating dtypes and ``reduce_precision`` are
therefore the identity here: a cast to float32 is not applied. (Applying it
would make the mp function piecewise constant at the float32 grid, with a
derivative of zero almost everywhere.) Casts to and from integers and
booleans are applied exactly as XLA does (float to integer truncates toward
zero).

Covered primitives
------------------
* elementwise arithmetic: ``add sub mul div rem neg max min pow integer_pow
  square sqrt rsqrt cbrt abs sign floor ceil round``, comparisons ``eq ne lt
  le gt ge``, ``is_finite``, ``select_n``, ``clamp``, ``copy``, ``copy_p``;
* transcendental: ``exp exp2 log log1p expm1 logistic sin cos tan asin acos
  atan atan2 sinh cosh tanh asinh acosh atanh``;
* special functions: ``erf erfc erf_inv lgamma digamma polygamma igamma
  igammac zeta bessel_i0e bessel_i1e regularized_incomplete_beta``;
* casts: ``convert_element_type reduce_precision stop_gradient
  optimization_barrier``;
* data movement: ``broadcast_in_dim reshape squeeze expand_dims transpose rev
  concatenate pad slice dynamic_slice dynamic_update_slice gather scatter
  scatter-add scatter-sub scatter-mul scatter-min scatter-max split iota
  sort``; the simple ones run in NumPy on the object arrays, and the index
  maps of the others (gather, scatter, pad, dynamic slices, split...) are
  computed by running the primitive itself in JAX on an array of element
  positions (exact: no float value passes through JAX; cached per equation
  and index values), so every form of their parameters is covered;
* linear algebra and reductions: ``dot_general`` (any dimension numbers),
  ``reduce_sum reduce_max reduce_min reduce_prod reduce_and reduce_or
  argmax argmin cumsum cumprod cummax cummin cumlogsumexp``;
* convolution and pooling: ``conv_general_dilated`` (strides, padding,
  dilations, ``feature_group_count``; not ``batch_group_count > 1``),
  ``reduce_window_sum reduce_window_max reduce_window_min``;
* structure: ``jit``/``pjit``, ``closed_call``, ``core_call``, ``remat``,
  ``custom_jvp_call``, ``custom_vjp_call`` (their primal computation),
  ``cond``, ``while``, ``scan``;
* any equation whose inputs and outputs are all integers or booleans (index
  arithmetic, random-bit generation) runs in JAX itself: it is exact.

Control flow follows the mp values: a ``cond`` branch or a ``while`` test is
decided on the high-precision numbers (a loop that has not stopped after
100 000 trips raises, and the check falls back to float64 differences).

Not covered (the check then uses a float64 reference and names the primitive):
complex numbers, ``nextafter``, ``reduce_window`` with a custom reducer,
``select_and_scatter_add`` and other primitives that only appear in
derivatives, ``top_k``, linear-algebra decompositions (``cholesky``,
``eigh``, ``lu``, ``triangular_solve``...), FFTs, ``random_gamma_grad``,
``igamma_grad_a``, host callbacks and foreign-function calls.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import PolygradError

__all__ = [
    "UnsupportedPrimitiveError",
    "evaluate_jaxpr_mp",
    "unsupported_primitives",
    "supported_primitives",
]


class UnsupportedPrimitiveError(PolygradError, NotImplementedError):
    """A jaxpr contains a primitive the mpmath interpreter does not implement.

    Attributes
    ----------
    primitive : str
        The primitive's name.
    where : str or None
        The user's source line that produced it, when JAX recorded one.
    """

    def __init__(self, primitive: str, where: str | None = None, why: str = "") -> None:
        self.primitive, self.where = primitive, where
        text = f"the JAX primitive {primitive!r}"
        if where:
            text += f" (from {where})"
        text += " cannot be evaluated on mpmath numbers"
        if why:
            text += f": {why}"
        super().__init__(text)


# --------------------------------------------------------------------------------------
# value helpers
# --------------------------------------------------------------------------------------
def _is_float(dtype: Any) -> bool:
    dt = np.dtype(dtype)
    return dt.kind == "f" or dt.name in ("bfloat16", "float8_e4m3fn", "float8_e5m2")


def _aval_dtype(aval: Any) -> Any:
    return getattr(aval, "dtype", None)


def _to_mp(ctx: Any, a: Any) -> np.ndarray:
    """Object array of ``ctx.mpf`` holding ``a`` exactly (floats, ints, bools, mpf)."""
    arr = np.asarray(a)
    if arr.dtype == object:
        out = np.empty(arr.shape, dtype=object)
        out.flat[:] = [v if isinstance(v, ctx.mpf) else _scalar_mp(ctx, v) for v in arr.flat]
        return out
    out = np.empty(arr.shape, dtype=object)
    out.flat[:] = [_scalar_mp(ctx, v) for v in arr.flat]
    return out


def _scalar_mp(ctx: Any, v: Any) -> Any:
    if isinstance(v, (bool, np.bool_)):
        return ctx.mpf(int(v))
    if isinstance(v, (int, np.integer)):
        return ctx.mpf(int(v))
    return ctx.mpf(float(v))  # binary floats (float16/32/64, bfloat16) convert exactly


def _trunc_int(ctx: Any, v: Any) -> int:
    if ctx.isnan(v) or ctx.isinf(v):
        return 0
    return int(v)  # mpf -> int truncates toward zero, as XLA's float->int conversion


def _coerce(ctx: Any, val: Any, aval: Any) -> Any:
    """Put a rule's result into the representation of ``aval``'s dtype and shape."""
    dtype = _aval_dtype(aval)
    if dtype is None:  # a token or other abstract value
        return val
    shape = tuple(aval.shape)
    if _is_float(dtype):
        arr = np.asarray(val, dtype=object) if not isinstance(val, np.ndarray) else val
        if arr.dtype != object:
            arr = _to_mp(ctx, arr)
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
# elementwise rules
# --------------------------------------------------------------------------------------
def _real(ctx: Any, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` on real mpf arguments; a complex result or a pole gives NaN, as in IEEE."""

    def g(*a: Any) -> Any:
        try:
            if any(ctx.isnan(x) for x in a):
                return ctx.nan
            r = fn(*a)
        except (ZeroDivisionError, ValueError):
            return ctx.nan
        return r if isinstance(r, ctx.mpf) else ctx.nan

    return g


def _div(ctx: Any, x: Any, y: Any) -> Any:
    if y == 0:
        if x == 0 or ctx.isnan(x):
            return ctx.nan
        return ctx.inf * ctx.sign(x) * (-1 if str(y).startswith("-") else 1)
    return x / y


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


def _lgamma(ctx: Any, x: Any) -> Any:
    if x <= 0 and x == ctx.floor(x):
        return ctx.inf
    return ctx.log(abs(ctx.gamma(x)))


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


def _maxmin(ctx: Any, pick_max: bool) -> Callable[[Any, Any], Any]:
    def g(x: Any, y: Any) -> Any:
        if ctx.isnan(x) or ctx.isnan(y):
            return ctx.nan
        return (x if x >= y else y) if pick_max else (x if x <= y else y)

    return g


def _sign(ctx: Any, x: Any) -> Any:
    return x if ctx.isnan(x) else ctx.mpf(ctx.sign(x))


def _float_unary(ctx: Any) -> dict[str, Callable[..., Any]]:
    c = ctx
    return {
        "neg": lambda x: -x,
        "abs": lambda x: abs(x),
        "sign": lambda x: _sign(c, x),
        "floor": lambda x: c.floor(x) if c.isfinite(x) else x,
        "ceil": lambda x: c.ceil(x) if c.isfinite(x) else x,
        "exp": c.exp,
        "exp2": lambda x: c.power(2, x),
        "log": _real(c, lambda x: c.log(x) if x != 0 else -c.inf),
        "log1p": _real(c, lambda x: c.log1p(x) if x != -1 else -c.inf),
        "expm1": c.expm1,
        "logistic": lambda x: 1 / (1 + c.exp(-x)),
        "sqrt": _real(c, c.sqrt),
        "rsqrt": _real(c, lambda x: 1 / c.sqrt(x) if x != 0 else c.inf),
        "cbrt": lambda x: c.cbrt(x) if x >= 0 else -c.cbrt(-x),
        "square": lambda x: x * x,
        "sin": c.sin,
        "cos": c.cos,
        "tan": c.tan,
        "asin": _real(c, c.asin),
        "acos": _real(c, c.acos),
        "atan": c.atan,
        "sinh": c.sinh,
        "cosh": c.cosh,
        "tanh": c.tanh,
        "asinh": c.asinh,
        "acosh": _real(c, c.acosh),
        "atanh": _real(c, lambda x: c.atanh(x) if abs(x) != 1 else c.sign(x) * c.inf),
        "erf": c.erf,
        "erfc": c.erfc,
        "erf_inv": _real(
            c, lambda x: c.erfinv(x) if abs(x) != 1 else c.sign(x) * c.inf if abs(x) == 1 else 0
        ),
        "lgamma": _real(c, lambda x: _lgamma(c, x)),
        "digamma": _real(c, lambda x: _digamma(c, x)),
        "bessel_i0e": lambda x: c.besseli(0, x) * c.exp(-abs(x)),
        "bessel_i1e": lambda x: c.besseli(1, x) * c.exp(-abs(x)),
        "is_finite": lambda x: bool(c.isfinite(x)),
        "copy": lambda x: x,
        "copy_p": lambda x: x,
    }


def _float_binary(ctx: Any) -> dict[str, Callable[..., Any]]:
    c = ctx
    return {
        "add": lambda x, y: x + y,
        "sub": lambda x, y: x - y,
        "mul": lambda x, y: x * y,
        "div": lambda x, y: _div(c, x, y),
        "rem": lambda x, y: _rem(c, x, y),
        "pow": lambda x, y: _pow(c, x, y),
        "max": _maxmin(c, True),
        "min": _maxmin(c, False),
        "atan2": lambda y, x: c.atan2(y, x),
        "eq": lambda x, y: bool(x == y),
        "ne": lambda x, y: bool(x != y),
        "lt": lambda x, y: bool(x < y),
        "le": lambda x, y: bool(x <= y),
        "gt": lambda x, y: bool(x > y),
        "ge": lambda x, y: bool(x >= y),
        "igamma": _real(c, lambda a, x: _igamma(c, a, x)),
        "igammac": _real(c, lambda a, x: _igammac(c, a, x)),
        "polygamma": _real(c, lambda m, x: _polygamma(c, m, x)),
        "zeta": _real(c, lambda s, q: c.zeta(s, q)),
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


# --------------------------------------------------------------------------------------
# the interpreter
# --------------------------------------------------------------------------------------
_CALLS = ("jit", "pjit", "closed_call", "core_call", "remat", "checkpoint", "remat2")
_CUSTOM = ("custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr", "custom_lin")
_IDENTITY = ("stop_gradient", "reduce_precision", "optimization_barrier", "copy", "copy_p")
_MOVES = (
    "broadcast_in_dim",
    "reshape",
    "squeeze",
    "expand_dims",
    "transpose",
    "rev",
    "concatenate",
    "pad",
    "slice",
    "dynamic_slice",
    "dynamic_update_slice",
    "gather",
    "scatter",
    "split",
    "tile",
)
_SCATTER_COMBINE = (
    "scatter-add",
    "scatter_add",
    "scatter-sub",
    "scatter_sub",
    "scatter-mul",
    "scatter_mul",
    "scatter-min",
    "scatter_min",
    "scatter-max",
    "scatter_max",
)
_REDUCE = ("reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "reduce_and", "reduce_or")
_CUMULATIVE = ("cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp")
_WINDOW = ("reduce_window_sum", "reduce_window_max", "reduce_window_min")
_OTHER = (
    "convert_element_type",
    "select_n",
    "clamp",
    "integer_pow",
    "round",
    "iota",
    "dot_general",
    "argmax",
    "argmin",
    "sort",
    "conv_general_dilated",
    "cond",
    "while",
    "scan",
)


def supported_primitives() -> frozenset[str]:
    """Names of the primitives with a rule (integer-only equations are covered besides)."""
    import mpmath

    ctx = mpmath.MPContext()
    names = set(_float_unary(ctx)) | set(_float_binary(ctx)) | set(_FLOAT_TERNARY)
    names |= set(_INT_OPS) | set(_CALLS) | set(_CUSTOM) | set(_IDENTITY) | set(_MOVES)
    names |= set(_SCATTER_COMBINE) | set(_REDUCE) | set(_CUMULATIVE) | set(_WINDOW)
    names |= set(_OTHER)
    return frozenset(names)


def _where(eqn: Any) -> str | None:
    try:
        from jax._src import source_info_util

        text = source_info_util.summarize(eqn.source_info)
    except Exception:  # noqa: BLE001 - source info is a courtesy
        return None
    return text if text and "unknown" not in text else None


def _sub_jaxprs(eqn: Any) -> list[Any]:
    from jax.extend.core import ClosedJaxpr, Jaxpr

    out = []
    for v in eqn.params.values():
        for e in v if isinstance(v, (tuple, list)) else (v,):
            if isinstance(e, (ClosedJaxpr, Jaxpr)):
                out.append(e)
    return out


def unsupported_primitives(closed: Any) -> list[UnsupportedPrimitiveError]:
    """The equations of ``closed`` (recursively) that :func:`evaluate_jaxpr_mp` cannot run.

    Parameters
    ----------
    closed : jax.extend.core.ClosedJaxpr or Jaxpr

    Returns
    -------
    list of UnsupportedPrimitiveError
        One per distinct primitive name, in order of first appearance; empty
        when the whole function is covered.
    """
    known = supported_primitives()
    found: dict[str, UnsupportedPrimitiveError] = {}
    todo: list[tuple[Any, str | None]] = [(closed, None)]
    while todo:
        j, outer = todo.pop()
        jaxpr = j.jaxpr if hasattr(j, "consts") else j
        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            # equations inside library functions (jit-ed jnp.linalg...) carry no source
            # line: name the user's line of the enclosing call instead
            where = _where(eqn) or outer
            avals = [v.aval for v in list(eqn.invars) + list(eqn.outvars)]
            dts = [_aval_dtype(a) for a in avals]
            if any(d is not None and np.dtype(d).kind == "c" for d in dts):
                why = "complex numbers are not covered"
                found.setdefault(name, UnsupportedPrimitiveError(name, where, why))
                continue
            int_only = all(d is not None and not _is_float(d) for d in dts)
            if not int_only and name == "reduce_window":
                why = "a custom reducer"
                found.setdefault(name, UnsupportedPrimitiveError(name, where, why))
            elif name == "conv_general_dilated" and eqn.params.get("batch_group_count", 1) != 1:
                why = "batch_group_count > 1"
                found.setdefault(name, UnsupportedPrimitiveError(name, where, why))
            elif name not in known and not int_only:
                found.setdefault(name, UnsupportedPrimitiveError(name, where))
            todo.extend((sub, where) for sub in _sub_jaxprs(eqn))
    return list(found.values())


class _Interpreter:
    """Evaluates jaxprs on mpf object arrays; caches index maps of data-movement equations."""

    def __init__(self, ctx: Any, max_iterations: int = 100_000) -> None:
        self.ctx = ctx
        self.unary = _float_unary(ctx)
        self.binary = _float_binary(ctx)
        self.max_iterations = max_iterations
        self._index_cache: dict[Any, Any] = {}
        self._ufuncs: dict[str, Any] = {}
        self.applications = 0
        """Equations evaluated so far (an equation inside a loop counts once per trip)."""
        self.elements = 0
        """Scalar results those equations produced."""

    # -- driving -----------------------------------------------------------------
    def run(self, closed: Any, args: Sequence[Any]) -> list[Any]:
        from jax.extend.core import DropVar, Literal

        if hasattr(closed, "consts"):
            jaxpr, consts = closed.jaxpr, closed.consts
        else:
            jaxpr, consts = closed, []
        ctx = self.ctx
        env: dict[Any, Any] = {}

        def read(v: Any) -> Any:
            return _literal(ctx, v) if isinstance(v, Literal) else env[v]

        for var, c in zip(jaxpr.constvars, consts, strict=True):
            env[var] = _coerce(ctx, np.asarray(c), var.aval)
        for var, a in zip(jaxpr.invars, args, strict=True):
            env[var] = _coerce(ctx, a, var.aval)
        for eqn in jaxpr.eqns:
            invals = [read(v) for v in eqn.invars]
            outs = self.apply(eqn, invals)
            if not eqn.primitive.multiple_results:
                outs = [outs]
            self.applications += 1
            self.elements += sum(int(np.size(o)) for o in outs)
            for var, val in zip(eqn.outvars, outs, strict=True):
                if not isinstance(var, DropVar):
                    env[var] = _coerce(ctx, val, var.aval)
        return [read(v) for v in jaxpr.outvars]

    def apply(self, eqn: Any, invals: list[Any]) -> Any:
        name = eqn.primitive.name
        p = eqn.params
        in_dts = [_aval_dtype(v.aval) for v in eqn.invars]
        out_dts = [_aval_dtype(v.aval) for v in eqn.outvars]
        floats = any(d is not None and _is_float(d) for d in in_dts + out_dts)
        if name in _CALLS or name in _CUSTOM:
            sub = p.get("jaxpr", p.get("call_jaxpr", p.get("fun_jaxpr")))
            return self.run(sub, invals)
        if not floats and name not in ("cond", "while", "scan"):
            if name in _INT_OPS:
                return _INT_OPS[name](*invals)
            return self._bind(eqn, invals)
        if name in _IDENTITY:
            return invals if eqn.primitive.multiple_results else invals[0]
        if name in self.unary and len(invals) == 1:
            return self._map(name, self.unary[name], invals)
        if name in self.binary and len(invals) == 2:
            return self._binary(name, invals)
        if name in _FLOAT_TERNARY:
            f = _real(self.ctx, lambda *a: _FLOAT_TERNARY[name](self.ctx, *a))
            return self._map(name, f, [_to_mp(self.ctx, v) for v in invals])
        rule = getattr(self, "_r_" + name.replace("-", "_"), None)
        if rule is None:
            if name in _MOVES:
                return self._move(eqn, invals)
            raise UnsupportedPrimitiveError(name, _where(eqn))
        return rule(eqn, invals)

    # -- elementwise ---------------------------------------------------------------
    def _map(self, name: str, fn: Callable[..., Any], invals: list[Any]) -> np.ndarray:
        uf = self._ufuncs.get(name)
        if uf is None:
            uf = self._ufuncs[name] = np.frompyfunc(fn, len(invals), 1)
        return np.asarray(uf(*invals), dtype=object)

    def _binary(self, name: str, invals: list[Any]) -> np.ndarray:
        a, b = invals
        if name in ("add", "sub", "mul"):
            return np.asarray(
                {"add": np.add, "sub": np.subtract, "mul": np.multiply}[name](
                    np.asarray(a, dtype=object), np.asarray(b, dtype=object)
                ),
                dtype=object,
            )
        a = a if a.dtype == object else _to_mp(self.ctx, a)
        b = b if b.dtype == object else b.astype(object) if name == "pow" else _to_mp(self.ctx, b)
        return self._map(name, self.binary[name], [a, b])

    def _r_integer_pow(self, eqn: Any, invals: list[Any]) -> Any:
        n = int(eqn.params["y"])
        return self._map(f"integer_pow{n}", lambda x: _integer_pow(self.ctx, x, n), invals)

    def _r_round(self, eqn: Any, invals: list[Any]) -> Any:
        m = int(eqn.params.get("rounding_method", 0))
        return self._map(f"round{m}", lambda x: _round(self.ctx, x, m), invals)

    def _r_convert_element_type(self, eqn: Any, invals: list[Any]) -> Any:
        return invals[0]  # _coerce applies the new dtype: identity between floats

    def _r_select_n(self, eqn: Any, invals: list[Any]) -> Any:
        which = np.asarray(invals[0]).astype(np.int64)
        cases = [np.asarray(c, dtype=object) for c in invals[1:]]
        shape = np.broadcast_shapes(which.shape, *[c.shape for c in cases])
        out = np.empty(shape, dtype=object)
        w = np.broadcast_to(which, shape)
        for k, c in enumerate(cases):
            mask = w == k
            out[mask] = np.broadcast_to(c, shape)[mask]
        return out

    def _r_clamp(self, eqn: Any, invals: list[Any]) -> Any:
        lo, x, hi = (np.asarray(v, dtype=object) for v in invals)
        mx, mn = self.binary["max"], self.binary["min"]
        return self._map("clamp", lambda a, b, c: mn(mx(b, a), c), [lo, x, hi])

    def _r_iota(self, eqn: Any, invals: list[Any]) -> Any:
        p = eqn.params
        shape, dim = tuple(p["shape"]), int(p["dimension"])
        idx = np.arange(shape[dim]).reshape([-1 if i == dim else 1 for i in range(len(shape))])
        return np.broadcast_to(idx, shape)

    # -- data movement: the simple forms in NumPy, the others through index maps --------
    def _r_reshape(self, eqn: Any, invals: list[Any]) -> Any:
        x, dims = invals[0], eqn.params.get("dimensions")
        if dims is not None:
            x = np.transpose(x, dims)
        return np.reshape(x, tuple(eqn.params["new_sizes"]))

    def _r_broadcast_in_dim(self, eqn: Any, invals: list[Any]) -> Any:
        if len(invals) != 1:  # dynamic shapes
            return self._move(eqn, invals)
        shape = tuple(eqn.params["shape"])
        tmp = [1] * len(shape)
        for i, d in enumerate(eqn.params["broadcast_dimensions"]):
            tmp[d] = np.shape(invals[0])[i]
        return np.broadcast_to(np.reshape(invals[0], tmp), shape)

    def _r_squeeze(self, eqn: Any, invals: list[Any]) -> Any:
        return np.squeeze(invals[0], axis=tuple(eqn.params["dimensions"]))

    def _r_transpose(self, eqn: Any, invals: list[Any]) -> Any:
        return np.transpose(invals[0], tuple(eqn.params["permutation"]))

    def _r_rev(self, eqn: Any, invals: list[Any]) -> Any:
        return np.flip(invals[0], axis=tuple(eqn.params["dimensions"]))

    def _r_slice(self, eqn: Any, invals: list[Any]) -> Any:
        p = eqn.params
        strides = p.get("strides") or (1,) * len(p["start_indices"])
        return invals[0][
            tuple(
                slice(a, b, c)
                for a, b, c in zip(p["start_indices"], p["limit_indices"], strides, strict=True)
            )
        ]

    def _r_concatenate(self, eqn: Any, invals: list[Any]) -> Any:
        return np.concatenate([np.asarray(v, dtype=object) for v in invals], axis=_concat_axis(eqn))

    def _bind(self, eqn: Any, invals: list[Any], params: dict[str, Any] | None = None) -> Any:
        """Run the primitive in JAX itself on integer/boolean NumPy arrays (exact)."""
        import jax

        with jax.enable_x64(True):
            out = eqn.primitive.bind(*invals, **(eqn.params if params is None else params))
        if eqn.primitive.multiple_results:
            return [np.asarray(o) for o in out]
        return np.asarray(out)

    def _move(self, eqn: Any, invals: list[Any]) -> Any:
        """A primitive that only copies elements: find which, by running it on positions."""
        float_pos = [i for i, v in enumerate(eqn.invars) if _is_float(_aval_dtype(v.aval))]
        key_ints = tuple(
            (i, np.asarray(invals[i]).tobytes()) for i in range(len(invals)) if i not in float_pos
        )
        key = (id(eqn), key_ints)
        maps: list[np.ndarray] | None = self._index_cache.get(key)
        pool = np.concatenate(
            [np.asarray(invals[i], dtype=object).ravel() for i in float_pos]
            + [np.array([self.ctx.nan], dtype=object)]
        )
        if maps is None:
            args = list(invals)
            off = 0
            for i in float_pos:
                size = int(np.prod(np.shape(invals[i]), dtype=np.int64))
                args[i] = (np.arange(size, dtype=np.int64) + off).reshape(np.shape(invals[i]))
                off += size
            params = dict(eqn.params)
            if "fill_value" in params:
                params["fill_value"] = -1
            if "update_jaxpr" in params:
                params["update_jaxpr"] = None
            out = self._bind(eqn, args, params)
            outs = out if isinstance(out, list) else [out]
            maps = [np.where(o < 0, off, o) for o in outs]  # -1: the fill value, NaN
            self._index_cache[key] = maps
        res = [pool[m] for m in maps]
        return res if eqn.primitive.multiple_results else res[0]

    def _scatter_targets(self, eqn: Any, operand: Any, indices: Any, updates: Any) -> np.ndarray:
        """Flat operand position each update element goes to (-1: dropped)."""
        from jax import lax

        key = (id(eqn), np.asarray(indices).tobytes())
        hit = self._index_cache.get(key)
        if hit is not None:
            return hit
        d = eqn.params["dimension_numbers"]
        window = list(d.update_window_dims)
        inserted = set(d.inserted_window_dims) | set(d.operand_batching_dims)
        upd_shape = np.shape(updates)
        win_sizes = iter(upd_shape[i] for i in window)
        slice_sizes = tuple(
            1 if k in inserted else next(win_sizes) for k in range(np.ndim(operand))
        )
        gd = lax.GatherDimensionNumbers(
            offset_dims=tuple(window),
            collapsed_slice_dims=tuple(d.inserted_window_dims),
            start_index_map=tuple(d.scatter_dims_to_operand_dims),
            operand_batching_dims=tuple(d.operand_batching_dims),
            start_indices_batching_dims=tuple(d.scatter_indices_batching_dims),
        )
        pos = np.arange(int(np.prod(np.shape(operand), dtype=np.int64))).reshape(np.shape(operand))
        import jax

        with jax.enable_x64(True):
            out = lax.gather(
                pos,
                np.asarray(indices),
                gd,
                slice_sizes,
                mode=lax.GatherScatterMode.FILL_OR_DROP,
                fill_value=-1,
            )
        dest = np.asarray(out).reshape(upd_shape)
        self._index_cache[key] = dest
        return dest

    def _combine_scatter(self, eqn: Any, invals: list[Any], op: str) -> Any:
        operand, indices, updates = invals
        dest = self._scatter_targets(eqn, operand, indices, updates)
        out = np.asarray(operand, dtype=object).ravel().copy()
        for t, u in zip(dest.ravel(), np.asarray(updates, dtype=object).ravel(), strict=True):
            if t < 0:
                continue
            if op == "add":
                out[t] = out[t] + u
            elif op == "sub":
                out[t] = out[t] - u
            elif op == "mul":
                out[t] = out[t] * u
            else:
                out[t] = self.binary[op](out[t], u)
        return out.reshape(np.shape(operand))

    def _r_scatter_add(self, eqn: Any, invals: list[Any]) -> Any:
        return self._combine_scatter(eqn, invals, "add")

    def _r_scatter_sub(self, eqn: Any, invals: list[Any]) -> Any:
        return self._combine_scatter(eqn, invals, "sub")

    def _r_scatter_mul(self, eqn: Any, invals: list[Any]) -> Any:
        return self._combine_scatter(eqn, invals, "mul")

    def _r_scatter_max(self, eqn: Any, invals: list[Any]) -> Any:
        return self._combine_scatter(eqn, invals, "max")

    def _r_scatter_min(self, eqn: Any, invals: list[Any]) -> Any:
        return self._combine_scatter(eqn, invals, "min")

    # -- reductions ----------------------------------------------------------------
    def _r_reduce_sum(self, eqn: Any, invals: list[Any]) -> Any:
        axes = tuple(eqn.params["axes"])
        x = np.asarray(invals[0], dtype=object)
        return _fold(x, axes, lambda a, b: a + b, self.ctx.mpf(0))

    def _r_reduce_prod(self, eqn: Any, invals: list[Any]) -> Any:
        x = np.asarray(invals[0], dtype=object)
        return _fold(x, tuple(eqn.params["axes"]), lambda a, b: a * b, self.ctx.mpf(1))

    def _r_reduce_max(self, eqn: Any, invals: list[Any]) -> Any:
        x = np.asarray(invals[0], dtype=object)
        return _fold(x, tuple(eqn.params["axes"]), self.binary["max"], -self.ctx.inf)

    def _r_reduce_min(self, eqn: Any, invals: list[Any]) -> Any:
        x = np.asarray(invals[0], dtype=object)
        return _fold(x, tuple(eqn.params["axes"]), self.binary["min"], self.ctx.inf)

    def _arg(self, eqn: Any, invals: list[Any], better: Callable[[Any, Any], bool]) -> Any:
        (axis,) = eqn.params["axes"]
        x = np.moveaxis(np.asarray(invals[0], dtype=object), axis, -1)
        flat = x.reshape(-1, x.shape[-1])
        out = np.empty(flat.shape[0], dtype=np.int64)
        for r, row in enumerate(flat):
            best = 0
            for k in range(1, row.size):
                if self.ctx.isnan(row[best]):
                    break
                if self.ctx.isnan(row[k]) or better(row[k], row[best]):
                    best = k
            out[r] = best
        return out.reshape(x.shape[:-1])

    def _r_argmax(self, eqn: Any, invals: list[Any]) -> Any:
        return self._arg(eqn, invals, lambda a, b: a > b)

    def _r_argmin(self, eqn: Any, invals: list[Any]) -> Any:
        return self._arg(eqn, invals, lambda a, b: a < b)

    def _cumulative(self, eqn: Any, invals: list[Any], op: Callable[[Any, Any], Any]) -> Any:
        axis, reverse = int(eqn.params["axis"]), bool(eqn.params.get("reverse", False))
        x = np.moveaxis(np.asarray(invals[0], dtype=object), axis, -1).copy()
        if reverse:
            x = x[..., ::-1].copy()
        for k in range(1, x.shape[-1]):
            prev, cur = x[..., k - 1], x[..., k]
            x[..., k] = np.frompyfunc(op, 2, 1)(prev, cur)
        if reverse:
            x = x[..., ::-1]
        return np.moveaxis(x, -1, axis)

    def _r_cumsum(self, eqn: Any, invals: list[Any]) -> Any:
        return self._cumulative(eqn, invals, lambda a, b: a + b)

    def _r_cumprod(self, eqn: Any, invals: list[Any]) -> Any:
        return self._cumulative(eqn, invals, lambda a, b: a * b)

    def _r_cummax(self, eqn: Any, invals: list[Any]) -> Any:
        return self._cumulative(eqn, invals, self.binary["max"])

    def _r_cummin(self, eqn: Any, invals: list[Any]) -> Any:
        return self._cumulative(eqn, invals, self.binary["min"])

    def _r_cumlogsumexp(self, eqn: Any, invals: list[Any]) -> Any:
        c = self.ctx

        def lse(a: Any, b: Any) -> Any:
            m = a if a >= b else b
            if c.isinf(m):
                return m
            return m + c.log(c.exp(a - m) + c.exp(b - m))

        return self._cumulative(eqn, invals, lse)

    def _r_sort(self, eqn: Any, invals: list[Any]) -> Any:
        dim, nk = int(eqn.params["dimension"]), int(eqn.params.get("num_keys", 1))
        arrs = [np.moveaxis(np.asarray(v), dim, -1) for v in invals]
        lead = arrs[0].shape[:-1]
        L = arrs[0].shape[-1]
        outs = [np.empty(a.shape, dtype=a.dtype) for a in arrs]
        c = self.ctx

        def key(v: Any) -> tuple[int, Any]:
            if isinstance(v, c.mpf) and c.isnan(v):
                return (1, 0)  # NaNs last, as XLA's total order
            return (0, v)

        for idx in np.ndindex(*lead):
            keys = [[key(arrs[j][idx][k]) for j in range(nk)] for k in range(L)]
            order = sorted(range(L), key=lambda k: keys[k])  # stable
            for a, o in zip(arrs, outs, strict=True):
                o[idx] = a[idx][order]
        return [np.moveaxis(o, -1, dim) for o in outs]

    # -- linear algebra ------------------------------------------------------------
    def _r_dot_general(self, eqn: Any, invals: list[Any]) -> Any:
        (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
        lhs, rhs = (np.asarray(v, dtype=object) for v in invals)
        lf = [i for i in range(lhs.ndim) if i not in lc and i not in lb]
        rf = [i for i in range(rhs.ndim) if i not in rc and i not in rb]
        L = np.transpose(lhs, list(lb) + lf + list(lc))
        R = np.transpose(rhs, list(rb) + rf + list(rc))
        bshape = [lhs.shape[i] for i in lb]
        B = int(np.prod(bshape, dtype=np.int64))
        M = int(np.prod([lhs.shape[i] for i in lf], dtype=np.int64))
        N = int(np.prod([rhs.shape[i] for i in rf], dtype=np.int64))
        K = int(np.prod([lhs.shape[i] for i in lc], dtype=np.int64))
        L = L.reshape(B, M, K)
        R = R.reshape(B, N, K)
        out = np.empty((B, M, N), dtype=object)
        zero = self.ctx.mpf(0)
        for b in range(B):
            if K == 0:
                out[b] = zero
            else:
                out[b] = L[b] @ R[b].T
        shape = bshape + [lhs.shape[i] for i in lf] + [rhs.shape[i] for i in rf]
        return out.reshape(shape)

    def _r_conv_general_dilated(self, eqn: Any, invals: list[Any]) -> Any:
        p = eqn.params
        if int(p.get("batch_group_count", 1)) != 1:
            raise UnsupportedPrimitiveError(eqn.primitive.name, _where(eqn), "batch_group_count")
        dn = p["dimension_numbers"]
        lhs_spec, rhs_spec, out_spec = dn.lhs_spec, dn.rhs_spec, dn.out_spec
        zero = self.ctx.mpf(0)
        x = np.transpose(np.asarray(invals[0], dtype=object), lhs_spec)  # N C *S
        w = np.transpose(np.asarray(invals[1], dtype=object), rhs_spec)  # O I *K
        nsp = x.ndim - 2
        lhs_dil = tuple(p.get("lhs_dilation") or (1,) * nsp)
        rhs_dil = tuple(p.get("rhs_dilation") or (1,) * nsp)
        strides = tuple(p["window_strides"])
        pads = list(p["padding"])
        x = _dilate_pad(x, lhs_dil, pads, zero)
        out_shape_t = [eqn.outvars[0].aval.shape[i] for i in out_spec]  # N O *Sout
        Sout = out_shape_t[2:]
        G = int(p.get("feature_group_count", 1))
        Cg = x.shape[1] // G
        Og = w.shape[0] // G
        out = np.full(out_shape_t, zero, dtype=object)
        for kidx in itertools.product(*[range(k) for k in w.shape[2:]]):
            sl = tuple(
                slice(k * d, k * d + (o - 1) * s + 1, s)
                for k, d, o, s in zip(kidx, rhs_dil, Sout, strides, strict=True)
            )
            patch = x[(slice(None), slice(None)) + sl]  # N C *Sout
            for g in range(G):
                xs = patch[:, g * Cg : (g + 1) * Cg]
                ws = w[(slice(g * Og, (g + 1) * Og), slice(None)) + tuple(kidx)]  # Og Cg
                contrib = np.tensordot(xs, ws, axes=([1], [1]))  # N *Sout Og
                out[:, g * Og : (g + 1) * Og] += np.moveaxis(contrib, -1, 1)
        return np.transpose(out, np.argsort(out_spec))

    def _window(self, eqn: Any, invals: list[Any], op: Callable, init: Any) -> Any:
        p = eqn.params
        x = np.asarray(invals[0], dtype=object)
        nd = x.ndim
        base = tuple(p.get("base_dilation") or (1,) * nd)
        wdil = tuple(p.get("window_dilation") or (1,) * nd)
        x = _dilate_pad(x, base, list(p["padding"]), init)
        out_shape = eqn.outvars[0].aval.shape
        out = None
        for kidx in itertools.product(*[range(k) for k in p["window_dimensions"]]):
            sl = tuple(
                slice(k * d, k * d + (o - 1) * s + 1, s)
                for k, d, o, s in zip(kidx, wdil, out_shape, p["window_strides"], strict=True)
            )
            part = x[sl]
            out = part.copy() if out is None else np.frompyfunc(op, 2, 1)(out, part)
        return out

    def _r_reduce_window_sum(self, eqn: Any, invals: list[Any]) -> Any:
        return self._window(eqn, invals, lambda a, b: a + b, self.ctx.mpf(0))

    def _r_reduce_window_max(self, eqn: Any, invals: list[Any]) -> Any:
        return self._window(eqn, invals, self.binary["max"], -self.ctx.inf)

    def _r_reduce_window_min(self, eqn: Any, invals: list[Any]) -> Any:
        return self._window(eqn, invals, self.binary["min"], self.ctx.inf)

    # -- control flow --------------------------------------------------------------
    def _r_cond(self, eqn: Any, invals: list[Any]) -> Any:
        branches = eqn.params["branches"]
        i = int(np.asarray(invals[0]))
        i = min(max(i, 0), len(branches) - 1)
        return self.run(branches[i], invals[1:])

    def _r_while(self, eqn: Any, invals: list[Any]) -> Any:
        p = eqn.params
        cn, bn = int(p["cond_nconsts"]), int(p["body_nconsts"])
        cconsts, bconsts, carry = invals[:cn], invals[cn : cn + bn], list(invals[cn + bn :])
        for _ in range(self.max_iterations):
            if not bool(np.asarray(self.run(p["cond_jaxpr"], cconsts + carry)[0])):
                return carry
            carry = self.run(p["body_jaxpr"], bconsts + carry)
        raise RuntimeError(
            f"a while loop did not terminate in {self.max_iterations} iterations on mpmath "
            "numbers (its stopping test may depend on float64 round-off)"
        )

    def _r_scan(self, eqn: Any, invals: list[Any]) -> Any:
        p = eqn.params
        nc, ncarry, length = int(p["num_consts"]), int(p["num_carry"]), int(p["length"])
        consts, carry = invals[:nc], list(invals[nc : nc + ncarry])
        xs = invals[nc + ncarry :]
        ys: list[list[Any]] = []
        order = range(length - 1, -1, -1) if p.get("reverse", False) else range(length)
        slots: dict[int, list[Any]] = {}
        for i in order:
            out = self.run(p["jaxpr"], consts + carry + [x[i] for x in xs])
            carry, y = out[:ncarry], out[ncarry:]
            slots[i] = y
        ys = [slots[i] for i in range(length)]
        ny = len(eqn.outvars) - ncarry
        stacked = []
        for k in range(ny):
            aval = eqn.outvars[ncarry + k].aval
            if length == 0:
                stacked.append(np.empty(aval.shape, dtype=object))
            else:
                stacked.append(np.stack([np.asarray(y[k]) for y in ys]))
        return carry + stacked


def _concat_axis(eqn: Any) -> int:
    return int(eqn.params["dimension"])


def _dilate_pad(x: np.ndarray, dil: Sequence[int], pads: Sequence[Any], fill: Any) -> np.ndarray:
    """Insert ``dil - 1`` fill values between elements, then pad (negative pads crop).

    ``pads`` holds ``(low, high)`` or ``(low, high, interior)`` per dimension.
    """
    nd = x.ndim
    off = nd - len(dil)
    for j, d in enumerate(dil):
        ax = off + j
        if d > 1 and x.shape[ax] > 0:
            n = x.shape[ax]
            shape = list(x.shape)
            shape[ax] = (n - 1) * d + 1
            y = np.full(shape, fill, dtype=object)
            idx = [slice(None)] * nd
            idx[ax] = slice(None, None, d)
            y[tuple(idx)] = x
            x = y
    for j, pad in enumerate(pads):
        ax = off + j
        lo, hi = int(pad[0]), int(pad[1])
        if lo > 0 or hi > 0:
            shape = list(x.shape)
            shape[ax] += max(lo, 0) + max(hi, 0)
            y = np.full(shape, fill, dtype=object)
            idx = [slice(None)] * nd
            idx[ax] = slice(max(lo, 0), max(lo, 0) + x.shape[ax])
            y[tuple(idx)] = x
            x = y
        if lo < 0 or hi < 0:
            idx = [slice(None)] * nd
            idx[ax] = slice(max(-lo, 0), x.shape[ax] - max(-hi, 0))
            x = x[tuple(idx)]
    return x


def _fold(x: np.ndarray, axes: tuple[int, ...], op: Callable[[Any, Any], Any], init: Any) -> Any:
    """Reduce ``x`` over ``axes`` with a binary ``op`` (left to right), starting from ``init``."""
    keep = [i for i in range(x.ndim) if i not in axes]
    y = np.transpose(x, keep + list(axes))
    lead = y.shape[: len(keep)]
    y = y.reshape(lead + (-1,))
    out = np.empty(lead, dtype=object)
    for idx in np.ndindex(*lead):
        acc = init
        for v in y[idx]:
            acc = op(acc, v)
        out[idx] = acc
    return out


def evaluate_jaxpr_mp(closed_jaxpr: Any, args: Sequence[Any], ctx: Any) -> list[Any]:
    """Evaluate a closed jaxpr on mpmath numbers.

    Parameters
    ----------
    closed_jaxpr : jax.extend.core.ClosedJaxpr
        From ``jax.make_jaxpr``; its constants (captured weights) enter exactly.
    args : sequence
        One value per input variable: for floating inputs an object array of
        ``ctx.mpf`` (or anything convertible exactly: float, int, a float
        array), shaped as the input; integer/boolean inputs as NumPy arrays.
    ctx : mpmath.MPContext
        The context (and precision) of the arithmetic, e.g. from
        :func:`polygrad.backends.mpmath.make_context`.

    Returns
    -------
    list
        One value per output variable: object arrays of ``ctx.mpf`` for
        floating outputs, NumPy integer/boolean arrays otherwise.

    Raises
    ------
    UnsupportedPrimitiveError
        The jaxpr contains a primitive without a rule (see the module
        docstring); use :func:`unsupported_primitives` to find them all first.
    """
    return _Interpreter(ctx).run(closed_jaxpr, list(args))


def jaxpr_mp_evaluator(
    closed_jaxpr: Any, shapes: Sequence[tuple[int, ...]]
) -> Callable[[np.ndarray, np.ndarray, int], np.ndarray]:
    """``evaluate_mp`` for :class:`~polygrad.backends.base.Target` from a float64 jaxpr.

    Parameters
    ----------
    closed_jaxpr : ClosedJaxpr
        A function of the checked leaves only (other arguments are constants).
    shapes : sequence of tuple
        Shapes of the checked leaves, in the order of the flat input vector.

    Returns
    -------
    callable
        ``(x0, dx, dps) -> y``: ``x0 + dx`` formed exactly at ``dps`` digits
        (both float64 ``(n,)``), ``y`` the flat outputs, an object array
        ``(m,)`` of mpf (integer outputs converted exactly).
    """
    from .mpmath import make_context

    interpreters: dict[int, _Interpreter] = {}
    # index maps are pure functions of shapes and integer values: shared by all precisions
    index_cache: dict[Any, Any] = {}

    def evaluate(x0: np.ndarray, dx: np.ndarray, dps: int) -> np.ndarray:
        ip = interpreters.get(dps)
        if ip is None:
            ip = interpreters[dps] = _Interpreter(make_context(dps))
            ip._index_cache = index_cache
        ctx = ip.ctx
        flat = np.empty(x0.size, dtype=object)
        flat[:] = [
            ctx.mpf(float(a)) + ctx.mpf(float(b))
            for a, b in zip(np.ravel(x0), np.ravel(dx), strict=True)
        ]
        leaves, off = [], 0
        for shape in shapes:
            size = int(np.prod(shape, dtype=np.int64))
            leaves.append(flat[off : off + size].reshape(shape))
            off += size
        outs = ip.run(closed_jaxpr, leaves)
        parts = [_to_mp(ctx, o).ravel() for o in outs]
        return np.concatenate(parts) if parts else np.empty(0, dtype=object)

    return evaluate


def build_evaluate_mp(
    fn: Callable[..., Sequence[Any]],
    leaves: Sequence[Any],
    dtypes: Sequence[Any] | None = None,
) -> tuple[Callable[[np.ndarray, np.ndarray, int], np.ndarray] | None, str | None]:
    """Trace ``fn`` once and return its mp evaluator, or why there is none.

    Parameters
    ----------
    fn : callable
        ``fn(*leaves) -> list of arrays``: the function of the checked leaves
        (other arguments and weights are closed over; they become constants
        of the jaxpr and enter exactly).
    leaves : sequence of arrays
        The checked leaves; only their shapes are used.
    dtypes : sequence of dtype, optional
        The dtypes the leaves are traced in; default float64, so that Python
        float literals of ``fn`` enter at float64 precision. (Floating dtypes
        do not matter to the mp evaluation otherwise: casts are the identity.)

    Returns
    -------
    (evaluate_mp, reason)
        ``evaluate_mp`` as :func:`jaxpr_mp_evaluator` returns it and
        ``reason is None``; or ``None`` and a sentence naming the first
        unsupported primitives (and their source lines) or the tracing error.
    """
    import jax

    shapes = [tuple(np.shape(a)) for a in leaves]
    dtypes = [np.float64] * len(shapes) if dtypes is None else list(dtypes)
    try:
        with jax.enable_x64(True):
            avals = [jax.ShapeDtypeStruct(s, d) for s, d in zip(shapes, dtypes, strict=True)]
            closed = jax.make_jaxpr(lambda *a: list(fn(*a)))(*avals)
    except Exception as exc:  # noqa: BLE001 - untraceable (NumPy inside...): no mp reference
        return None, f"f could not be traced to a jaxpr ({type(exc).__name__}: {exc})"
    bad = unsupported_primitives(closed)
    if bad:
        return None, "; ".join(str(b) for b in bad[:3])
    return jaxpr_mp_evaluator(closed, shapes), None
