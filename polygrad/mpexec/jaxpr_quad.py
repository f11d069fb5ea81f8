"""Run a JAX function's jaxpr on quad arrays, every evaluation point of a check in one pass.

The quad tier of the reference (:mod:`polygrad.reference.quad`) evaluates ``f`` at all
``4 d + 1`` points of a check at once, on IEEE binary128 arrays (numpy-quaddtype's
``QuadPrecDType``). A JAX function is traced once per batch size under ``jax.vmap``
(in float64: JAX's own batching rules put the points on a leading axis) and its jaxpr is
then interpreted primitive by primitive on NumPy quad arrays: a matrix product is one
quad ``matmul`` over every point, where the mp reference multiplies mpmath numbers one
at a time.

Covered primitives
------------------
* elementwise arithmetic and the transcendental functions numpy-quaddtype 1.0 computes
  (SLEEF, 1 ULP): ``add sub mul div rem neg abs sign floor ceil round max min pow
  integer_pow square sqrt rsqrt cbrt exp exp2 log log1p expm1 logistic sin cos tan asin
  acos atan atan2 sinh cosh tanh asinh acosh atanh``, comparisons, ``is_finite``,
  ``select_n``, ``clamp``;
* casts (between floats the identity, as on mpmath numbers), ``stop_gradient`` and the
  other identities;
* data movement (every primitive the mp interpreter moves elements with, by the same
  index maps computed in JAX on element positions);
* ``dot_general`` (as one batched quad ``matmul`` on contiguous operands),
  ``reduce_sum reduce_max reduce_min reduce_prod argmax argmin cumsum cumprod``;
* ``jit``/``pjit`` and the other calls, ``custom_jvp_call`` and ``custom_vjp_call``
  (their primal computation); any equation on integers or booleans only runs in JAX.

Anything else (special functions quad has no loop for, convolutions, loops, linear
algebra) raises :class:`NoQuadRuleError` before the first quad operation, and the
check's reference goes on to mpmath.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .jaxpr_coverage import _CALLS, _CUSTOM, _IDENTITY, _MOVES, _where
from .jaxpr_indexing import _DataMovement
from .jaxpr_rules import _INT_OPS, _aval_dtype, _is_float
from .quad_ops import NoQuadRuleError, matmul_each, point_leaves, rsqrt, sigmoid

__all__ = ["quad_jaxpr_evaluator", "quad_unsupported"]


UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "neg": np.negative, "abs": np.abs, "sign": np.sign, "floor": np.floor,
    "ceil": np.ceil, "exp": np.exp, "exp2": np.exp2, "log": np.log, "log1p": np.log1p,
    "expm1": np.expm1, "sqrt": np.sqrt, "rsqrt": rsqrt, "cbrt": np.cbrt,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos,
    "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh,
    "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh, "square": np.square,
    "logistic": sigmoid, "is_finite": np.isfinite,
}  # fmt: skip
"""Unary float primitives and their quad loops."""

BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add, "add_any": np.add, "sub": np.subtract, "mul": np.multiply,
    "div": np.divide, "max": np.maximum, "min": np.minimum, "pow": np.power,
    "atan2": np.arctan2, "rem": np.fmod, "eq": np.equal, "ne": np.not_equal,
    "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
}  # fmt: skip
"""Binary float primitives and their quad loops (XLA's ``rem`` is C's ``fmod``)."""

OTHER = frozenset(
    {"integer_pow", "round", "convert_element_type", "select_n", "clamp", "iota",
     "dot_general", "reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "argmax",
     "argmin", "cumsum", "cumprod", "sort"}
)  # fmt: skip
"""Float primitives with a rule of their own here."""

SUPPORTED = (
    frozenset(UNARY)
    | frozenset(BINARY)
    | OTHER
    | frozenset(_IDENTITY)
    | frozenset(m for m in _MOVES if not m.startswith("scatter"))
)
"""Every float primitive the quad interpreter runs."""


def _float_eqn(eqn: Any) -> bool:
    dts = [_aval_dtype(v.aval) for v in (*eqn.invars, *eqn.outvars)]
    return any(d is not None and _is_float(d) for d in dts)


def _sub_jaxprs(eqn: Any) -> list[Any]:
    p = eqn.params
    sub = p.get("jaxpr", p.get("call_jaxpr", p.get("fun_jaxpr")))
    return [sub] if sub is not None else []


def quad_unsupported(closed: Any) -> list[str]:
    """The float primitives of ``closed`` (and its calls) that the quad interpreter lacks,
    each with its source line where JAX kept one."""
    jaxpr = getattr(closed, "jaxpr", closed)
    bad: list[str] = []
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name in _CALLS or name in _CUSTOM:
            bad += [b for s in _sub_jaxprs(eqn) for b in quad_unsupported(s) if b not in bad]
        elif _float_eqn(eqn) and name not in SUPPORTED:
            where = _where(eqn)
            text = name + (f" ({where})" if where else "")
            if text not in bad:
                bad.append(text)
    return bad


class _QuadInterpreter(_DataMovement):
    """Evaluates jaxprs on quad arrays (floats) and NumPy integer and boolean arrays."""

    def __init__(self, q: Any) -> None:
        self.q = q
        self._index_cache: dict[Any, Any] = {}
        self._consts: dict[int, tuple[Any, np.ndarray]] = {}

    def run(self, closed: Any, args: Sequence[Any]) -> list[Any]:
        from jax.extend.core import DropVar, Literal

        jaxpr = getattr(closed, "jaxpr", closed)
        consts = getattr(closed, "consts", [])
        env: dict[Any, Any] = {}

        def read(v: Any) -> Any:
            return self._coerce(np.asarray(v.val), v.aval) if isinstance(v, Literal) else env[v]

        for var, c in zip(jaxpr.constvars, consts, strict=True):
            env[var] = self._constant(c, var.aval)
        for var, a in zip(jaxpr.invars, args, strict=True):
            env[var] = self._coerce(a, var.aval)
        for eqn in jaxpr.eqns:
            outs = self.apply(eqn, [read(v) for v in eqn.invars])
            outs = outs if eqn.primitive.multiple_results else [outs]
            for var, val in zip(eqn.outvars, outs, strict=True):
                if not isinstance(var, DropVar):
                    env[var] = self._coerce(val, var.aval)
        return [read(v) for v in jaxpr.outvars]

    def _constant(self, c: Any, aval: Any) -> np.ndarray:
        hit = self._consts.get(id(c))
        if hit is None or hit[0] is not c:
            hit = self._consts[id(c)] = (c, self._coerce(np.asarray(c), aval))
        return hit[1]

    def _coerce(self, val: Any, aval: Any) -> Any:
        """``val`` in the representation of ``aval``: quad for floats (a float to integer
        cast truncates toward zero, as XLA's), the aval's own dtype otherwise."""
        dtype = _aval_dtype(aval)
        if dtype is None:
            return val
        arr = np.asarray(val)
        if _is_float(dtype):
            out = arr if arr.dtype == self.q else arr.astype(self.q)
        elif arr.dtype == self.q:
            out = np.trunc(np.where(np.isfinite(arr), arr, 0)).astype(np.dtype(dtype))
        else:
            out = arr.astype(np.dtype(dtype), copy=False)
        shape = tuple(aval.shape)
        return out if out.shape == shape else np.broadcast_to(out, shape)

    def _quad(self, v: Any) -> np.ndarray:
        a = np.asarray(v)
        return a if a.dtype == self.q else a.astype(self.q)

    def apply(self, eqn: Any, invals: list[Any]) -> Any:
        name = eqn.primitive.name
        if name in _CALLS or name in _CUSTOM:
            return self.run(_sub_jaxprs(eqn)[0], invals)
        if not _float_eqn(eqn):
            return _INT_OPS[name](*invals) if name in _INT_OPS else self._bind(eqn, invals)
        if name in _IDENTITY:
            return invals if eqn.primitive.multiple_results else invals[0]
        if name in UNARY and len(invals) == 1:
            return UNARY[name](self._quad(invals[0]))
        if name in BINARY and len(invals) == 2:
            return BINARY[name](self._quad(invals[0]), self._quad(invals[1]))
        rule = getattr(self, "_r_" + name, None)
        if rule is not None:
            return rule(eqn, invals)
        if name in SUPPORTED:
            return self._move(eqn, invals)
        raise NoQuadRuleError(f"no quad rule for {name}")

    # -- elementwise ---------------------------------------------------------------
    def _r_integer_pow(self, eqn: Any, invals: list[Any]) -> Any:
        x, n = self._quad(invals[0]), int(eqn.params["y"])
        out = np.ones_like(x)
        base = x
        for bit in bin(abs(n))[:1:-1]:  # exact repeated squaring, as XLA's integer_pow
            if bit == "1":
                out = out * base
            base = base * base
        return out if n >= 0 else 1 / out

    def _r_round(self, eqn: Any, invals: list[Any]) -> Any:
        x = self._quad(invals[0])
        if int(eqn.params.get("rounding_method", 0)) == 1:  # to nearest even
            return np.rint(x)
        return np.sign(x) * np.floor(np.abs(x) + 0.5)  # half away from zero

    def _r_convert_element_type(self, eqn: Any, invals: list[Any]) -> Any:
        return invals[0]  # _coerce applies the new dtype: identity between floats

    def _r_select_n(self, eqn: Any, invals: list[Any]) -> Any:
        which = np.asarray(invals[0]).astype(np.int64)
        out = invals[1]
        for k, case in enumerate(invals[2:], start=1):
            out = np.where(which == k, case, out)
        return out

    def _r_clamp(self, eqn: Any, invals: list[Any]) -> Any:
        lo, x, hi = (self._quad(v) for v in invals)
        return np.minimum(np.maximum(x, lo), hi)

    def _r_iota(self, eqn: Any, invals: list[Any]) -> Any:
        p = eqn.params
        shape, dim = tuple(p["shape"]), int(p["dimension"])
        idx = np.arange(shape[dim]).reshape([-1 if i == dim else 1 for i in range(len(shape))])
        return np.broadcast_to(idx, shape)

    # -- data movement: element positions taken from a quad pool -------------------
    def _r_concatenate(self, eqn: Any, invals: list[Any]) -> Any:
        return np.concatenate([self._quad(v) for v in invals], axis=int(eqn.params["dimension"]))

    def _pool(self, floats: list[Any]) -> np.ndarray:
        return np.concatenate(
            [self._quad(v).ravel() for v in floats] + [np.array([np.nan]).astype(self.q)]
        )

    # -- reductions and products ---------------------------------------------------
    def _r_dot_general(self, eqn: Any, invals: list[Any]) -> Any:
        (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
        lhs, rhs = self._quad(invals[0]), self._quad(invals[1])
        lf = [i for i in range(lhs.ndim) if i not in lc and i not in lb]
        rf = [i for i in range(rhs.ndim) if i not in rc and i not in rb]
        bshape = [lhs.shape[i] for i in lb]
        B, K = int(np.prod(bshape, dtype=np.int64)), int(np.prod([lhs.shape[i] for i in lc]))
        M = int(np.prod([lhs.shape[i] for i in lf], dtype=np.int64))
        N = int(np.prod([rhs.shape[i] for i in rf], dtype=np.int64))
        shape = bshape + [lhs.shape[i] for i in lf] + [rhs.shape[i] for i in rf]
        if K == 0:
            return np.zeros(shape, dtype=np.float64).astype(self.q)
        L = np.transpose(lhs, [*lb, *lf, *lc]).reshape(B, M, K)
        R = np.transpose(rhs, [*rb, *rc, *rf]).reshape(B, K, N)
        return matmul_each(L, R).reshape(shape)

    def _r_reduce_sum(self, eqn: Any, invals: list[Any]) -> Any:
        return np.sum(self._quad(invals[0]), axis=tuple(eqn.params["axes"]))

    def _r_reduce_prod(self, eqn: Any, invals: list[Any]) -> Any:
        return np.prod(self._quad(invals[0]), axis=tuple(eqn.params["axes"]))

    def _r_reduce_max(self, eqn: Any, invals: list[Any]) -> Any:
        return np.max(self._quad(invals[0]), axis=tuple(eqn.params["axes"]))

    def _r_reduce_min(self, eqn: Any, invals: list[Any]) -> Any:
        return np.min(self._quad(invals[0]), axis=tuple(eqn.params["axes"]))

    def _r_argmax(self, eqn: Any, invals: list[Any]) -> Any:
        return np.argmax(self._quad(invals[0]), axis=int(eqn.params["axes"][0]))

    def _r_argmin(self, eqn: Any, invals: list[Any]) -> Any:
        return np.argmin(self._quad(invals[0]), axis=int(eqn.params["axes"][0]))

    def _cumulative(self, eqn: Any, invals: list[Any], fn: Callable[..., Any]) -> Any:
        axis, x = int(eqn.params["axis"]), self._quad(invals[0])
        if eqn.params.get("reverse", False):
            return np.flip(fn(np.flip(x, axis), axis=axis), axis)
        return fn(x, axis=axis)

    def _r_sort(self, eqn: Any, invals: list[Any]) -> Any:
        """A sort by one key (JAX's ``sort``; NaN last, as JAX puts it); the other operands
        follow the key's permutation."""
        if int(eqn.params.get("num_keys", 1)) != 1:
            raise NoQuadRuleError("no quad rule for sort by more than one key")
        dim = int(eqn.params["dimension"])
        key = np.asarray(invals[0])
        order = np.argsort(key, axis=dim, kind="stable")
        return [np.take_along_axis(np.asarray(v), order, axis=dim) for v in invals]

    def _r_cumsum(self, eqn: Any, invals: list[Any]) -> Any:
        return self._cumulative(eqn, invals, np.cumsum)

    def _r_cumprod(self, eqn: Any, invals: list[Any]) -> Any:
        return self._cumulative(eqn, invals, np.cumprod)


def quad_jaxpr_evaluator(
    trace: Callable[[int], Any],
    shapes: Sequence[tuple[int, ...]],
    q: Any,
    traced: dict[int, Any] | None = None,
) -> Callable[[np.ndarray], np.ndarray]:
    """``evaluate_quad`` of :class:`~polygrad.backends.base.Target` from batched jaxprs.

    Parameters
    ----------
    trace : callable
        ``trace(B) -> ClosedJaxpr``: the function of the checked leaves, vmapped over a
        leading axis of ``B`` points and traced in float64 (called once per ``B``).
    shapes : sequence of tuple
        Shapes of the checked leaves, in the order of the flat input vector.
    q : numpy dtype
        The quad dtype.
    traced : dict of int to ClosedJaxpr, optional
        Jaxprs already traced by ``trace`` (and found covered), by batch size.

    Returns
    -------
    callable
        ``(B, n)`` quad array of points -> ``(B, m)`` quad array of the flat outputs.

    Raises
    ------
    NoQuadRuleError
        (from the callable) a jaxpr holds a float primitive without a quad rule.
    """
    interpreter = _QuadInterpreter(q)
    jaxprs: dict[int, Any] = dict(traced or {})

    def evaluate(X: np.ndarray) -> np.ndarray:
        B = X.shape[0]
        closed = jaxprs.get(B)
        if closed is None:
            closed = jaxprs[B] = trace(B)
            bad = quad_unsupported(closed)
            if bad:
                raise NoQuadRuleError(f"no quad rule for {bad[0]}")
        outs = interpreter.run(closed, point_leaves(X, shapes))
        parts = [np.asarray(o).reshape(B, -1) for o in outs]
        parts = [p if p.dtype == q else p.astype(q) for p in parts]
        return np.concatenate(parts, axis=1) if parts else np.empty((B, 0), dtype=q)

    return evaluate
