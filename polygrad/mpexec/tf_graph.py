"""Re-execute a TensorFlow function's captured graph on mpmath numbers, node by node.

The TensorFlow backend captures the user's function once as a frozen graph
(variables and captured tensors become constants, every floating dtype is
rewritten to float64: :mod:`polygrad.backends._tf_promote`). The float64
reference runs that graph in TensorFlow; :class:`GraphProgram` walks the
same ``GraphDef`` in topological order and evaluates every node on NumPy
object arrays of ``mpf`` of a private context
(:func:`polygrad.mpexec.context.make_context`), so the very program the user
wrote is evaluated at ``dps`` decimal digits.

Values
------
Floating values are object arrays of ``mpf``; integer and boolean values
(shapes, indices, masks, comparisons) stay NumPy arrays and are computed
exactly. Constants enter exactly: every binary float converts to ``mpf``
without rounding. A cast between floating dtypes is the identity (the mp
reference computes the mathematical function the code expresses, as in
:mod:`.jaxpr`); casts to integers truncate toward zero, to booleans test
``!= 0``. Control inputs (``^name``) are ordering constraints and are ignored.

Covered operations
------------------
The scalar functions are the ones the JAX interpreter uses
(:mod:`.jaxpr_rules`, :mod:`.elementwise`), under TensorFlow's op names, and
the folds are :func:`.reductions.fold`:

* inputs and constants: ``Placeholder _Arg Const Identity IdentityN
  StopGradient PreventGradient Snapshot EnsureShape CheckNumerics``;
* elementwise: ``Add AddV2 AddN Sub Mul RealDiv Div DivNoNan MulNoNan Neg
  Reciprocal Inv Square SquaredDifference Sqrt Rsqrt Exp Expm1 Log Log1p Sin
  Cos Tan Asin Acos Atan Atan2 Sinh Cosh Tanh Asinh Acosh Atanh Sigmoid
  Softplus Softsign Relu Relu6 Elu Selu LeakyRelu Erf Erfc Erfinv Lgamma
  Digamma Igamma Igammac Polygamma Zeta Pow Maximum Minimum ClipByValue Abs
  Sign Floor Ceil Round Rint FloorDiv FloorMod Xlogy Xdivy Xlog1py IsFinite
  IsNan``, comparisons ``Greater GreaterEqual Less LessEqual Equal
  NotEqual``, ``LogicalAnd LogicalOr LogicalNot Select SelectV2 Cast
  BiasAdd``;
* reductions: ``Sum Mean Prod Max Min All Any ArgMax ArgMin Cumsum Cumprod``,
  ``Softmax LogSoftmax SoftmaxCrossEntropyWithLogits
  SparseSoftmaxCrossEntropyWithLogits``;
* linear algebra: ``MatMul BatchMatMul BatchMatMulV2 BatchMatMulV3``;
* data movement: ``Reshape Transpose ExpandDims Squeeze ConcatV2 Pack Unpack
  Split SplitV StridedSlice Slice Tile Pad PadV2 BroadcastTo GatherV2 Fill
  ZerosLike OnesLike Range Shape ShapeN Size Rank``.

Anything else (control flow ``If``/``While``, function calls, convolutions,
random ops, complex numbers...) is found before anything runs and raises
:class:`~.errors.UnsupportedOperatorError` naming the op types; the check
then keeps its float64 reference and the report names them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .elementwise import real
from .errors import UnsupportedOperatorError
from .jaxpr_rules import _float_binary, _float_unary, _round, _trunc_int
from .kinks import (
    at_integer,
    at_values,
    at_zero,
    floating,
    is_recording,
    note_operation,
    power_at_zero,
    region_at_kink,
    repeated,
    tie,
)
from .reductions import cumulative, fold
from .values import leaves_at, mp_array

__all__ = ["GraphProgram", "supported_ops", "tf_mp_evaluator"]

# TensorFlow op -> name of the shared scalar function (jaxpr_rules tables)
_UNARY = {
    "Neg": "neg", "Abs": "abs", "Sign": "sign", "Exp": "exp", "Expm1": "expm1", "Log": "log",
    "Log1p": "log1p", "Sqrt": "sqrt", "Rsqrt": "rsqrt", "Sin": "sin", "Cos": "cos",
    "Tan": "tan", "Asin": "asin", "Acos": "acos", "Atan": "atan", "Sinh": "sinh",
    "Cosh": "cosh", "Tanh": "tanh", "Asinh": "asinh", "Acosh": "acosh", "Atanh": "atanh",
    "Sigmoid": "logistic", "Erf": "erf", "Erfc": "erfc", "Erfinv": "erf_inv",
    "Lgamma": "lgamma", "Digamma": "digamma", "Square": "square", "Floor": "floor",
    "Ceil": "ceil", "IsFinite": "is_finite",
}  # fmt: skip
_BINARY = {
    "Add": "add", "AddV2": "add", "Sub": "sub", "Mul": "mul", "RealDiv": "div", "Div": "div",
    "Pow": "pow", "Maximum": "max", "Minimum": "min", "Atan2": "atan2", "Greater": "gt",
    "GreaterEqual": "ge", "Less": "lt", "LessEqual": "le", "Equal": "eq", "NotEqual": "ne",
    "Igamma": "igamma", "Igammac": "igammac", "Polygamma": "polygamma", "Zeta": "zeta",
}  # fmt: skip
# the same ops on integers and booleans (shape and index arithmetic), exact in NumPy
_INTEGER: dict[str, Callable[..., Any]] = {
    "Add": np.add, "AddV2": np.add, "Sub": np.subtract, "Mul": np.multiply,
    "FloorDiv": np.floor_divide, "FloorMod": np.mod, "Maximum": np.maximum,
    "Minimum": np.minimum, "Neg": np.negative, "Abs": np.abs, "Sign": np.sign,
    "Square": np.square, "Greater": np.greater, "GreaterEqual": np.greater_equal,
    "Less": np.less, "LessEqual": np.less_equal, "Equal": np.equal,
    "NotEqual": np.not_equal, "LogicalAnd": np.logical_and, "LogicalOr": np.logical_or,
    "LogicalNot": np.logical_not,
}  # fmt: skip
_IDENTITY = {"Identity", "StopGradient", "PreventGradient", "Snapshot", "EnsureShape"}
_IDENTITY |= {"CheckNumerics"}
_INPUTS = {"Placeholder", "_Arg"}
_MULTI = {"IdentityN", "Split", "SplitV", "Unpack", "ShapeN", "SoftmaxCrossEntropyWithLogits"}
_MULTI |= {"SparseSoftmaxCrossEntropyWithLogits"}
_COMPLEX_TYPES = {8, 18}  # DT_COMPLEX64, DT_COMPLEX128
_FLOAT_TYPES = {1, 2, 14, 19}  # DT_FLOAT, DT_DOUBLE, DT_BFLOAT16, DT_HALF
_BOOL_TYPE = 10
_SELU = ("1.0507009873554804934193349852946", "1.6732632423543772848170429916717")


def _tf_functions(ctx: Any) -> dict[str, Callable[..., Any]]:
    """Scalar functions with TensorFlow's own conventions, on ``ctx.mpf``."""
    c = ctx
    zero, one = c.mpf(0), c.mpf(1)
    common_bin = _float_binary(c)
    vmax, vmin, div = common_bin["max"], common_bin["min"], common_bin["div"]
    log, log1p = _float_unary(c)["log"], _float_unary(c)["log1p"]
    scale, alpha = c.mpf(_SELU[0]), c.mpf(_SELU[1])

    def unless_zero(fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        return lambda x, y: zero if x == 0 else fn(x, y)  # TF: 0 when x == 0, even y NaN

    def floordiv(x: Any, y: Any) -> Any:
        q = div(x, y)
        return c.floor(q) if c.isfinite(q) else q

    return {
        "Softplus": real(c, lambda x: c.log1p(c.exp(x))),
        "Softsign": real(c, lambda x: x / (1 + abs(x))),
        "Relu": lambda x: vmax(x, zero),
        "Relu6": lambda x: vmin(vmax(x, zero), c.mpf(6)),
        "Elu": real(c, lambda x: x if x > 0 else c.expm1(x)),
        "Selu": real(c, lambda x: scale * (x if x > 0 else alpha * c.expm1(x))),
        "Reciprocal": lambda x: div(one, x),
        "Inv": lambda x: div(one, x),
        "IsNan": lambda x: bool(c.isnan(x)),
        "Round": lambda x: _round(c, x, 1),
        "Rint": lambda x: _round(c, x, 1),
        "Xlogy": unless_zero(lambda x, y: x * log(y)),
        "Xdivy": unless_zero(div),
        "Xlog1py": unless_zero(lambda x, y: x * log1p(y)),
        "SquaredDifference": lambda x, y: (x - y) * (x - y),
        "DivNoNan": lambda x, y: zero if y == 0 else x / y,
        "MulNoNan": lambda x, y: zero if y == 0 else x * y,
        "FloorDiv": real(c, floordiv),
        "FloorMod": real(c, lambda x, y: x - floordiv(x, y) * y),
        "ClipByValue": lambda x, lo, hi: vmin(vmax(x, lo), hi),
        **_gradient_ops(c),
    }


def _gradient_ops(c: Any) -> dict[str, Callable[..., Any]]:
    """The fused gradient ops of TensorFlow's own gradients (a VJP's graph), with their
    arguments in TensorFlow's order: ``(y, dy)`` of the op's output, or ``(gradients,
    features)`` of its input."""
    zero, one, half = c.mpf(0), c.mpf(1), c.mpf(0.5)
    scale, alpha = c.mpf(_SELU[0]), c.mpf(_SELU[1])
    return {
        "TanhGrad": lambda y, dy: dy * (one - y * y),
        "SigmoidGrad": lambda y, dy: dy * y * (one - y),
        "SqrtGrad": lambda y, dy: dy * half / y,
        "RsqrtGrad": lambda y, dy: -half * dy * y * y * y,
        "ReciprocalGrad": lambda y, dy: -dy * y * y,
        "InvGrad": lambda y, dy: -dy * y * y,
        "ReluGrad": lambda g, x: g if x > 0 else zero,
        "Relu6Grad": lambda g, x: g if 0 < x < 6 else zero,
        "EluGrad": lambda g, y: g if y > 0 else g * (y + one),
        "SeluGrad": lambda g, y: g * scale if y > 0 else g * (y + scale * alpha),
        "SoftplusGrad": real(c, lambda g, x: g / (one + c.exp(-x))),
        "SoftsignGrad": lambda g, x: g / ((one + abs(x)) * (one + abs(x))),
    }


def supported_ops() -> frozenset[str]:
    """The TensorFlow op types :class:`GraphProgram` evaluates.

    Returns
    -------
    frozenset of str
    """
    rules = {name[3:] for name in dir(_Rules) if name.startswith("_r_")}
    named = set(_UNARY) | set(_BINARY) | set(_INTEGER) | _IDENTITY | _INPUTS | {"IdentityN"}
    return frozenset(rules | named | set(_tf_functions(_probe_context())))


def _probe_context() -> Any:
    from .context import make_context

    return make_context(15)


def _tensor_name(ref: str) -> tuple[str, int]:
    """``"node:k"`` (or ``"node"``) as ``(node, k)``."""
    node, _, k = ref.partition(":")
    return node, int(k) if k else 0


def _masked(bits: int, i: int) -> bool:
    return bool((int(bits) >> i) & 1)


def _strided_index(begin: Any, end: Any, strides: Any, attr: Any) -> tuple[Any, ...]:
    """The NumPy index that ``StridedSlice`` with these masks selects."""
    index: list[Any] = []
    for i, (b, e, s) in enumerate(zip(begin, end, strides, strict=True)):
        if _masked(attr["ellipsis_mask"].i, i):
            index.append(Ellipsis)
        elif _masked(attr["new_axis_mask"].i, i):
            index.append(None)
        elif _masked(attr["shrink_axis_mask"].i, i):
            index.append(int(b))
        else:
            lo = None if _masked(attr["begin_mask"].i, i) else int(b)
            hi = None if _masked(attr["end_mask"].i, i) else int(e)
            index.append(slice(lo, hi, int(s)))
    return tuple(index)


def _axes(axis: Any, ndim: int) -> tuple[int, ...]:
    """Reduction axes (a scalar or a vector, possibly negative) as sorted non-negative ints."""
    return tuple(sorted({int(a) % max(ndim, 1) for a in np.ravel(axis)}))


@dataclass(frozen=True)
class _Region:
    """The operations of one ``tf.custom_gradient``: tensors ``(node, output)`` of its
    arguments and results, and the nodes between them in evaluation order."""

    args: tuple[tuple[str, int], ...]
    interior: tuple[str, ...]
    results: tuple[tuple[str, int], ...]


class GraphProgram:
    """A frozen float64 ``GraphDef`` that runs on object arrays of ``mpf``.

    Parameters
    ----------
    graph_def : tensorflow.GraphDef
        The captured program (variables frozen into constants).
    inputs, outputs : sequence of str
        Tensor names (``"node:0"``) of the checked leaves and of the outputs.

    Raises
    ------
    UnsupportedOperatorError
        An op that the outputs depend on has no rule, or the graph holds
        complex values; the message names the op types.
    """

    def __init__(self, graph_def: Any, inputs: Sequence[str], outputs: Sequence[str]) -> None:
        self.nodes = {node.name: node for node in graph_def.node}
        self.inputs = [_tensor_name(n) for n in inputs]
        self.outputs = [_tensor_name(n) for n in outputs]
        self.order = self._topological_order()
        self._check_coverage()
        self._consts = {n: self._const_value(n) for n in self.order if self.nodes[n].op == "Const"}
        self._mp_consts: dict[Any, dict[str, Any]] = {}

    # -- structure -----------------------------------------------------------------------
    def _data_inputs(self, name: str) -> list[tuple[str, int]]:
        return [_tensor_name(r) for r in self.nodes[name].input if not r.startswith("^")]

    def _topological_order(self) -> list[str]:
        """Nodes the outputs depend on (through data inputs), each after its inputs."""
        order: list[str] = []
        state: dict[str, int] = {}
        for root, _ in self.outputs:
            stack = [(root, False)]
            while stack:
                name, done = stack.pop()
                if done:
                    order.append(name)
                    state[name] = 2
                    continue
                if state.get(name):
                    continue
                state[name] = 1
                stack.append((name, True))
                stack += [(n, False) for n, _ in self._data_inputs(name) if not state.get(n)]
        return order

    def _check_coverage(self) -> None:
        known = supported_ops()
        missing = sorted({self.nodes[n].op for n in self.order} - known)
        complex_ = sorted(
            {
                self.nodes[n].op
                for n in self.order
                if any(v.type in _COMPLEX_TYPES for v in self.nodes[n].attr.values())
            }
        )
        if missing or complex_:
            parts = []
            if missing:
                names = ", ".join(map(repr, missing))
                parts.append(f"the TensorFlow ops {names} have no rule")
            if complex_:
                parts.append("complex values (in " + ", ".join(map(repr, complex_)) + ")")
            raise UnsupportedOperatorError(
                "the graph cannot be evaluated on mpmath numbers: " + "; ".join(parts)
            )

    def _const_value(self, name: str) -> np.ndarray:
        from tensorflow import make_ndarray

        return np.asarray(make_ndarray(self.nodes[name].attr["value"].tensor))

    # -- custom gradients ----------------------------------------------------------------
    @functools.cached_property
    def _regions(self) -> dict[str, _Region]:
        """The ``tf.custom_gradient`` regions, by the name of their ``IdentityN``."""
        return {
            name: self._region(name)
            for name in self.order
            if self.nodes[name].op == "IdentityN" and "_gradient_op_type" in self.nodes[name].attr
        }

    @functools.cached_property
    def _inside_regions(self) -> frozenset[str]:
        return frozenset(n for r in self._regions.values() for n in r.interior)

    def _ancestors(self, name: str) -> set[str]:
        """Nodes that ``name`` depends on through data inputs (itself included)."""
        seen, stack = set(), [name]
        while stack:
            n = stack.pop()
            if n not in seen:
                seen.add(n)
                stack += [m for m, _ in self._data_inputs(n)]
        return seen

    def _region(self, name: str) -> _Region:
        """A custom gradient's region from its ``IdentityN``, whose inputs are the
        function's results, then its arguments (and captured variables): the arguments
        are the inputs that others depend on; the results, those that depend on them;
        the interior, the operations between."""
        ins = self._data_inputs(name)
        up = {t: self._ancestors(t[0]) for t in ins}
        args = [t for t in ins if any(u != t and t[0] in up[u] for u in ins)]
        arg_nodes = {n for n, _ in args}
        results = [t for t in ins if t not in args and up[t] & arg_nodes]
        depends = set().union(*(up[t] for t in results)) - arg_nodes
        below = self._dependents(arg_nodes)
        interior = [n for n in self.order if n in depends and n in below]
        # only the arguments that vary with the checked inputs move (not frozen variables)
        varying = self._dependents({n for n, _ in self.inputs})
        args = [t for t in args if t[0] in varying]
        return _Region(tuple(args), tuple(interior), tuple(results))

    def _dependents(self, roots: set[str]) -> set[str]:
        """``roots`` and the nodes that depend on them, in one pass in evaluation order."""
        below = set(roots)
        for n in self.order:
            if any(m in below for m, _ in self._data_inputs(n)):
                below.add(n)
        return below

    def _region_outputs(
        self, rules: _Rules, region: _Region, env: dict[str, list[Any]], values: list[Any]
    ) -> np.ndarray:
        """The region's floating results (flattened) with its arguments at ``values``."""
        local: dict[str, list[Any]] = {}
        for (n, k), v in zip(region.args, values, strict=True):
            local.setdefault(n, list(env[n]))[k] = v

        def get(n: str, k: int) -> Any:
            return (local[n] if n in local else env[n])[k]

        for name in region.interior:
            node = self.nodes[name]
            out = rules.apply(node, [get(n, k) for n, k in self._data_inputs(name)])
            local[name] = list(out) if node.op in _MULTI else [out]
        kept = [np.asarray(get(n, k), dtype=object).ravel() for n, k in region.results]
        kept = [a for a in kept if a.size and not isinstance(a[0], (bool, np.bool_, int))]
        return np.concatenate(kept) if kept else np.empty(0, dtype=object)

    # -- running -------------------------------------------------------------------------
    def run(self, ctx: Any, leaves: Sequence[np.ndarray]) -> list[Any]:
        """Evaluate the outputs at ``leaves`` (object arrays of ``ctx.mpf``, one per input).

        While kinks are recorded (:mod:`.kinks`), the operations inside a
        ``tf.custom_gradient`` are not noted: the region counts as at a kink only where
        its own one-sided difference quotients differ.
        """
        env: dict[str, list[Any]] = {}
        for (name, _), leaf in zip(self.inputs, leaves, strict=True):
            env[name] = [np.asarray(leaf, dtype=object)]
        rules = _Rules(ctx, self._mp_constants(ctx))
        recording = is_recording()
        inside = self._inside_regions if recording else frozenset()
        for name in self.order:
            if name in env:
                continue
            node = self.nodes[name]
            args = [env[n][k] for n, k in self._data_inputs(name)]
            if recording and name not in inside:
                note_operation(node.op, _kink_test(node.op, args))
                if name in self._regions:
                    self._note_region(ctx, rules, self._regions[name], env)
            out = rules.apply(node, args)
            env[name] = list(out) if node.op in _MULTI else [out]
        return [env[n][k] for n, k in self.outputs]

    def _note_region(
        self, ctx: Any, rules: _Rules, region: _Region, env: dict[str, list[Any]]
    ) -> None:
        values = [env[n][k] for n, k in region.args]
        note_operation(
            "custom_gradient",
            lambda: region_at_kink(
                ctx, lambda v: self._region_outputs(rules, region, env, v), values
            ),
        )

    def _mp_constants(self, ctx: Any) -> dict[str, Any]:
        """Constants in the representation of ``ctx``, converted once per context."""
        key = ctx.prec
        if key not in self._mp_consts:
            self._mp_consts[key] = {
                n: mp_array(ctx, v) if self.nodes[n].attr["dtype"].type in _FLOAT_TYPES else v
                for n, v in self._consts.items()
            }
        return self._mp_consts[key]


_TF_TIES = ("Maximum", "Minimum", "Equal", "NotEqual", "Greater", "GreaterEqual", "Less",
            "LessEqual")  # fmt: skip
_TF_KINKS: dict[str, Callable[[list[Any]], bool]] = {
    **dict.fromkeys(_TF_TIES, lambda a: tie(a[0], a[1])),
    **dict.fromkeys(
        ("Abs", "Sign", "Relu", "LeakyRelu", "Elu", "Selu", "Sqrt", "Rsqrt"),
        lambda a: at_zero(a[0]),
    ),  # fmt: skip
    "Pow": lambda a: power_at_zero(a[0], a[1]),
    **dict.fromkeys(
        ("DivNoNan", "MulNoNan", "ReluGrad", "EluGrad", "SeluGrad"), lambda a: at_zero(a[1])
    ),  # fmt: skip
    **dict.fromkeys(("Max", "Min", "ArgMax", "ArgMin"), lambda a: repeated(a[0])),
    "Relu6": lambda a: at_values(a[0], 0, 6),
    "Relu6Grad": lambda a: at_values(a[1], 0, 6),
    **dict.fromkeys(("Floor", "Ceil"), lambda a: at_integer(a[0])),
    **dict.fromkeys(("Round", "Rint"), lambda a: at_integer(a[0], 0.5)),
    **dict.fromkeys(
        ("FloorDiv", "FloorMod"), lambda a: at_integer(np.asarray(a[0], dtype=object) / a[1])
    ),  # fmt: skip
    "ClipByValue": lambda a: at_values(a[0], a[1], a[2]),
}
"""Tests of the TensorFlow ops with kinks (see :mod:`.kinks`), on their arguments."""

KINKED_OPS = frozenset(_TF_KINKS)
"""TensorFlow ops with kinks; every other op is differentiable wherever its value is
finite."""


def _kink_test(op: str, args: list[Any]) -> Callable[[], bool] | None:
    """Whether the op sits at its kink at ``args`` (a deferred test), or None for an op
    without kinks or without floating operands."""
    test = _TF_KINKS.get(op)
    if test is None or not floating(*args):
        return None
    return lambda: test(args)


class _Rules:
    """The rules of one evaluation: scalar tables of one context, and the constants."""

    def __init__(self, ctx: Any, consts: dict[str, Any]) -> None:
        self.ctx = ctx
        self.consts = consts
        unary, binary = _float_unary(ctx), _float_binary(ctx)
        self.scalar: dict[str, Callable[..., Any]] = {
            **{op: unary[name] for op, name in _UNARY.items()},
            **{op: binary[name] for op, name in _BINARY.items()},
            **_tf_functions(ctx),
        }
        self.binary = binary

    def apply(self, node: Any, args: list[Any]) -> Any:
        op = node.op
        if op in _IDENTITY:
            return args[0]
        if op == "IdentityN":
            return args
        if op in self.scalar or op in _INTEGER:
            return self._elementwise(op, args)
        rule = getattr(self, "_r_" + op, None)
        if rule is None:  # pragma: no cover - coverage is checked before running
            raise UnsupportedOperatorError(f"the TensorFlow op {op!r} has no rule")
        return rule(node, args)

    # -- elementwise ---------------------------------------------------------------------
    def _elementwise(self, op: str, args: list[Any]) -> Any:
        arrays = [np.asarray(a) for a in args]
        if all(a.dtype != object for a in arrays) and op in _INTEGER:
            return _INTEGER[op](*arrays)
        if op in ("Add", "AddV2", "Sub", "Mul"):
            fn = {"Sub": np.subtract, "Mul": np.multiply}.get(op, np.add)
            return np.asarray(fn(*[self._mp(a) for a in arrays]), dtype=object)
        out = np.frompyfunc(self.scalar[op], len(arrays), 1)(*[self._mp(a) for a in arrays])
        out = np.asarray(out, dtype=object)
        if op in ("Greater", "GreaterEqual", "Less", "LessEqual", "Equal", "NotEqual"):
            return out.astype(bool)
        return out.astype(bool) if op in ("IsFinite", "IsNan") else out

    def _mp(self, a: Any) -> np.ndarray:
        a = np.asarray(a)
        return a if a.dtype == object else mp_array(self.ctx, a)

    def _r_Const(self, node: Any, args: list[Any]) -> Any:
        return self.consts[node.name]

    def _r_AddN(self, node: Any, args: list[Any]) -> Any:
        out = args[0]
        for a in args[1:]:
            out = np.add(out, a)
        return np.asarray(out, dtype=out.dtype)

    def _r_LeakyRelu(self, node: Any, args: list[Any]) -> Any:
        alpha = self.ctx.mpf(float(node.attr["alpha"].f))
        return np.frompyfunc(lambda x: x if x > 0 else alpha * x, 1, 1)(args[0]).astype(object)

    def _r_Select(self, node: Any, args: list[Any]) -> Any:
        cond, a, b = (np.asarray(v) for v in args)
        if cond.ndim == 1 and a.ndim > 1:  # v1: a vector selects rows
            cond = cond.reshape((-1,) + (1,) * (a.ndim - 1))
        return np.where(cond, a, b)

    def _r_SelectV2(self, node: Any, args: list[Any]) -> Any:
        return np.where(*(np.asarray(v) for v in args))

    def _r_Cast(self, node: Any, args: list[Any]) -> Any:
        x, dst = np.asarray(args[0]), node.attr["DstT"].type
        if dst in _FLOAT_TYPES:
            return self._mp(x)
        if dst == _BOOL_TYPE:
            return np.array([bool(v != 0) for v in x.flat], dtype=bool).reshape(x.shape)
        if x.dtype == object:
            x = np.array([_trunc_int(self.ctx, v) for v in x.flat], np.int64).reshape(x.shape)
        from tensorflow import as_dtype

        return x.astype(as_dtype(dst).as_numpy_dtype)

    def _r_BiasAdd(self, node: Any, args: list[Any]) -> Any:
        x, b = args
        fmt = node.attr["data_format"].s.decode() or "NHWC"
        if fmt.startswith("NC") and x.ndim > 2:
            b = b.reshape((-1,) + (1,) * (x.ndim - 2))
        return np.asarray(x + b, dtype=object)

    # -- reductions ----------------------------------------------------------------------
    def _reduce(self, node: Any, args: list[Any], op: Callable, init: Any) -> Any:
        x = np.asarray(args[0], dtype=object)
        axes = _axes(args[1], x.ndim)
        return fold(x, axes, op, init, keepdims=bool(node.attr["keep_dims"].b))

    def _integer_reduce(self, node: Any, args: list[Any], fn: Callable) -> Any:
        x = np.asarray(args[0])
        return fn(x, axis=_axes(args[1], x.ndim), keepdims=bool(node.attr["keep_dims"].b))

    def _r_Sum(self, node: Any, args: list[Any]) -> Any:
        if np.asarray(args[0]).dtype != object:
            return self._integer_reduce(node, args, np.sum)
        return self._reduce(node, args, lambda a, b: a + b, self.ctx.mpf(0))

    def _r_Prod(self, node: Any, args: list[Any]) -> Any:
        if np.asarray(args[0]).dtype != object:
            return self._integer_reduce(node, args, np.prod)
        return self._reduce(node, args, lambda a, b: a * b, self.ctx.mpf(1))

    def _r_Max(self, node: Any, args: list[Any]) -> Any:
        if np.asarray(args[0]).dtype != object:
            return self._integer_reduce(node, args, np.max)
        return self._reduce(node, args, self.binary["max"], -self.ctx.inf)

    def _r_Min(self, node: Any, args: list[Any]) -> Any:
        if np.asarray(args[0]).dtype != object:
            return self._integer_reduce(node, args, np.min)
        return self._reduce(node, args, self.binary["min"], self.ctx.inf)

    def _r_Mean(self, node: Any, args: list[Any]) -> Any:
        x = np.asarray(args[0])
        if x.dtype != object:
            return self._integer_reduce(node, args, np.sum) // max(1, self._count(x, args[1]))
        total = self._r_Sum(node, args)
        count = self.ctx.mpf(self._count(x, args[1]))
        return np.asarray(np.frompyfunc(lambda s: s / count, 1, 1)(total), dtype=object)

    @staticmethod
    def _count(x: np.ndarray, axis: Any) -> int:
        return int(np.prod([x.shape[a] for a in _axes(axis, x.ndim)], dtype=np.int64))

    def _r_All(self, node: Any, args: list[Any]) -> Any:
        return self._integer_reduce(node, args, np.all)

    def _r_Any(self, node: Any, args: list[Any]) -> Any:
        return self._integer_reduce(node, args, np.any)

    def _arg(self, node: Any, args: list[Any], fn: Callable) -> Any:
        x = np.asarray(args[0])
        from tensorflow import as_dtype

        out = fn(x, axis=int(np.asarray(args[1])) % x.ndim)
        return np.asarray(out).astype(as_dtype(node.attr["output_type"].type).as_numpy_dtype)

    def _r_ArgMax(self, node: Any, args: list[Any]) -> Any:
        return self._arg(node, args, np.argmax)

    def _r_ArgMin(self, node: Any, args: list[Any]) -> Any:
        return self._arg(node, args, np.argmin)

    def _r_Cumsum(self, node: Any, args: list[Any]) -> Any:
        return self._cumulative(node, args, lambda a, b: a + b, 0)

    def _r_Cumprod(self, node: Any, args: list[Any]) -> Any:
        return self._cumulative(node, args, lambda a, b: a * b, 1)

    def _cumulative(self, node: Any, args: list[Any], op: Callable, unit: int) -> Any:
        """A running sum or product (``unit``: its identity) with TensorFlow's
        ``exclusive`` and ``reverse`` attributes."""
        x = self._mp(args[0])
        axis = int(np.asarray(args[1])) % x.ndim
        reverse = bool(node.attr["reverse"].b)
        out = cumulative(x, axis, op, reverse)
        if node.attr["exclusive"].b:  # shifted by one place: x[k] itself excluded
            out = np.roll(out, -1 if reverse else 1, axis=axis)
            edge = [slice(None)] * x.ndim
            edge[axis] = slice(-1, None) if reverse else slice(0, 1)
            out[tuple(edge)] = self.ctx.mpf(unit)
        return np.asarray(out, dtype=object)

    def _r_Softmax(self, node: Any, args: list[Any]) -> Any:
        e = self._shifted_exp(args[0])
        total = fold(e, (e.ndim - 1,), lambda a, b: a + b, self.ctx.mpf(0), keepdims=True)
        return np.asarray(e / total, dtype=object)

    def _r_LogSoftmax(self, node: Any, args: list[Any]) -> Any:
        x = np.asarray(args[0], dtype=object)
        m = fold(x, (x.ndim - 1,), self.binary["max"], -self.ctx.inf, keepdims=True)
        e = self._shifted_exp(x)
        total = fold(e, (e.ndim - 1,), lambda a, b: a + b, self.ctx.mpf(0), keepdims=True)
        log = np.frompyfunc(self.scalar["Log"], 1, 1)
        return np.asarray(x - m - log(total), dtype=object)

    def _r_SoftmaxCrossEntropyWithLogits(self, node: Any, args: list[Any]) -> Any:
        logits, labels = np.asarray(args[0], dtype=object), self._mp(args[1])
        logp = self._r_LogSoftmax(node, [logits])
        loss = fold(-labels * logp, (logp.ndim - 1,), lambda a, b: a + b, self.ctx.mpf(0))
        return [loss, self._r_Softmax(node, [logits]) - labels]

    def _r_SparseSoftmaxCrossEntropyWithLogits(self, node: Any, args: list[Any]) -> Any:
        logits, labels = np.asarray(args[0], dtype=object), np.asarray(args[1])
        one_hot = (labels[:, None] == np.arange(logits.shape[-1])[None, :]).astype(np.int64)
        return self._r_SoftmaxCrossEntropyWithLogits(node, [logits, one_hot])

    def _shifted_exp(self, x: Any) -> np.ndarray:
        """``exp(x - max(x))`` along the last axis."""
        x = np.asarray(x, dtype=object)
        m = fold(x, (x.ndim - 1,), self.binary["max"], -self.ctx.inf, keepdims=True)
        return np.asarray(np.frompyfunc(self.scalar["Exp"], 1, 1)(x - m), dtype=object)

    # -- linear algebra ------------------------------------------------------------------
    def _matmul(self, a: Any, b: Any, ta: bool, tb: bool) -> Any:
        a, b = np.asarray(a, dtype=object), np.asarray(b, dtype=object)
        a = np.swapaxes(a, -1, -2) if ta else a
        b = np.swapaxes(b, -1, -2) if tb else b
        if a.shape[-1] == 0:
            shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
            return np.full(shape, self.ctx.mpf(0), dtype=object)
        return np.asarray(np.matmul(a, b), dtype=object)

    def _r_MatMul(self, node: Any, args: list[Any]) -> Any:
        ta, tb = node.attr["transpose_a"].b, node.attr["transpose_b"].b
        return self._matmul(args[0], args[1], ta, tb)

    def _r_BatchMatMulV2(self, node: Any, args: list[Any]) -> Any:
        return self._matmul(args[0], args[1], node.attr["adj_x"].b, node.attr["adj_y"].b)

    _r_BatchMatMul = _r_BatchMatMulV3 = _r_BatchMatMulV2

    # -- data movement -------------------------------------------------------------------
    def _r_Reshape(self, node: Any, args: list[Any]) -> Any:
        return np.reshape(args[0], [int(d) for d in np.ravel(args[1])])

    def _r_Transpose(self, node: Any, args: list[Any]) -> Any:
        return np.transpose(args[0], [int(p) for p in np.ravel(args[1])])

    def _r_ExpandDims(self, node: Any, args: list[Any]) -> Any:
        x = np.asarray(args[0])
        axis = int(np.ravel(args[1])[0])
        return np.expand_dims(x, axis if axis >= 0 else axis + x.ndim + 1)

    def _r_Squeeze(self, node: Any, args: list[Any]) -> Any:
        x = np.asarray(args[0])
        dims = list(node.attr["squeeze_dims"].list.i)
        return np.squeeze(x, axis=tuple(d % x.ndim for d in dims) if dims else None)

    def _r_ConcatV2(self, node: Any, args: list[Any]) -> Any:
        parts = [np.asarray(a) for a in args[:-1]]
        if any(p.dtype == object for p in parts):
            parts = [self._mp(p) for p in parts]
        return np.concatenate(parts, axis=int(np.asarray(args[-1])) % parts[0].ndim)

    def _r_Pack(self, node: Any, args: list[Any]) -> Any:
        parts = [np.asarray(a) for a in args]
        if any(p.dtype == object for p in parts):
            parts = [self._mp(p) for p in parts]
        axis = int(node.attr["axis"].i)
        return np.stack(parts, axis=axis if axis >= 0 else axis + parts[0].ndim + 1)

    def _r_Unpack(self, node: Any, args: list[Any]) -> Any:
        x = np.asarray(args[0])
        axis = int(node.attr["axis"].i) % x.ndim
        return [np.take(x, i, axis=axis) for i in range(x.shape[axis])]

    def _r_Split(self, node: Any, args: list[Any]) -> Any:
        x = np.asarray(args[1])
        return np.split(x, int(node.attr["num_split"].i), axis=int(np.asarray(args[0])) % x.ndim)

    def _r_SplitV(self, node: Any, args: list[Any]) -> Any:
        x, sizes = np.asarray(args[0]), [int(s) for s in np.ravel(args[1])]
        axis = int(np.asarray(args[2])) % x.ndim
        if -1 in sizes:
            sizes[sizes.index(-1)] = x.shape[axis] - (sum(sizes) + 1)
        return np.split(x, np.cumsum(sizes)[:-1], axis=axis)

    def _r_StridedSlice(self, node: Any, args: list[Any]) -> Any:
        x, begin, end, strides = (np.asarray(a) for a in args)
        index = _strided_index(np.ravel(begin), np.ravel(end), np.ravel(strides), node.attr)
        return np.asarray(x[index])

    def _r_Slice(self, node: Any, args: list[Any]) -> Any:
        x = np.asarray(args[0])
        begin, size = np.ravel(args[1]), np.ravel(args[2])
        index = tuple(
            slice(int(b), None if int(s) < 0 else int(b) + int(s))
            for b, s in zip(begin, size, strict=True)
        )
        return x[index]

    def _r_Tile(self, node: Any, args: list[Any]) -> Any:
        return np.tile(args[0], [int(m) for m in np.ravel(args[1])])

    def _r_Pad(self, node: Any, args: list[Any]) -> Any:
        x = np.asarray(args[0])
        value = self.ctx.mpf(0) if x.dtype == object else 0
        return self._pad(x, args[1], value if len(args) < 3 else np.asarray(args[2]).item())

    _r_PadV2 = _r_Pad

    @staticmethod
    def _pad(x: np.ndarray, paddings: Any, value: Any) -> np.ndarray:
        widths = [(int(lo), int(hi)) for lo, hi in np.asarray(paddings).reshape(-1, 2)]
        shape = tuple(n + lo + hi for n, (lo, hi) in zip(x.shape, widths, strict=True))
        out = np.full(shape, value, dtype=x.dtype)
        out[tuple(slice(lo, lo + n) for n, (lo, _) in zip(x.shape, widths, strict=True))] = x
        return out

    def _r_BroadcastTo(self, node: Any, args: list[Any]) -> Any:
        return np.broadcast_to(args[0], [int(d) for d in np.ravel(args[1])]).copy()

    def _r_GatherV2(self, node: Any, args: list[Any]) -> Any:
        x, indices = np.asarray(args[0]), np.asarray(args[1])
        if int(node.attr["batch_dims"].i) != 0:
            raise UnsupportedOperatorError("the TensorFlow op 'GatherV2' with batch_dims != 0")
        return np.take(x, indices, axis=int(np.asarray(args[2])) % x.ndim)

    def _r_Fill(self, node: Any, args: list[Any]) -> Any:
        value = np.asarray(args[1])
        return np.full([int(d) for d in np.ravel(args[0])], value.item(), dtype=value.dtype)

    def _r_ZerosLike(self, node: Any, args: list[Any]) -> Any:
        x = np.asarray(args[0])
        zero = self.ctx.mpf(0) if x.dtype == object else 0
        return np.full(x.shape, zero, dtype=x.dtype)

    def _r_OnesLike(self, node: Any, args: list[Any]) -> Any:
        x = np.asarray(args[0])
        one = self.ctx.mpf(1) if x.dtype == object else 1
        return np.full(x.shape, one, dtype=x.dtype)

    def _r_Range(self, node: Any, args: list[Any]) -> Any:
        start, limit, delta = (np.asarray(a) for a in args)
        if any(a.dtype == object for a in (start, limit, delta)):
            raise UnsupportedOperatorError("the TensorFlow op 'Range' on floating values")
        return np.arange(start.item(), limit.item(), delta.item(), dtype=start.dtype)

    def _index_type(self, node: Any) -> Any:
        from tensorflow import as_dtype

        return as_dtype(node.attr["out_type"].type).as_numpy_dtype

    def _r_Shape(self, node: Any, args: list[Any]) -> Any:
        return np.asarray(np.shape(args[0]), dtype=self._index_type(node))

    def _r_ShapeN(self, node: Any, args: list[Any]) -> Any:
        return [np.asarray(np.shape(a), dtype=self._index_type(node)) for a in args]

    def _r_Size(self, node: Any, args: list[Any]) -> Any:
        return np.asarray(np.size(args[0]), dtype=self._index_type(node))

    def _r_Rank(self, node: Any, args: list[Any]) -> Any:
        return np.asarray(np.ndim(args[0]), dtype=np.int32)


def tf_mp_evaluator(
    graph_def: Any, inputs: Sequence[str], outputs: Sequence[str], shapes: Sequence[tuple[int, ...]]
) -> Callable[[np.ndarray, np.ndarray, int], np.ndarray]:
    """``evaluate_mp`` for :class:`~polygrad.backends.base.Target` from a captured graph.

    Parameters
    ----------
    graph_def : tensorflow.GraphDef
        The frozen float64 program (see :mod:`polygrad.backends._tf_promote`).
    inputs : sequence of str
        Tensor names of the checked leaves, in the order of the flat input vector.
    outputs : sequence of str
        Tensor names of the outputs, in the order of the flat output vector.
    shapes : sequence of tuple of int
        Shapes of the checked leaves.

    Returns
    -------
    callable
        ``(x0, dx, dps) -> y``: ``x0 + dx`` formed exactly at ``dps`` digits
        (both float64 ``(n,)``), ``y`` the flat outputs, an object array
        ``(m,)`` of mpf.

    Raises
    ------
    UnsupportedOperatorError
        Raised here, before anything runs, when an op the outputs depend on
        has no rule (the message names every such op type).
    """
    from .context import make_context

    program = GraphProgram(graph_def, inputs, outputs)
    contexts: dict[int, Any] = {}

    def evaluate(x0: np.ndarray, dx: np.ndarray, dps: int) -> np.ndarray:
        ctx = contexts.get(dps)
        if ctx is None:
            ctx = contexts[dps] = make_context(dps)
        outs = program.run(ctx, leaves_at(ctx, x0, dx, shapes))
        parts = [mp_array(ctx, o).ravel() for o in outs]
        return np.concatenate(parts) if parts else np.empty(0, dtype=object)

    evaluate.program = program  # type: ignore[attr-defined]
    evaluate.shapes = [tuple(s) for s in shapes]  # type: ignore[attr-defined]
    return evaluate
