"""Run a captured PyTorch ATen graph on quad arrays, every evaluation point in one pass.

The quad tier of the reference (:mod:`polygrad.reference.quad`) evaluates ``f`` at all
``4 d + 1`` points of a check at once on IEEE binary128 arrays (numpy-quaddtype). The
graph is the one the mp reference runs (:class:`~polygrad.mpexec.torch_graph.GraphProgram`,
captured once with ``make_fx``); here every value carries a leading axis of the points
(of length 1 for the graph's constants), so an ``addmm`` is one quad ``matmul`` over all
points where the mp reference multiplies mpmath numbers one at a time. The traced
output of each node (``val``) gives the per-point shape of the shape operators.

Covered operators: the arithmetic and transcendental functions numpy-quaddtype 1.0
computes (SLEEF, 1 ULP), comparisons, ``where``, ``clamp``, ``relu``, the shape and
indexing operators, ``mm addmm bmm mv dot``, sums, means, maxima, ``prod``,
``logsumexp``, ``_softmax``, ``_log_softmax``, ``mse_loss`` and ``nll_loss_forward``
(without class weights), and creation operators (their traced values). A graph with
anything else, or with an in-place write, raises :class:`NoQuadRuleError` when the
evaluator is built, and the check's reference goes on to mpmath.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .quad_ops import NoQuadRuleError, logsumexp, matmul_each, point_leaves, rsqrt, sigmoid

__all__ = ["quad_graph_evaluator"]


Rule = Callable[["_Q", dict[str, Any], Any], Any]
RULES: dict[str, Rule] = {}


def _rule(*names: str) -> Callable[[Rule], Rule]:
    def deco(fn: Rule) -> Rule:
        for name in names:
            RULES[f"aten.{name}"] = fn
        return fn

    return deco


class _Q:
    """The quad dtype, the operator being run (``"aten.add.Tensor"``) and the conversion of
    floating operands."""

    def __init__(self, q: Any) -> None:
        self.q = q
        self.op = ""

    def F(self, v: Any) -> Any:
        """A floating operand as quad: arrays keep their leading axis, scalars stay 0-d."""
        a = np.asarray(v)
        return a if a.dtype == self.q else a.astype(self.q)


def _rank(val: Any) -> int:
    return len(tuple(val.shape))


def _align(v: Any, rank: int) -> Any:
    """A batched array with per-point axes padded on the left to ``rank`` (broadcasting as
    PyTorch does per point); scalars as they are."""
    if not isinstance(v, np.ndarray) or v.ndim == 0:
        return v
    pad = rank - (v.ndim - 1)
    return v.reshape((v.shape[0],) + (1,) * pad + v.shape[1:]) if pad > 0 else v


def _axis(dim: Any, rank: int) -> int:
    """A per-point dim as an axis of the batched array."""
    return int(dim) % max(rank, 1) + 1


def _axes(dims: Any, rank: int) -> tuple[int, ...]:
    if dims is None or (not isinstance(dims, int) and len(dims) == 0):
        return tuple(range(1, rank + 1))
    dims = [dims] if isinstance(dims, int) else list(dims)
    return tuple(_axis(d, rank) for d in dims)


# -- elementwise --------------------------------------------------------------------
UNARY: dict[str, Callable[[Any], Any]] = {
    "neg": np.negative, "abs": np.abs, "exp": np.exp, "exp2": np.exp2, "expm1": np.expm1,
    "log": np.log, "log1p": np.log1p, "log2": np.log2, "log10": np.log10, "sqrt": np.sqrt,
    "rsqrt": rsqrt, "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin,
    "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh,
    "tanh": np.tanh, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
    "sigmoid": sigmoid, "reciprocal": lambda x: 1 / x, "floor": np.floor, "ceil": np.ceil,
    "trunc": np.trunc, "round": np.rint, "sign": np.sign, "sgn": np.sign,
    "relu": lambda x: np.where(x > 0, x, 0 * x), "silu": lambda x: x * sigmoid(x),
    "square": np.square,
}  # fmt: skip
BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "mul": np.multiply, "div": np.divide, "maximum": np.maximum, "minimum": np.minimum,
    "atan2": np.arctan2, "gt": np.greater, "ge": np.greater_equal, "lt": np.less,
    "le": np.less_equal, "eq": np.equal, "ne": np.not_equal,
}  # fmt: skip


def _unary(fn: Callable[[Any], Any]) -> Rule:
    return lambda Q, a, val: fn(Q.F(a["self"]))


def _binary(fn: Callable[[Any, Any], Any]) -> Rule:
    def rule(Q: _Q, a: dict[str, Any], val: Any) -> Any:
        r = _rank(val)
        x, y = _align(a["self"], r), _align(a["other"], r)
        floats = any(isinstance(v, float) or getattr(v, "dtype", None) == Q.q for v in (x, y))
        return fn(Q.F(x), Q.F(y)) if floats else fn(np.asarray(x), np.asarray(y))

    return rule


for _n, _fu in UNARY.items():
    RULES[f"aten.{_n}.default"] = _unary(_fu)
for _n, _fb in BINARY.items():
    for _ov in ("Tensor", "Scalar", "default"):
        RULES[f"aten.{_n}.{_ov}"] = _binary(_fb)
RULES["aten.arctan2.default"] = RULES["aten.atan2.default"]


@_rule("add.Tensor", "add.Scalar", "sub.Tensor", "sub.Scalar", "rsub.Scalar", "rsub.Tensor")
def _add(Q: _Q, a: dict[str, Any], val: Any) -> Any:
    r = _rank(val)
    x, y = Q.F(_align(a["self"], r)), Q.F(_align(a["other"], r))
    alpha = a.get("alpha", 1)
    y = y if alpha == 1 else y * Q.F(float(alpha))
    if Q.op.startswith("aten.add"):
        return x + y
    return x - y if Q.op.startswith("aten.sub") else y - x


@_rule("pow.Tensor_Scalar")
def _pow_scalar(Q: _Q, a: dict[str, Any], val: Any) -> Any:
    x, e = Q.F(a["self"]), a["exponent"]
    if float(e) == int(e) and abs(int(e)) <= 64:  # repeated multiplication: exact signs
        n, out, base = int(e), np.ones_like(x), x
        for bit in bin(abs(n))[:1:-1]:
            out = out * base if bit == "1" else out
            base = base * base
        return out if n >= 0 else 1 / out
    return np.power(x, Q.F(float(e)))


@_rule("pow.Tensor_Tensor")
def _pow_tensor(Q: _Q, a: dict[str, Any], val: Any) -> Any:
    r = _rank(val)
    return np.power(Q.F(_align(a["self"], r)), Q.F(_align(a["exponent"], r)))


@_rule("where.self", "where.ScalarOther", "where.ScalarSelf", "where.Scalar")
def _where(Q: _Q, a: dict[str, Any], val: Any) -> Any:
    r = _rank(val)
    c = _align(a["condition"], r)
    return np.where(c, Q.F(_align(a["self"], r)), Q.F(_align(a["other"], r)))


@_rule("clamp.default", "clamp.Tensor", "clamp_min.default", "clamp_max.default",
       "clamp_min.Tensor", "clamp_max.Tensor")  # fmt: skip
def _clamp(Q: _Q, a: dict[str, Any], val: Any) -> Any:
    r = _rank(val)
    x = Q.F(a["self"])
    lo, hi = a.get("min"), a.get("max")
    if lo is not None:
        x = np.maximum(x, Q.F(_align(lo, r)))
    if hi is not None:
        x = np.minimum(x, Q.F(_align(hi, r)))
    return x


@_rule("masked_fill.Scalar", "masked_fill.Tensor")
def _masked_fill(Q: _Q, a: dict[str, Any], val: Any) -> Any:
    r = _rank(val)
    return np.where(_align(a["mask"], r), Q.F(_align(a["value"], r)), Q.F(a["self"]))


@_rule("logical_not.default")
def _logical_not(Q: _Q, a: dict[str, Any], val: Any) -> Any:
    return np.logical_not(a["self"])


@_rule("bitwise_not.default", "logical_and.default", "logical_or.default", "logical_xor.default",
       "bitwise_and.Tensor", "bitwise_or.Tensor")  # fmt: skip
def _logical(Q: _Q, a: dict[str, Any], val: Any) -> Any:
    """Boolean masks (``~mask``, ``mask & other``); integer bit operations exactly."""
    name = Q.op.split(".")[1]
    if name == "bitwise_not":
        x = np.asarray(a["self"])
        return np.logical_not(x) if x.dtype == bool else np.invert(x)
    r = _rank(val)
    x, y = np.asarray(_align(a["self"], r)), np.asarray(_align(a["other"], r))
    fn = {"logical_and": np.logical_and, "logical_or": np.logical_or,
          "logical_xor": np.logical_xor, "bitwise_and": np.bitwise_and,
          "bitwise_or": np.bitwise_or}[name]  # fmt: skip
    return fn(x, y)


@_rule("softplus.default")
def _softplus(Q: _Q, a: dict[str, Any], val: Any) -> Any:
    """PyTorch's softplus: ``log1p(exp(beta x)) / beta``, and ``x`` itself where
    ``beta x > threshold``."""
    x = Q.F(a["self"])
    beta, threshold = Q.F(float(a.get("beta", 1))), float(a.get("threshold", 20))
    bx = beta * x
    soft = (np.maximum(bx, 0 * bx) + np.log1p(np.exp(-np.abs(bx)))) / beta
    return np.where(bx > Q.F(threshold), x, soft)


@_rule("gelu.default")
def _gelu(Q: _Q, a: dict[str, Any], val: Any) -> Any:
    """The tanh approximation only (the exact GELU needs erf, which quad lacks)."""
    if a.get("approximate", "none") != "tanh":
        raise NoQuadRuleError("aten.gelu (exact: erf has no quad loop)")
    x = Q.F(a["self"])
    c = np.sqrt(Q.F(2.0) / np.arccos(Q.F(-1.0)))  # sqrt(2 / pi) to quad precision
    return Q.F(0.5) * x * (1 + np.tanh(c * (x + Q.F(0.044715) * x * x * x)))


@_rule("leaky_relu.default")
def _leaky_relu(Q: _Q, a: dict[str, Any], val: Any) -> Any:
    x = Q.F(a["self"])
    return np.where(x > 0, x, x * Q.F(float(a.get("negative_slope", 0.01))))


@_rule("elu.default")
def _elu(Q: _Q, a: dict[str, Any], val: Any) -> Any:
    x = Q.F(a["self"])
    alpha, scale = Q.F(float(a.get("alpha", 1))), Q.F(float(a.get("scale", 1)))
    input_scale = Q.F(float(a.get("input_scale", 1)))
    return scale * np.where(x > 0, x, alpha * np.expm1(x * input_scale))


@_rule("hardtanh.default")
def _hardtanh(Q: _Q, a: dict[str, Any], val: Any) -> Any:
    x = Q.F(a["self"])
    lo, hi = Q.F(float(a.get("min_val", -1))), Q.F(float(a.get("max_val", 1)))
    return np.minimum(np.maximum(x, lo), hi)


@_rule("logit.default")
def _logit(Q: _Q, a: dict[str, Any], val: Any) -> Any:
    x = Q.F(a["self"])
    if a.get("eps") is not None:
        e = Q.F(float(a["eps"]))
        x = np.minimum(np.maximum(x, e), 1 - e)
    return np.log(x / (1 - x))


@_rule("native_layer_norm.default")
def _layer_norm(Q: _Q, a: dict[str, Any], val: Any) -> Any:
    """``(out, mean, rstd)`` over the trailing ``normalized_shape`` dims (biased
    variance, as PyTorch)."""
    x = Q.F(a["input"])
    k = len(a["normalized_shape"])
    axes = tuple(range(x.ndim - k, x.ndim))
    count = Q.F(float(np.prod([x.shape[i] for i in axes])))
    mean = np.sum(x, axis=axes, keepdims=True) / count
    d = x - mean
    rstd = 1 / np.sqrt(np.sum(d * d, axis=axes, keepdims=True) / count + Q.F(float(a["eps"])))
    out = d * rstd
    if a.get("weight") is not None:
        out = out * Q.F(_align(a["weight"], x.ndim - 1))
    if a.get("bias") is not None:
        out = out + Q.F(_align(a["bias"], x.ndim - 1))
    return (out, mean, rstd)


@_rule("split.Tensor", "split_with_sizes.default", "unbind.int")
def _split(Q: _Q, a: dict[str, Any], val: Any) -> Any:
    x = a["self"]
    ax = _axis(a.get("dim", 0), x.ndim - 1)
    if Q.op.startswith("aten.unbind"):
        return [np.take(x, i, axis=ax) for i in range(x.shape[ax])]
    size: Any = a.get("split_size", a.get("split_sizes"))
    sizes = [int(s) for s in size] if isinstance(size, (list, tuple)) else None
    if sizes is None:
        step = int(size)
        sizes = [min(step, x.shape[ax] - i) for i in range(0, x.shape[ax], step)]
    return np.split(x, np.cumsum(sizes)[:-1], axis=ax)


# -- shapes and indexing ----------------------------------------------------------------
def _reshaped(Q: _Q, a: dict[str, Any], val: Any) -> Any:
    x = a["self"]
    return np.reshape(x, (x.shape[0], *tuple(val.shape)))


for _n in ("view.default", "_unsafe_view.default", "reshape.default", "unsqueeze.default",
           "squeeze.dim", "squeeze.dims", "squeeze.default", "flatten.using_ints",
           "view_as.default"):  # fmt: skip
    RULES[f"aten.{_n}"] = _reshaped


@_rule("expand.default", "expand_as.default")
def _expand(Q: _Q, a: dict[str, Any], val: Any) -> Any:
    x = _align(a["self"], _rank(val))
    return np.broadcast_to(x, (x.shape[0], *tuple(val.shape)))


@_rule("flip.default")
def _flip(Q: _Q, a: dict[str, Any], val: Any) -> Any:
    x = a["self"]
    return np.flip(x, axis=_axes(a["dims"], x.ndim - 1))


@_rule("t.default", "numpy_T.default")
def _t(Q: _Q, a: dict[str, Any], val: Any) -> Any:
    x = a["self"]
    return np.swapaxes(x, 1, 2) if x.ndim == 3 else x


@_rule("transpose.int")
def _transpose(Q: _Q, a: dict[str, Any], val: Any) -> Any:
    r = _rank(val)
    return np.swapaxes(a["self"], _axis(a["dim0"], r), _axis(a["dim1"], r))


@_rule("permute.default")
def _permute(Q: _Q, a: dict[str, Any], val: Any) -> Any:
    r = _rank(val)
    return np.transpose(a["self"], (0, *(_axis(d, r) for d in a["dims"])))


@_rule("clone.default", "detach.default", "alias.default", "lift_fresh_copy.default",
       "contiguous.default", "_to_copy.default", "to.dtype",
       "_to_dim_order_copy.default")  # fmt: skip
def _same(Q: _Q, a: dict[str, Any], val: Any) -> Any:
    return a["self"]  # the traced dtype is applied after every node (see _settle)


@_rule("select.int")
def _select(Q: _Q, a: dict[str, Any], val: Any) -> Any:
    x = a["self"]
    return np.take(x, int(a["index"]), axis=_axis(a["dim"], x.ndim - 1))


@_rule("slice.Tensor")
def _slice(Q: _Q, a: dict[str, Any], val: Any) -> Any:
    x = a["self"]
    ax = _axis(a.get("dim", 0), x.ndim - 1)
    index = [slice(None)] * x.ndim
    index[ax] = slice(a.get("start"), a.get("end"), a.get("step", 1))
    return x[tuple(index)]


@_rule("cat.default", "stack.default")
def _cat(Q: _Q, a: dict[str, Any], val: Any) -> Any:
    parts = list(a["tensors"])
    floats = any(getattr(p, "dtype", None) == Q.q for p in parts)
    parts = [Q.F(p) if floats else p for p in parts]
    lead = max(p.shape[0] for p in parts)
    parts = [np.broadcast_to(p, (lead, *p.shape[1:])) for p in parts]
    r = _rank(val) - (1 if Q.op.startswith("aten.stack") else 0)
    ax = _axis(a.get("dim", 0), r)
    return (np.stack if Q.op.startswith("aten.stack") else np.concatenate)(parts, axis=ax)


@_rule("index.Tensor")
def _index(Q: _Q, a: dict[str, Any], val: Any) -> Any:
    x, given = a["self"], [i for i in a["indices"] if i is not None]
    if any(np.asarray(i).dtype == bool for i in given):
        raise NoQuadRuleError("aten.index.Tensor with a boolean mask")
    if all(np.shape(i)[0] == 1 for i in given):  # the same indices at every point
        return x[(slice(None), *(slice(None) if i is None else i[0] for i in a["indices"]))]
    lead = max(x.shape[0], *(np.shape(i)[0] for i in given))
    x = np.broadcast_to(x, (lead, *x.shape[1:]))
    pick = [[slice(None) if i is None else i[min(b, i.shape[0] - 1)] for i in a["indices"]]
            for b in range(lead)]  # fmt: skip
    return np.stack([x[b][tuple(pick[b])] for b in range(lead)])


# -- reductions and products -----------------------------------------------------------
@_rule("sum.default", "sum.dim_IntList", "mean.default", "mean.dim", "prod.default")
def _sum(Q: _Q, a: dict[str, Any], val: Any) -> Any:
    x = Q.F(a["self"])
    axes = _axes(a.get("dim"), x.ndim - 1)
    keep = bool(a.get("keepdim", False))
    if Q.op.startswith("aten.prod"):
        return np.prod(x, axis=axes, keepdims=keep)
    out = np.sum(x, axis=axes, keepdims=keep)
    if Q.op.startswith("aten.mean"):
        out = out / Q.F(float(np.prod([x.shape[i] for i in axes])))
    return out


@_rule("amax.default", "amin.default", "max.default", "min.default")
def _amax(Q: _Q, a: dict[str, Any], val: Any) -> Any:
    x = Q.F(a["self"])
    axes = _axes(a.get("dim"), x.ndim - 1)
    fn = np.max if "max" in Q.op else np.min
    return fn(x, axis=axes, keepdims=bool(a.get("keepdim", False)))


@_rule("argmax.default", "argmin.default")
def _argmax(Q: _Q, a: dict[str, Any], val: Any) -> Any:
    x = Q.F(a["self"])
    fn = np.argmax if "argmax" in Q.op else np.argmin
    if a.get("dim") is None:
        out = fn(x.reshape(x.shape[0], -1), axis=1)
        return out.reshape((x.shape[0],) + (1,) * (x.ndim - 1)) if a.get("keepdim") else out
    ax = _axis(a["dim"], x.ndim - 1)
    out = fn(x, axis=ax)
    return np.expand_dims(out, ax) if a.get("keepdim", False) else out


@_rule("logsumexp.default")
def _logsumexp(Q: _Q, a: dict[str, Any], val: Any) -> Any:
    x = Q.F(a["self"])
    axes = _axes(a["dim"], x.ndim - 1)
    if len(axes) != 1:
        raise NoQuadRuleError("aten.logsumexp over several dims")
    out = logsumexp(x, axes[0])
    return out if a.get("keepdim", False) else np.squeeze(out, axis=axes[0])


@_rule("_log_softmax.default", "_softmax.default", "_safe_softmax.default")
def _softmax(Q: _Q, a: dict[str, Any], val: Any) -> Any:
    x = Q.F(a["self"])
    ax = _axis(a["dim"], x.ndim - 1)
    log_p = x - logsumexp(x, ax)
    return log_p if "log" in Q.op else np.exp(log_p)


def _reduced(values: Any, reduction: int, count: Any) -> Any:
    axes = tuple(range(1, values.ndim))
    if reduction == 0:
        return values
    total = np.sum(values, axis=axes)
    return total if reduction == 2 else total / count


@_rule("mse_loss.default")
def _mse(Q: _Q, a: dict[str, Any], val: Any) -> Any:
    x, t = Q.F(a["self"]), Q.F(a["target"])
    d = x - _align(t, x.ndim - 1)
    sq = d * d
    return _reduced(sq, int(a.get("reduction", 1)), Q.F(float(np.prod(sq.shape[1:]))))


@_rule("nll_loss_forward.default")
def _nll(Q: _Q, a: dict[str, Any], val: Any) -> Any:
    if a.get("weight") is not None:
        raise NoQuadRuleError("aten.nll_loss_forward with class weights")
    x, t = Q.F(a["self"]), np.asarray(a["target"])
    ignore, reduction = int(a.get("ignore_index", -100)), int(a.get("reduction", 1))
    x = x if x.ndim == 3 else x[:, None, :]  # (B, N, C)
    t = np.broadcast_to(t.reshape(t.shape[0], -1), (x.shape[0], x.shape[1]))
    keep = t != ignore
    picked = np.take_along_axis(x, np.where(keep, t, 0)[..., None], axis=2)[..., 0]
    losses = np.where(keep, -picked, 0 * picked)
    count = Q.F(np.sum(keep, axis=1).astype(np.float64))
    out = _reduced(losses, reduction, count)
    if reduction == 0 and np.asarray(a["self"]).ndim == 2:
        out = out[:, 0]
    return (out, count)


def _matmul(Q: _Q, x: Any, y: Any) -> Any:
    """``x @ y`` per point, ``x`` ``(Lx, M, K)`` and ``y`` ``(Ly, K, N)``: 2-D quad
    products of contiguous operands (numpy-quaddtype 1.0's ``matmul`` ignores strides and
    fills only the first matrix of a stack)."""
    x, y = Q.F(x), Q.F(y)
    if y.shape[0] == 1:  # a weight: the points' rows stacked into one product
        L, M = x.shape[0], x.shape[1]
        out = np.matmul(np.ascontiguousarray(x.reshape(L * M, -1)), np.ascontiguousarray(y[0]))
        return out.reshape(L, M, -1)
    if x.shape[0] == 1:  # (y^T x^T)^T
        L, N = y.shape[0], y.shape[2]
        yt = np.ascontiguousarray(np.swapaxes(y, 1, 2).reshape(L * N, -1))
        out = np.matmul(yt, np.ascontiguousarray(x[0].T))
        return np.swapaxes(out.reshape(L, N, -1), 1, 2)
    return matmul_each(x, y)


@_rule("mm.default")
def _mm(Q: _Q, a: dict[str, Any], val: Any) -> Any:
    return _matmul(Q, a["self"], a["mat2"])


@_rule("addmm.default")
def _addmm(Q: _Q, a: dict[str, Any], val: Any) -> Any:
    prod = _matmul(Q, a["mat1"], a["mat2"])
    beta, alpha = float(a.get("beta", 1)), float(a.get("alpha", 1))
    prod = prod if alpha == 1 else prod * Q.F(alpha)
    bias = Q.F(_align(a["self"], 2))
    return prod + (bias if beta == 1 else bias * Q.F(beta))


@_rule("mv.default")
def _mv(Q: _Q, a: dict[str, Any], val: Any) -> Any:
    v = a["vec"]
    return _matmul(Q, a["self"], v[:, :, None])[:, :, 0]


@_rule("dot.default")
def _dot(Q: _Q, a: dict[str, Any], val: Any) -> Any:
    return np.sum(Q.F(a["self"]) * Q.F(a["tensor"]), axis=1)


@_rule("bmm.default")
def _bmm(Q: _Q, a: dict[str, Any], val: Any) -> Any:
    x, y = Q.F(a["self"]), Q.F(a["mat2"])
    lead = max(x.shape[0], y.shape[0])
    x, y = np.broadcast_to(x, (lead, *x.shape[1:])), np.broadcast_to(y, (lead, *y.shape[1:]))
    return np.stack([_matmul(Q, x[:, k], y[:, k]) for k in range(x.shape[1])], axis=1)


CREATION = frozenset({"ones", "zeros", "full", "scalar_tensor", "arange", "eye", "linspace"})
"""Operators of no tensor: their value, the same at every point, is computed once in
PyTorch."""


def _created(op: str, bound: dict[str, Any]) -> np.ndarray:
    """The value of a creation operator (``"aten.ones.default"``), as a constant."""
    import torch

    _, name, overload = op.split(".")
    value = getattr(getattr(torch.ops.aten, name), overload)(**bound)
    value = value.to(torch.float64) if value.is_floating_point() else value
    return value.numpy()[None]


class QuadGraph:
    """A :class:`~polygrad.mpexec.torch_graph.GraphProgram` run on batched quad arrays.

    Raises
    ------
    NoQuadRuleError
        The graph writes in place, or holds an operator without a quad rule.
    """

    def __init__(self, program: Any, q: Any) -> None:
        import torch

        self.program, self.Q, self._node = program, _Q(q), torch.fx.Node
        self.fixed: dict[str, Any] = {}
        self.rules: dict[str, Rule] = {}
        for step in program.steps:
            if step[0] == "const":
                t = program.constants.get(step[1])
                if t is not None:
                    self.fixed[step[1]] = self._settle(_constant(t), t)
            elif step[0] == "call":
                self._prepare(step)

    def _prepare(self, step: tuple[Any, ...]) -> None:
        """The rule of a call step (an in-place shape operator, ``squeeze_``, takes its
        operator's: its result replaces the tensor), or its value if it creates one."""
        _, name, op, _, bound, inplace, val, _, writes = step
        if inplace or writes:
            raise NoQuadRuleError(f"{op} writes in place")
        ns, base, overload = op.split(".")
        rule = RULES.get(op) or RULES.get(f"{ns}.{base.rstrip('_')}.{overload}")
        if rule is not None:
            self.rules[name] = rule
        elif base in CREATION:
            self.fixed[name] = self._settle(_created(op, bound), val)
        else:
            raise NoQuadRuleError(f"no quad rule for {op}")

    def run(self, leaves: list[np.ndarray]) -> Any:
        """The graph's output at the points (each leaf ``(B, *shape)``, quad)."""
        from .torch_graph import _look

        env: dict[str, Any] = {}
        for step in self.program.steps:
            kind, name = step[0], step[1]
            if kind == "input":
                env[name] = leaves[step[2]]
            elif name in self.fixed or kind == "const":
                env[name] = self.fixed.get(name)
            elif kind == "getitem":
                env[name] = env[step[2][0].name][step[2][1]]
            else:
                _, _, op, _, bound, _, val, _, _ = step
                self.Q.op = op
                args = {k: _look(env, v, self._node) for k, v in bound.items()}
                out = self.rules[name](self.Q, args, val)
                env[name] = self._settle(out, val)
        return _look(env, self.program.output, self._node)

    def _settle(self, out: Any, val: Any) -> Any:
        """``out`` in the traced dtype (quad for floats), checked against the traced shape."""
        if isinstance(val, (tuple, list)):
            return type(val)(self._settle(o, v) for o, v in zip(out, val, strict=True))
        if val is None or not hasattr(val, "dtype"):
            return out
        arr = np.asarray(out)
        if val.is_floating_point():
            arr = self.Q.F(arr)
        elif str(val.dtype) == "torch.bool":
            arr = arr.astype(bool)
        else:
            arr = np.trunc(arr).astype(np.int64) if arr.dtype == self.Q.q else arr.astype(np.int64)
        if arr.ndim == 0 or arr.shape[1:] != tuple(val.shape):
            raise RuntimeError(f"the quad rule of {self.Q.op} gave the wrong shape")
        return arr


def _constant(t: Any) -> np.ndarray:
    import torch

    t = t.detach().cpu()
    t = t.to(torch.float64) if t.is_floating_point() else t
    return t.numpy()[None]


def quad_graph_evaluator(program: Any, q: Any) -> Callable[[np.ndarray], np.ndarray]:
    """``evaluate_quad`` of :class:`~polygrad.backends.base.Target` from the graph the mp
    reference runs.

    Parameters
    ----------
    program : GraphProgram
        The captured graph (``evaluate_mp.program``): a function of the checked tensors
        whose output is one 1-D floating tensor.
    q : numpy dtype
        The quad dtype.

    Returns
    -------
    callable
        ``(B, n)`` quad array of points -> ``(B, m)`` quad array of the outputs.

    Raises
    ------
    NoQuadRuleError
        The graph cannot run on quad arrays (the message says why).
    """
    graph = QuadGraph(program, q)

    def evaluate(X: np.ndarray) -> np.ndarray:
        out = graph.Q.F(graph.run(point_leaves(X, program.shapes)))
        return np.broadcast_to(out, (X.shape[0], *out.shape[1:])).reshape(X.shape[0], -1)

    return evaluate
