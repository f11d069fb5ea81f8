"""Re-execute a JAX function's jaxpr on mpmath numbers, primitive by primitive.

A function is traced once (``jax.make_jaxpr``, in float64) and its jaxpr is
then interpreted on NumPy object arrays of ``mpf`` numbers of a private
``mpmath`` context (:func:`polygrad.mpexec.context.make_context`), so the
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

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .elementwise import real
from .errors import UnsupportedPrimitiveError
from .jaxpr_coverage import (
    _CALLS,
    _CUSTOM,
    _IDENTITY,
    _MOVES,
    _where,
    supported_primitives,
    unsupported_primitives,
)
from .jaxpr_indexing import _DataMovement
from .jaxpr_rules import (
    _FLOAT_TERNARY,
    _INT_OPS,
    _aval_dtype,
    _coerce,
    _float_binary,
    _float_unary,
    _integer_pow,
    _is_float,
    _literal,
    _round,
)
from .kinks import (
    at_integer,
    at_values,
    at_zero,
    is_recording,
    note_operation,
    power_at_zero,
    region_at_kink,
    repeated,
    suspended,
    tie,
)
from .linalg_conv import convolve, dilate_pad, reduce_windows
from .reductions import cumulative, fold, sort_permutation
from .values import leaves_at, mp_array

__all__ = [
    "UnsupportedPrimitiveError",
    "build_evaluate_mp",
    "evaluate_jaxpr_mp",
    "jaxpr_mp_evaluator",
    "supported_primitives",
    "unsupported_primitives",
]


class _Interpreter(_DataMovement):
    """Evaluates jaxprs on mpf object arrays; caches index maps of data-movement equations."""

    def __init__(self, ctx: Any, max_iterations: int = 100_000) -> None:
        self.ctx = ctx
        self.unary = _float_unary(ctx)
        self.binary = _float_binary(ctx)
        self.max_iterations = max_iterations
        self._index_cache: dict[Any, Any] = {}
        self._ufuncs: dict[str, Any] = {}
        self._consts: dict[int, tuple[Any, Any, np.ndarray]] = {}
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
            env[var] = self._constant(c, var.aval)
        for var, a in zip(jaxpr.invars, args, strict=True):
            env[var] = _coerce(ctx, a, var.aval)
        for eqn in jaxpr.eqns:
            invals = [read(v) for v in eqn.invars]
            if is_recording():
                note_operation(eqn.primitive.name, _kink_test(eqn, invals))
            outs = self.apply(eqn, invals)
            if not eqn.primitive.multiple_results:
                outs = [outs]
            self.applications += 1
            self.elements += sum(int(np.size(o)) for o in outs)
            for var, val in zip(eqn.outvars, outs, strict=True):
                if not isinstance(var, DropVar):
                    env[var] = _coerce(ctx, val, var.aval)
        return [read(v) for v in jaxpr.outvars]

    def _constant(self, c: Any, aval: Any) -> Any:
        """A constant of the jaxpr in mp, converted once per interpreter (the jaxpr holds
        the constant, so its id stays its own); each run gets its own copy."""
        hit = self._consts.get(id(c))
        if hit is None or hit[0] is not c or hit[1] is not aval:
            hit = self._consts[id(c)] = (c, aval, _coerce(self.ctx, np.asarray(c), aval))
        value = hit[2]
        return value.copy() if isinstance(value, np.ndarray) else value

    def apply(self, eqn: Any, invals: list[Any]) -> Any:
        name = eqn.primitive.name
        p = eqn.params
        in_dts = [_aval_dtype(v.aval) for v in eqn.invars]
        out_dts = [_aval_dtype(v.aval) for v in eqn.outvars]
        floats = any(d is not None and _is_float(d) for d in in_dts + out_dts)
        if name in _CALLS or name in _CUSTOM:
            sub = p.get("jaxpr", p.get("call_jaxpr", p.get("fun_jaxpr")))
            if name in _CUSTOM and is_recording():
                return self._custom_region(name, sub, invals)
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
            f = real(self.ctx, lambda *a: _FLOAT_TERNARY[name](self.ctx, *a))
            return self._map(name, f, [mp_array(self.ctx, v) for v in invals])
        rule = getattr(self, "_r_" + name.replace("-", "_"), None)
        if rule is None:
            if name in _MOVES:
                return self._move(eqn, invals)
            raise UnsupportedPrimitiveError(name, _where(eqn))
        return rule(eqn, invals)

    # -- custom rules, while kinks are recorded ---------------------------------------
    def _custom_region(self, name: str, sub: Any, invals: list[Any]) -> Any:
        """A ``custom_jvp``/``custom_vjp`` call: its rule replaces the derivative of its
        operations, so their kinks are not autodiff's (a ``max`` inside a stable
        ``logaddexp``); the region counts as at a kink where its own function is (a
        ReLU at 0), told by its one-sided difference quotients on mpmath numbers."""
        with suspended():
            out = self.run(sub, invals)
        note_operation(
            name, lambda: region_at_kink(self.ctx, lambda v: self._flat(self.run(sub, v)), invals)
        )
        return out

    @staticmethod
    def _flat(outs: list[Any]) -> np.ndarray:
        kept = [np.asarray(o, dtype=object).ravel() for o in outs if np.asarray(o).dtype == object]
        return np.concatenate(kept) if kept else np.empty(0, dtype=object)

    # -- elementwise ---------------------------------------------------------------
    def _map(self, name: str, fn: Callable[..., Any], invals: list[Any]) -> np.ndarray:
        uf = self._ufuncs.get(name)
        if uf is None:
            uf = self._ufuncs[name] = np.frompyfunc(fn, len(invals), 1)
        return np.asarray(uf(*invals), dtype=object)

    def _binary(self, name: str, invals: list[Any]) -> np.ndarray:
        a, b = invals
        if name in ("add", "add_any", "sub", "mul"):
            ufunc = {"add": np.add, "add_any": np.add, "sub": np.subtract, "mul": np.multiply}
            return np.asarray(
                ufunc[name](np.asarray(a, dtype=object), np.asarray(b, dtype=object)),
                dtype=object,
            )
        a = a if a.dtype == object else mp_array(self.ctx, a)
        b = b if b.dtype == object else b.astype(object) if name == "pow" else mp_array(self.ctx, b)
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

    # -- reductions ----------------------------------------------------------------
    def _r_reduce_sum(self, eqn: Any, invals: list[Any]) -> Any:
        axes = tuple(eqn.params["axes"])
        x = np.asarray(invals[0], dtype=object)
        return fold(x, axes, lambda a, b: a + b, self.ctx.mpf(0))

    def _r_reduce_prod(self, eqn: Any, invals: list[Any]) -> Any:
        x = np.asarray(invals[0], dtype=object)
        return fold(x, tuple(eqn.params["axes"]), lambda a, b: a * b, self.ctx.mpf(1))

    def _r_reduce_max(self, eqn: Any, invals: list[Any]) -> Any:
        x = np.asarray(invals[0], dtype=object)
        return fold(x, tuple(eqn.params["axes"]), self.binary["max"], -self.ctx.inf)

    def _r_reduce_min(self, eqn: Any, invals: list[Any]) -> Any:
        x = np.asarray(invals[0], dtype=object)
        return fold(x, tuple(eqn.params["axes"]), self.binary["min"], self.ctx.inf)

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
        return cumulative(np.asarray(invals[0], dtype=object), axis, op, reverse)

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
        arrs = [np.asarray(v) for v in invals]
        order = sort_permutation(self.ctx, arrs[:nk], dim)
        return [np.take_along_axis(a, order, axis=dim) for a in arrs]

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
        x = np.transpose(np.asarray(invals[0], dtype=object), lhs_spec)  # N C *S
        w = np.transpose(np.asarray(invals[1], dtype=object), rhs_spec)  # O I *K
        nsp = x.ndim - 2
        out = convolve(
            x,
            w,
            strides=tuple(p["window_strides"]),
            padding=list(p["padding"]),
            lhs_dilation=tuple(p.get("lhs_dilation") or (1,) * nsp),
            rhs_dilation=tuple(p.get("rhs_dilation") or (1,) * nsp),
            groups=int(p.get("feature_group_count", 1)),
            out_spatial=[eqn.outvars[0].aval.shape[i] for i in out_spec[2:]],
            zero=self.ctx.mpf(0),
        )  # N O *Sout
        return np.transpose(out, np.argsort(out_spec))

    def _window(self, eqn: Any, invals: list[Any], op: Callable, init: Any) -> Any:
        p = eqn.params
        x = np.asarray(invals[0], dtype=object)
        nd = x.ndim
        base = tuple(p.get("base_dilation") or (1,) * nd)
        wdil = tuple(p.get("window_dilation") or (1,) * nd)
        x = dilate_pad(x, base, list(p["padding"]), init)
        out_shape = eqn.outvars[0].aval.shape
        return reduce_windows(x, p["window_dimensions"], p["window_strides"], wdil, out_shape, op)

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


_JAX_KINKS: dict[str, Callable[[list[Any]], bool]] = {
    **dict.fromkeys(
        ("max", "min", "eq", "ne", "gt", "ge", "lt", "le"), lambda a: len(a) == 2 and tie(*a)
    ),  # fmt: skip
    # abs, sign and roots at 0; a fractional power at a base of 0
    **dict.fromkeys(("abs", "sign", "sqrt", "rsqrt", "cbrt"), lambda a: at_zero(a[0])),
    "pow": lambda a: power_at_zero(a[0], a[1]),
    **dict.fromkeys(
        (
            "reduce_max",
            "reduce_min",
            "argmax",
            "argmin",
            "cummax",
            "cummin",
            "sort",
            "reduce_window_max",
            "reduce_window_min",
            "scatter-max",
            "scatter-min",
            "scatter_max",
            "scatter_min",
        ),
        lambda a: repeated(a[0]),
    ),  # fmt: skip
    **dict.fromkeys(("floor", "ceil"), lambda a: at_integer(a[0])),
    "round": lambda a: at_integer(a[0], 0.5),
    "clamp": lambda a: at_values(a[1], a[0], a[2]),  # (lo, x, hi)
    "rem": lambda a: at_integer(np.asarray(a[0], dtype=object) / a[1]),  # jumps at x / y whole
}
"""Tests of the primitives with kinks (see :mod:`.kinks`), on their arguments."""

KINKED_PRIMITIVES = frozenset(_JAX_KINKS)
"""Primitives with kinks; every other primitive is differentiable wherever its value is
finite."""


def _kink_test(eqn: Any, invals: list[Any]) -> Callable[[], bool] | None:
    """Whether the equation's primitive sits at its kink at ``invals`` (a deferred test),
    or None for a primitive without kinks or without floating operands."""
    test = _JAX_KINKS.get(eqn.primitive.name)
    if test is None:
        return None
    if not any(_is_float(d) for d in (_aval_dtype(v.aval) for v in eqn.invars) if d is not None):
        return None  # integer index arithmetic: exact, no derivative
    return lambda: test(invals)


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
        :func:`polygrad.mpexec.context.make_context`.

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
    from .context import make_context

    interpreters: dict[int, _Interpreter] = {}
    # index maps are pure functions of shapes and integer values: shared by all precisions
    index_cache: dict[Any, Any] = {}

    def evaluate(x0: np.ndarray, dx: np.ndarray, dps: int) -> np.ndarray:
        ip = interpreters.get(dps)
        if ip is None:
            ip = interpreters[dps] = _Interpreter(make_context(dps))
            ip._index_cache = index_cache
        ctx = ip.ctx
        leaves = leaves_at(ctx, x0, dx, shapes)
        outs = ip.run(closed_jaxpr, leaves)
        parts = [mp_array(ctx, o).ravel() for o in outs]
        return np.concatenate(parts) if parts else np.empty(0, dtype=object)

    return evaluate


def build_evaluate_mp(
    fn: Callable[..., Sequence[Any]],
    leaves: Sequence[Any],
    dtypes: Sequence[Any] | None = None,
    x64: bool = True,
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
    x64 : bool
        Trace under ``jax.enable_x64`` (the default); False traces in the caller's
        own mode, with its constants as ``fn`` computes with them there.

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
        with jax.enable_x64(True) if x64 else contextlib.nullcontext():
            avals = [jax.ShapeDtypeStruct(s, d) for s, d in zip(shapes, dtypes, strict=True)]
            closed = jax.make_jaxpr(lambda *a: list(fn(*a)))(*avals)
    except Exception as exc:  # noqa: BLE001 - untraceable (NumPy inside...): no mp reference
        return None, f"f could not be traced to a jaxpr ({type(exc).__name__}: {exc})"
    bad = unsupported_primitives(closed)
    if bad:
        return None, "; ".join(str(b) for b in bad[:3])
    return jaxpr_mp_evaluator(closed, shapes), None
