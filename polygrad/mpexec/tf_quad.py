"""Run a TensorFlow function's captured float64 graph on quad arrays.

The quad tier of the reference (:mod:`polygrad.reference.quad`) evaluates ``f`` at all
``4 d + 1`` points of a check on IEEE binary128 arrays (numpy-quaddtype). The graph is
the frozen float64 ``GraphDef`` the mp reference runs
(:class:`~polygrad.mpexec.tf_graph.GraphProgram`); here each node runs on NumPy quad
arrays, one point after another (TensorFlow's shape arithmetic, ``Shape``, ``Reshape``,
``StridedSlice``, computes each point's shapes), so a ``MatMul`` is one quad
``matmul`` where the mp reference multiplies mpmath numbers one at a time.

Covered ops: the arithmetic and transcendental functions numpy-quaddtype 1.0 computes
(SLEEF, 1 ULP) under TensorFlow's names, with TensorFlow's conventions at zero
(``Xlogy``, ``DivNoNan``...); comparisons, ``Select``, ``ClipByValue``, the ReLU family,
``Softplus``; ``Sum Mean Prod Max Min ArgMax ArgMin``, ``Softmax LogSoftmax`` and both
softmax cross-entropies; ``MatMul`` and ``BatchMatMul``; and the data movement of the mp
interpreter, whose rules copy elements whatever their dtype. Anything else raises
:class:`NoQuadRuleError` when the evaluator is built, and the check's reference goes on
to mpmath.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .quad_ops import NoQuadRuleError, logsumexp, matmul_each, point_leaves, rsqrt, sigmoid
from .tf_graph import _FLOAT_TYPES, _IDENTITY, _INPUTS, _INTEGER, _MULTI, _axes, _Rules

__all__ = ["quad_tf_evaluator"]


def _where_zero(cond: Any, value: Any) -> Any:
    return np.where(cond, 0 * value, value)


def _softplus(x: Any) -> Any:
    return np.maximum(x, 0 * x) + np.log1p(np.exp(-np.abs(x)))


ELEMENTWISE: dict[str, Callable[..., Any]] = {
    "Neg": np.negative, "Abs": np.abs, "Sign": np.sign, "Exp": np.exp, "Expm1": np.expm1,
    "Log": np.log, "Log1p": np.log1p, "Sqrt": np.sqrt, "Rsqrt": rsqrt,
    "Sin": np.sin, "Cos": np.cos, "Tan": np.tan, "Asin": np.arcsin, "Acos": np.arccos,
    "Atan": np.arctan, "Sinh": np.sinh, "Cosh": np.cosh, "Tanh": np.tanh,
    "Asinh": np.arcsinh, "Acosh": np.arccosh, "Atanh": np.arctanh, "Sigmoid": sigmoid,
    "Square": np.square, "Floor": np.floor, "Ceil": np.ceil, "IsFinite": np.isfinite,
    "IsNan": np.isnan, "Round": np.rint, "Rint": np.rint, "Reciprocal": lambda x: 1 / x,
    "Inv": lambda x: 1 / x, "Softplus": _softplus, "Softsign": lambda x: x / (1 + np.abs(x)),
    "Relu": lambda x: np.where(x > 0, x, 0 * x),
    "Relu6": lambda x: np.minimum(np.where(x > 0, x, 0 * x), 6 + 0 * x),
    "Elu": lambda x: np.where(x > 0, x, np.expm1(x)),
    "Add": np.add, "AddV2": np.add, "Sub": np.subtract, "Mul": np.multiply,
    "RealDiv": np.divide, "Div": np.divide, "Pow": np.power, "Maximum": np.maximum,
    "Minimum": np.minimum, "Atan2": np.arctan2, "Greater": np.greater,
    "GreaterEqual": np.greater_equal, "Less": np.less, "LessEqual": np.less_equal,
    "Equal": np.equal, "NotEqual": np.not_equal,
    "SquaredDifference": lambda x, y: (x - y) * (x - y),
    "Xlogy": lambda x, y: _where_zero(x == 0, x * np.log(y)),
    "Xlog1py": lambda x, y: _where_zero(x == 0, x * np.log1p(y)),
    "Xdivy": lambda x, y: _where_zero(x == 0, x / y),
    "DivNoNan": lambda x, y: _where_zero(y == 0, x / np.where(y == 0, 1 + 0 * y, y)),
    "MulNoNan": lambda x, y: _where_zero(y == 0, x * np.where(y == 0, 0 * y, y)),
    "ClipByValue": lambda x, lo, hi: np.minimum(np.maximum(x, lo), hi),
}  # fmt: skip
"""TensorFlow's elementwise ops on quad arrays (TensorFlow's value at 0 where it has one)."""

MOVES = frozenset({
    "Reshape", "Transpose", "ExpandDims", "Squeeze", "ConcatV2", "Pack", "Unpack", "Split",
    "SplitV", "StridedSlice", "Slice", "Tile", "BroadcastTo", "GatherV2", "Fill", "Shape",
    "ShapeN", "Size", "Rank", "Select", "SelectV2", "All", "Any", "Pad", "PadV2",
    "ZerosLike", "OnesLike", "Range", "IdentityN", "Const", "LogicalAnd", "LogicalOr",
    "LogicalNot", "FloorDiv", "FloorMod", "ArgMax", "ArgMin",
})  # fmt: skip
"""Ops whose mp rules move elements, or compute on integers only: they run unchanged."""


class _QuadRules(_Rules):
    """The mp interpreter's rules with every floating computation on quad arrays."""

    def __init__(self, q: Any, consts: dict[str, Any]) -> None:
        self.q, self.consts, self.ctx = q, consts, None
        self.scalar = ELEMENTWISE  # routes these ops to _elementwise (see _Rules.apply)

    def _mp(self, a: Any) -> np.ndarray:
        a = np.asarray(a)
        return a if a.dtype == self.q else a.astype(self.q)

    def _is_quad(self, a: Any) -> bool:
        return bool(np.asarray(a).dtype == self.q)

    def _elementwise(self, op: str, args: list[Any]) -> Any:
        if op in _INTEGER and not any(self._is_quad(a) for a in args):
            return _INTEGER[op](*[np.asarray(a) for a in args])
        return ELEMENTWISE[op](*[self._mp(a) for a in args])

    def _r_AddN(self, node: Any, args: list[Any]) -> Any:
        out = self._mp(args[0])
        for a in args[1:]:
            out = out + self._mp(a)
        return out

    def _r_LeakyRelu(self, node: Any, args: list[Any]) -> Any:
        x = self._mp(args[0])
        return np.where(x > 0, x, x * self._mp(float(node.attr["alpha"].f)))

    def _r_Cast(self, node: Any, args: list[Any]) -> Any:
        x, dst = np.asarray(args[0]), node.attr["DstT"].type
        if dst in _FLOAT_TYPES:
            return self._mp(x)
        from tensorflow import as_dtype

        if self._is_quad(x):  # to an integer: truncated toward zero; to bool: != 0
            x = x != 0 if dst == 10 else np.trunc(np.where(np.isfinite(x), x, 0 * x))
        return np.asarray(x).astype(as_dtype(dst).as_numpy_dtype)

    def _r_BiasAdd(self, node: Any, args: list[Any]) -> Any:
        x, b = self._mp(args[0]), self._mp(args[1])
        if (node.attr["data_format"].s.decode() or "NHWC").startswith("NC") and x.ndim > 2:
            b = b.reshape((-1,) + (1,) * (x.ndim - 2))
        return x + b

    def _fold(self, node: Any, args: list[Any], fn: Callable[..., Any]) -> Any:
        x = np.asarray(args[0])
        x = x if x.dtype != object else self._mp(x)
        return fn(x, axis=_axes(args[1], x.ndim), keepdims=bool(node.attr["keep_dims"].b))

    def _r_Sum(self, node: Any, args: list[Any]) -> Any:
        return self._fold(node, args, np.sum)

    def _r_Prod(self, node: Any, args: list[Any]) -> Any:
        return self._fold(node, args, np.prod)

    def _r_Max(self, node: Any, args: list[Any]) -> Any:
        return self._fold(node, args, np.max)

    def _r_Min(self, node: Any, args: list[Any]) -> Any:
        return self._fold(node, args, np.min)

    def _r_Mean(self, node: Any, args: list[Any]) -> Any:
        x = np.asarray(args[0])
        if not self._is_quad(x):
            return super()._r_Mean(node, args)
        return self._r_Sum(node, args) / self._mp(float(self._count(x, args[1])))

    def _r_LogSoftmax(self, node: Any, args: list[Any]) -> Any:
        x = self._mp(args[0])
        return x - logsumexp(x, -1)

    def _r_Softmax(self, node: Any, args: list[Any]) -> Any:
        return np.exp(self._r_LogSoftmax(node, args))

    def _r_SoftmaxCrossEntropyWithLogits(self, node: Any, args: list[Any]) -> Any:
        logp, labels = self._r_LogSoftmax(node, args[:1]), self._mp(args[1])
        return [np.sum(-labels * logp, axis=-1), np.exp(logp) - labels]

    def _r_SparseSoftmaxCrossEntropyWithLogits(self, node: Any, args: list[Any]) -> Any:
        logits, labels = self._mp(args[0]), np.asarray(args[1])
        one_hot = (labels[:, None] == np.arange(logits.shape[-1])[None, :]).astype(np.float64)
        return self._r_SoftmaxCrossEntropyWithLogits(node, [logits, one_hot])

    def _r_Cumsum(self, node: Any, args: list[Any]) -> Any:
        raise NoQuadRuleError("no quad rule for Cumsum")

    _r_Cumprod = _r_Cumsum

    def _matmul(self, a: Any, b: Any, ta: bool, tb: bool) -> Any:
        a, b = self._mp(a), self._mp(b)
        a = np.swapaxes(a, -1, -2) if ta else a
        b = np.swapaxes(b, -1, -2) if tb else b
        lead = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        shape = lead + (a.shape[-2], b.shape[-1])
        if a.shape[-1] == 0:
            return np.zeros(shape).astype(self.q)
        A = np.broadcast_to(a, lead + a.shape[-2:]).reshape(-1, *a.shape[-2:])
        B = np.broadcast_to(b, lead + b.shape[-2:]).reshape(-1, *b.shape[-2:])
        return matmul_each(A, B).reshape(shape)


RULED = frozenset(
    name.removeprefix("_r_") for name in vars(_QuadRules) if name.startswith("_r_")
) | frozenset({"MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3"})
"""Ops with a quad rule of their own here."""


def quad_unsupported(program: Any) -> list[str]:
    """The op types of ``program`` (a :class:`~polygrad.mpexec.tf_graph.GraphProgram`)
    without a quad rule."""
    known = frozenset(ELEMENTWISE) | MOVES | RULED | _IDENTITY | _INPUTS
    return sorted({program.nodes[n].op for n in program.order} - known - {"Cumsum", "Cumprod"})


def quad_tf_evaluator(
    program: Any, shapes: list[tuple[int, ...]], q: Any
) -> Callable[[np.ndarray], np.ndarray]:
    """``evaluate_quad`` of :class:`~polygrad.backends.base.Target` from the graph the mp
    reference runs.

    Parameters
    ----------
    program : GraphProgram
        The captured float64 graph (``evaluate_mp.program``).
    shapes : list of tuple of int
        Shapes of the checked leaves, in the order of the flat input vector.
    q : numpy dtype
        The quad dtype.

    Returns
    -------
    callable
        ``(B, n)`` quad array of points -> ``(B, m)`` quad array of the flat outputs.

    Raises
    ------
    NoQuadRuleError
        The graph holds ops without a quad rule (named).
    """
    bad = quad_unsupported(program)
    if bad:
        raise NoQuadRuleError("no quad rule for " + ", ".join(bad[:5]))
    consts = {k: (v.astype(q) if v.dtype.kind == "f" else v) for k, v in program._consts.items()}
    rules = _QuadRules(q, consts)

    def point(leaves: list[np.ndarray]) -> np.ndarray:
        env = {name: [leaf] for (name, _), leaf in zip(program.inputs, leaves, strict=True)}
        for name in program.order:
            if name not in env:
                node = program.nodes[name]
                out = rules.apply(node, [env[n][k] for n, k in program._data_inputs(name)])
                env[name] = list(out) if node.op in _MULTI else [out]
        parts = [rules._mp(env[n][k]).ravel() for n, k in program.outputs]
        return np.concatenate(parts) if parts else np.empty(0, dtype=q)

    def evaluate(X: np.ndarray) -> np.ndarray:
        leaves = point_leaves(X, shapes)
        with np.errstate(all="ignore"):
            return np.stack([point([leaf[b] for leaf in leaves]) for b in range(X.shape[0])])

    return evaluate
