"""Random differentiable programs, one description run by every framework: a verdict fuzzer.

A :class:`Program` is a small expression tree over one input ``x`` (elementwise
and special functions, piecewise functions, reductions, ``matmul``, softmax and
layer normalisation, slicing and gathering) together with the point at which
to check it, its shape and dtype. :func:`programs` is a hypothesis strategy
that draws them; :func:`build` turns one into a function written with one
framework's own operators (``torch.nn.functional.softplus``,
``jax.nn.logsumexp``, ``tf.math.erf``...), the way users write code;
:func:`planted` wraps that function in the framework's custom-gradient
mechanism with a gradient scaled by ``1 + rel`` (a planted bug); and
:func:`numpy_vjp` is the hand-written VJP of the NumPy interpreter, for
``polygrad.check(f, x, vjp=...)``.

Every program respects its domain by construction: interval bounds are
carried through the tree for the largest input magnitude, so ``exp`` only sees
arguments that cannot overflow, and ``log``/``sqrt`` only see arguments bounded
away from 0 (otherwise they are applied to ``softplus(u) + c``).

Recipe: fuzz polygrad's verdicts on your framework's operators::

    from hypothesis import given, settings
    import polygrad as pg
    from polygrad.testing.programs import build, programs, to_input

    @settings(max_examples=25, deadline=None)
    @given(programs("torch"))
    def test_correct_gradients_pass(program):
        report = pg.check(build(program, "torch"), to_input(program, "torch"))
        assert report.verdict not in (pg.Verdict.MISMATCH, pg.Verdict.UNSTABLE), program

A backend of your own gets an interpreter by subclassing :class:`Interpreter`
(one method per operator) and passing it to :func:`build`.

Needs ``hypothesis`` for :func:`programs` (``pip install "polygrad-check[test]"``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._install import pip_install
from ..errors import MissingBackendError

try:
    from hypothesis import strategies as st
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise MissingBackendError(
        "polygrad.testing.programs needs hypothesis, which is not installed; install it "
        "with: " + pip_install("test", quote='"')
    ) from exc

__all__ = [
    "ELEMENTWISE",
    "Interpreter",
    "Node",
    "NumpyInterpreter",
    "Program",
    "REDUCTIONS",
    "build",
    "evaluate64",
    "numpy_vjp",
    "planted",
    "programs",
    "to_input",
]

ELEMENTWISE = (
    "exp", "log", "sqrt", "tanh", "sigmoid", "softplus", "erf", "sin", "abs", "relu",
    "square", "affine", "clip", "leaky", "add", "mul", "maximum", "where",
)  # fmt: skip
"""Shape-preserving operators (``add``, ``mul``, ``maximum``, ``where`` take two operands)."""
REDUCTIONS = ("sum", "mean", "max", "logsumexp", "prod", "norm")
"""Reductions over the last axis or over all axes."""
STRUCTURED = ("matmul", "softmax", "log_softmax", "layer_norm", "slice", "gather")
"""Operators that mix entries of the last axis or change its length."""
_HALF = ("float16", "bfloat16")
_LARGEST = {"float16": 65504.0, "bfloat16": 3.39e38, "float32": 3.40e38, "float64": 1.79e308}
_LN_EPS = 1e-5


@dataclass(frozen=True)
class Node:
    """One operation of a program.

    Attributes
    ----------
    op : str
        ``"x"`` (the input), or a name from :data:`ELEMENTWISE`,
        :data:`REDUCTIONS`, :data:`STRUCTURED` or ``"add_const"``.
    args : tuple of Node
        Operands (one, or two for binary operators; none for ``"x"``).
    params : tuple
        Constants: ``(a, b)`` of ``affine`` (``a*u + b``), ``(lo, hi)`` of
        ``clip``, ``(slope,)`` of ``leaky``, ``(c,)`` of ``add_const``,
        ``(t,)`` of ``where`` (``where(u > t, u, v)``), ``(axis,)`` of a
        reduction (``-1`` or ``None``), the weight matrix (nested tuples,
        shape ``(n, k)``) of ``matmul``, ``(start, stop)`` of ``slice``, the
        indices of ``gather`` (both on the last axis).
    """

    op: str
    args: tuple[Node, ...] = ()
    params: tuple[Any, ...] = ()

    def __str__(self) -> str:
        if self.op == "x":
            return "x"
        inner = ", ".join([str(a) for a in self.args] + [_short(p) for p in self.params])
        return f"{self.op}({inner})"


def _short(p: Any) -> str:
    return "W" if isinstance(p, tuple) and p and isinstance(p[0], tuple) else repr(p)


@dataclass(frozen=True)
class Program:
    """A program, its input's shape and dtype, and the point at which to check it.

    Attributes
    ----------
    root : Node
        The output node.
    shape : tuple of int
        Shape of the input ``x`` (1-D or 2-D).
    dtype : str
        ``"float64"``, ``"float32"``, ``"float16"`` or ``"bfloat16"``.
    point : tuple of float
        The input's entries, flattened (C order), exactly representable in ``dtype``.
    jit : bool
        Whether the framework function is compiled (``jax.jit``,
        ``tf.function``); ignored by NumPy and PyTorch.
    """

    root: Node
    shape: tuple[int, ...]
    dtype: str
    point: tuple[float, ...] = field(default=())
    jit: bool = False

    def __str__(self) -> str:
        return f"{self.root}  [x: {self.dtype}{list(self.shape)}{', jit' if self.jit else ''}]"

    def x(self) -> np.ndarray:
        """The point as a float64 NumPy array of ``shape``."""
        return np.asarray(self.point, dtype=np.float64).reshape(self.shape)


# --------------------------------------------------------------------- the builder


@dataclass(frozen=True)
class _Partial:
    node: Node
    shape: tuple[int, ...]
    lo: float
    hi: float


def _softplus(v: float) -> float:
    return float(np.logaddexp(0.0, v))


def _sigmoid(v: float) -> float:
    return float(0.5 * (1.0 + math.tanh(0.5 * v)))


_MONOTONE: dict[str, Callable[[float], float]] = {
    "exp": math.exp,
    "log": math.log,
    "sqrt": math.sqrt,
    "tanh": math.tanh,
    "sigmoid": _sigmoid,
    "softplus": _softplus,
    "erf": math.erf,
}


def _unary_bounds(op: str, params: tuple[Any, ...], lo: float, hi: float) -> tuple[float, float]:
    if op in _MONOTONE:
        return _MONOTONE[op](lo), _MONOTONE[op](hi)
    big = max(abs(lo), abs(hi))
    small = 0.0 if lo <= 0.0 <= hi else min(abs(lo), abs(hi))
    if op == "sin":
        return -1.0, 1.0
    if op == "abs":
        return small, big
    if op == "square":
        return small * small, big * big
    if op == "relu":
        return max(lo, 0.0), max(hi, 0.0)
    if op == "affine":
        a, b = params
        return min(a * lo, a * hi) + b, max(a * lo, a * hi) + b
    if op == "clip":
        return min(max(lo, params[0]), params[1]), min(max(hi, params[0]), params[1])
    if op == "leaky":
        return min(lo, params[0] * lo), max(hi, params[0] * hi)
    if op == "add_const":
        return lo + params[0], hi + params[0]
    raise ValueError(f"not a unary operator: {op!r}")


def _reduce_bounds(op: str, k: int, lo: float, hi: float) -> tuple[float, float]:
    big = max(abs(lo), abs(hi))
    if op == "sum":
        return k * lo, k * hi
    if op in ("mean", "max"):
        return lo, hi
    if op == "logsumexp":
        return lo, hi + math.log(k)
    if op == "prod":
        return (_power(lo, k), _power(hi, k)) if lo >= 0 else (-_power(big, k), _power(big, k))
    return 0.0, math.sqrt(k) * big  # norm


def _power(v: float, k: int) -> float:
    """``v ** k`` for ``v >= 0``, ``inf`` beyond float64's range (``1e55 ** 6`` raises
    OverflowError in Python): a bound that rules the draw out, as any bound past the
    dtype's limit does."""
    try:
        return float(v**k)
    except OverflowError:
        return math.inf


def _limit(dtype: str) -> float:
    """Largest magnitude any intermediate may reach: squares of it still fit."""
    return math.sqrt(_LARGEST[dtype]) / 4


def _fits(lo: float, hi: float, dtype: str) -> bool:
    return math.isfinite(lo) and math.isfinite(hi) and max(abs(lo), abs(hi)) <= _limit(dtype)


def _unary(p: _Partial, op: str, params: tuple[Any, ...] = ()) -> _Partial:
    lo, hi = _unary_bounds(op, params, p.lo, p.hi)
    return _Partial(Node(op, (p.node,), params), p.shape, lo, hi)


def _positive(p: _Partial, c: float) -> _Partial:
    """``softplus(u) + c``: bounded away from 0 for any u."""
    return _unary(_unary(p, "softplus"), "add_const", (c,))


def _exp_ok(p: _Partial, dtype: str) -> bool:
    return p.hi <= math.log(_limit(dtype))


def _draw_unary(draw: Any, p: _Partial, op: str, dtype: str) -> _Partial:
    if op in ("log", "sqrt"):
        if p.lo < 1e-2:
            p = _positive(p, draw(st.sampled_from([0.5, 1.0, 2.0])))
        return _unary(p, op)
    if op == "exp" and not _exp_ok(p, dtype):
        p = _unary(p, "tanh")
    params: tuple[Any, ...] = ()
    if op == "affine":
        params = (draw(st.sampled_from([-2.0, -0.5, 0.5, 1.5, 3.0])), draw(_small_const()))
    elif op == "clip":
        lo = draw(st.sampled_from([-2.0, -1.0, -0.25, 0.0]))
        params = (lo, lo + draw(st.sampled_from([0.5, 1.0, 3.0])))
    elif op == "leaky":
        params = (draw(st.sampled_from([0.03125, 0.25, 0.5])),)  # exact in every dtype
    return _unary(p, op, params)


def _small_const() -> st.SearchStrategy[float]:
    return st.sampled_from([0.0, -1.0, 0.5, 1.0, 2.0])


_PARTNERS = ("tanh", "sin", "sigmoid", "square", "abs", "affine", "softplus")


def _draw_binary(draw: Any, p: _Partial, op: str, dtype: str) -> _Partial:
    """``op(u, g(u))`` with ``g`` a unary operator: two operands of one shape."""
    q = _draw_unary(draw, p, draw(st.sampled_from(_PARTNERS)), dtype)
    if op == "add":
        lo, hi = p.lo + q.lo, p.hi + q.hi
        params: tuple[Any, ...] = ()
    elif op == "mul":
        corners = [a * b for a in (p.lo, p.hi) for b in (q.lo, q.hi)]
        lo, hi, params = min(corners), max(corners), ()
    elif op == "maximum":
        lo, hi, params = max(p.lo, q.lo), max(p.hi, q.hi), ()
    else:  # where(u > t, u, v)
        lo, hi, params = min(p.lo, q.lo), max(p.hi, q.hi), (draw(_small_const()),)
    return _Partial(Node(op, (p.node, q.node), params), p.shape, lo, hi)


def _draw_reduction(draw: Any, p: _Partial, op: str) -> _Partial:
    axis = -1 if len(p.shape) > 1 and draw(st.booleans()) else None
    k = p.shape[-1] if axis == -1 else math.prod(p.shape)
    shape = p.shape[:-1] if axis == -1 else ()
    lo, hi = _reduce_bounds(op, k, p.lo, p.hi)
    return _Partial(Node(op, (p.node,), (axis,)), shape, lo, hi)


def _draw_structured(draw: Any, p: _Partial, op: str) -> _Partial:
    n = p.shape[-1]
    big = max(abs(p.lo), abs(p.hi))
    if op == "matmul":
        k = draw(st.integers(1, 4))
        entry = st.sampled_from([-1.0, -0.75, -0.5, -0.25, 0.25, 0.5, 1.0, 1.25])
        W = tuple(tuple(draw(entry) for _ in range(k)) for _ in range(n))
        col = max(sum(abs(W[i][j]) for i in range(n)) for j in range(k))
        return _Partial(Node(op, (p.node,), (W,)), (*p.shape[:-1], k), -col * big, col * big)
    if op == "softmax":
        return _Partial(Node(op, (p.node,)), p.shape, 0.0, 1.0)
    if op == "log_softmax":
        return _Partial(Node(op, (p.node,)), p.shape, p.lo - p.hi - math.log(n), 0.0)
    if op == "layer_norm":
        return _Partial(Node(op, (p.node,)), p.shape, -math.sqrt(n), math.sqrt(n))
    if op == "slice":
        start = draw(st.integers(0, n - 1))
        stop = draw(st.integers(start + 1, n))
        return _Partial(
            Node(op, (p.node,), (start, stop)), (*p.shape[:-1], stop - start), p.lo, p.hi
        )
    idx = tuple(draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=4)))
    return _Partial(Node("gather", (p.node,), idx), (*p.shape[:-1], len(idx)), p.lo, p.hi)


def _candidates(p: _Partial, vocabulary: Sequence[str]) -> list[str]:
    out = [op for op in vocabulary if op in ELEMENTWISE]
    if p.shape:
        out += [op for op in vocabulary if op in REDUCTIONS or op in STRUCTURED]
    return out


def _step(draw: Any, p: _Partial, dtype: str, vocabulary: Sequence[str]) -> _Partial:
    for _ in range(8):
        op = draw(st.sampled_from(_candidates(p, vocabulary)))
        if op in ("add", "mul", "maximum", "where"):
            q = _draw_binary(draw, p, op, dtype)
        elif op in REDUCTIONS:
            q = _draw_reduction(draw, p, op)
        elif op in STRUCTURED:
            q = _draw_structured(draw, p, op)
        else:
            q = _draw_unary(draw, p, op, dtype)
        if _fits(q.lo, q.hi, dtype):
            return q
    return _unary(p, "tanh")


def _draw_point(
    draw: Any, shape: tuple[int, ...], dtype: str, magnitude: float
) -> tuple[float, ...]:
    size = math.prod(shape)
    exponent = st.floats(math.log2(magnitude) - 12, math.log2(magnitude))
    raw = [(-1.0 if draw(st.booleans()) else 1.0) * 2.0 ** draw(exponent) for _ in range(size)]
    return tuple(float(v) for v in _round(np.asarray(raw), dtype))


def _round(x: np.ndarray, dtype: str) -> np.ndarray:
    """Round float64 values to ``dtype`` (bfloat16: round to nearest even on 8 bits)."""
    if dtype != "bfloat16":
        return x.astype(dtype).astype(np.float64)
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    one, half = np.uint64(1), np.uint64(0x7FFF)
    bits = (bits + half + ((bits >> np.uint64(16)) & one)) & np.uint64(0xFFFF0000)
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)


@st.composite
def programs(
    draw: Any,
    framework: str = "numpy",
    dtypes: Sequence[str] = ("float32", "float64"),
    vocabulary: Sequence[str] = ELEMENTWISE + REDUCTIONS + STRUCTURED,
    max_ops: int = 5,
    max_magnitude: float = 1e3,
) -> Program:
    """Random programs over one input, with the point at which to check them.

    Parameters
    ----------
    framework : {"numpy", "torch", "jax", "tensorflow"}
        Which framework will run them: NumPy and PyTorch programs are never
        compiled; JAX and TensorFlow ones are, half of the time.
    dtypes : sequence of str
        dtypes to draw from (``"float64"``, ``"float32"``, ``"float16"``,
        ``"bfloat16"``).
    vocabulary : sequence of str
        Operators to draw from (default: all of :data:`ELEMENTWISE`,
        :data:`REDUCTIONS` and :data:`STRUCTURED`).
    max_ops : int
        Largest number of operators applied in sequence (each binary operator
        adds a second, unary branch).
    max_magnitude : float
        Largest ``|x|``; each program draws its own, between ``1e-2`` and this
        (at most 30 in float16 and bfloat16). Entries spread over 12 binades
        below it, with random signs.

    Returns
    -------
    hypothesis.strategies.SearchStrategy of Program
        Programs whose intermediates stay finite and below ``sqrt(max)/4`` of
        the dtype, and whose ``log``/``sqrt`` arguments are bounded away from 0.

    Examples
    --------
    >>> from hypothesis import given, settings
    >>> @settings(max_examples=5, deadline=None)
    ... @given(programs("numpy", dtypes=("float64",)))
    ... def test(p):
    ...     assert np.all(np.isfinite(evaluate64(p)))
    >>> test()
    """
    dtype = draw(st.sampled_from(list(dtypes)))
    top = min(max_magnitude, 30.0) if dtype in _HALF else max_magnitude
    magnitude = 2.0 ** draw(st.integers(-7, max(-6, int(math.log2(top)))))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=2)))
    p = _Partial(Node("x"), shape, -magnitude, magnitude)
    for _ in range(draw(st.integers(1, max_ops))):
        p = _step(draw, p, dtype, vocabulary)
    jit = framework in ("jax", "tensorflow") and draw(st.booleans())
    return Program(p.node, shape, dtype, _draw_point(draw, shape, dtype, magnitude), jit)


# ----------------------------------------------------------------- the interpreters


class Interpreter:
    """One framework's operators: one method per operator name of a :class:`Node`.

    Subclass it for a backend of your own and pass an instance to :func:`build`.
    Each method takes and returns the framework's arrays (``dtype`` like the
    input); ``const(value, like)`` makes a constant array of ``like``'s dtype.
    """

    def run(self, program: Program, x: Any) -> Any:
        """Evaluate ``program`` at ``x``; a node used twice is computed once."""
        memo: dict[Node, Any] = {}

        def ev(node: Node) -> Any:
            if node not in memo:
                if node.op == "x":
                    memo[node] = x
                else:
                    args = [ev(a) for a in node.args]
                    memo[node] = getattr(self, "op_" + node.op)(*args, *node.params)
            return memo[node]

        return ev(program.root)


def _stable_sigmoid(u: Any) -> Any:
    """``1 / (1 + exp(-u))``, with ``exp`` of a non-positive number only (no overflow)."""
    e = np.exp(-np.abs(u))
    return np.where(u >= 0, 1 / (1 + e), e / (1 + e)).astype(np.asarray(u).dtype)


class NumpyInterpreter(Interpreter):
    """NumPy (``math.erf`` entry by entry for ``erf``, which NumPy lacks)."""

    def op_exp(self, u: Any) -> Any:
        return np.exp(u)

    def op_log(self, u: Any) -> Any:
        return np.log(u)

    def op_sqrt(self, u: Any) -> Any:
        return np.sqrt(u)

    def op_tanh(self, u: Any) -> Any:
        return np.tanh(u)

    def op_sigmoid(self, u: Any) -> Any:
        return _stable_sigmoid(u)

    def op_softplus(self, u: Any) -> Any:
        return np.logaddexp(0, u)

    def op_erf(self, u: Any) -> Any:
        u = np.asarray(u)
        return np.vectorize(math.erf, otypes=[u.dtype])(u)

    def op_sin(self, u: Any) -> Any:
        return np.sin(u)

    def op_abs(self, u: Any) -> Any:
        return np.abs(u)

    def op_relu(self, u: Any) -> Any:
        return np.maximum(u, 0)

    def op_square(self, u: Any) -> Any:
        return u * u

    def op_affine(self, u: Any, a: float, b: float) -> Any:
        return a * u + b

    def op_clip(self, u: Any, lo: float, hi: float) -> Any:
        return np.clip(u, lo, hi)

    def op_leaky(self, u: Any, slope: float) -> Any:
        return np.where(u > 0, u, slope * u)

    def op_add_const(self, u: Any, c: float) -> Any:
        return u + c

    def op_add(self, u: Any, v: Any) -> Any:
        return u + v

    def op_mul(self, u: Any, v: Any) -> Any:
        return u * v

    def op_maximum(self, u: Any, v: Any) -> Any:
        return np.maximum(u, v)

    def op_where(self, u: Any, v: Any, t: float) -> Any:
        return np.where(u > t, u, v)

    def op_sum(self, u: Any, axis: int | None) -> Any:
        return np.sum(u, axis=axis)

    def op_mean(self, u: Any, axis: int | None) -> Any:
        return np.mean(u, axis=axis)

    def op_max(self, u: Any, axis: int | None) -> Any:
        return np.max(u, axis=axis)

    def op_logsumexp(self, u: Any, axis: int | None) -> Any:
        m = np.max(u, axis=axis, keepdims=True)
        return np.squeeze(m, axis=axis) + np.log(np.sum(np.exp(u - m), axis=axis))

    def op_prod(self, u: Any, axis: int | None) -> Any:
        return np.prod(u, axis=axis)

    def op_norm(self, u: Any, axis: int | None) -> Any:
        return np.sqrt(np.sum(u * u, axis=axis))

    def op_matmul(self, u: Any, W: Any) -> Any:
        return u @ np.asarray(W, dtype=u.dtype)

    def op_softmax(self, u: Any) -> Any:
        e = np.exp(u - np.max(u, axis=-1, keepdims=True))
        return e / np.sum(e, axis=-1, keepdims=True)

    def op_log_softmax(self, u: Any) -> Any:
        z = u - np.max(u, axis=-1, keepdims=True)
        return z - np.log(np.sum(np.exp(z), axis=-1, keepdims=True))

    def op_layer_norm(self, u: Any) -> Any:
        c = u - np.mean(u, axis=-1, keepdims=True)
        return c / np.sqrt(np.mean(c * c, axis=-1, keepdims=True) + _LN_EPS)

    def op_slice(self, u: Any, start: int, stop: int) -> Any:
        return u[..., start:stop]

    def op_gather(self, u: Any, *idx: int) -> Any:
        return u[..., list(idx)]


# ---------------------------------------------------------- NumPy: the hand-written VJP


def _expand(g: np.ndarray, u: np.ndarray, axis: int | None) -> np.ndarray:
    """A reduction's cotangent broadcast back to the operand's shape."""
    return np.broadcast_to(g if axis is None else np.expand_dims(g, axis), u.shape)


def _prod_vjp(u: np.ndarray, axis: int | None, g: np.ndarray) -> np.ndarray:
    """Products of all other entries (no division, so zeros are fine)."""
    flat = u.reshape(-1) if axis is None else u
    ones = np.ones_like(flat[..., :1])
    left = np.cumprod(np.concatenate([ones, flat[..., :-1]], axis=-1), axis=-1)
    rev = np.flip(flat, axis=-1)
    right = np.flip(np.cumprod(np.concatenate([ones, rev[..., :-1]], axis=-1), axis=-1), axis=-1)
    return (left * right).reshape(u.shape) * _expand(g, u, axis)


def _softmax(u: np.ndarray) -> np.ndarray:
    return NumpyInterpreter().op_softmax(u)


def _reduction_vjp(op: str, u: np.ndarray, y: np.ndarray, g: np.ndarray, axis: Any) -> Any:
    k = u.size if axis is None else u.shape[-1]
    G, Y = _expand(g, u, axis), _expand(y, u, axis)
    if op == "sum":
        return G
    if op == "mean":
        return G / k
    if op == "max":  # the first of tied maxima, as np.argmax
        flat = u.reshape(-1) if axis is None else u
        first = np.argmax(flat, axis=-1)
        hot = (np.arange(flat.shape[-1]) == np.expand_dims(first, -1)).reshape(u.shape)
        return G * hot
    if op == "logsumexp":
        return G * np.exp(u - Y)
    if op == "prod":
        return _prod_vjp(u, axis, g)
    safe = np.where(Y == 0, 1, Y)  # norm: u / |u|, 0 at the origin
    return G * np.where(Y == 0, 0, u / safe)


_UNARY_DERIVATIVE: dict[str, Callable[..., Any]] = {
    "exp": lambda u, y: y,
    "log": lambda u, y: 1 / u,
    "sqrt": lambda u, y: 0.5 / y,
    "tanh": lambda u, y: 1 - y * y,
    "sigmoid": lambda u, y: y * (1 - y),
    "softplus": lambda u, y: _stable_sigmoid(u),
    "erf": lambda u, y: 2 / np.sqrt(np.pi) * np.exp(-u * u),
    "sin": lambda u, y: np.cos(u),
    "abs": lambda u, y: np.sign(u),
    # (np.asarray: on mpmath numbers a comparison of a 0-d array is a Python bool)
    "relu": lambda u, y: np.asarray(u > 0).astype(np.asarray(u).dtype),
    "square": lambda u, y: 2 * u,
    "affine": lambda u, y, a, b: np.full_like(u, a),
    "clip": lambda u, y, lo, hi: np.asarray((u >= lo) & (u <= hi)).astype(np.asarray(u).dtype),
    "leaky": lambda u, y, s: np.where(u > 0, 1, s).astype(np.asarray(u).dtype),
    "add_const": lambda u, y, c: np.ones_like(u),
}


def _structured_vjp(node: Node, u: np.ndarray, y: np.ndarray, g: np.ndarray) -> np.ndarray:
    op = node.op
    if op == "matmul":
        return g @ np.asarray(node.params[0], dtype=u.dtype).T
    if op == "softmax":
        return y * (g - np.sum(g * y, axis=-1, keepdims=True))
    if op == "log_softmax":
        return g - _softmax(u) * np.sum(g, axis=-1, keepdims=True)
    if op == "layer_norm":
        c = u - np.mean(u, axis=-1, keepdims=True)
        sigma = np.sqrt(np.mean(c * c, axis=-1, keepdims=True) + _LN_EPS)
        mean_g = np.mean(g, axis=-1, keepdims=True)
        return (g - mean_g - y * np.mean(g * y, axis=-1, keepdims=True)) / sigma
    out = np.zeros_like(u)
    if op == "slice":
        out[..., node.params[0] : node.params[1]] = g
        return out
    moved = np.moveaxis(out, -1, 0)  # gather: repeated indices accumulate
    np.add.at(moved, list(node.params), np.moveaxis(g, -1, 0))
    return out


def _node_vjp(node: Node, vals: list[np.ndarray], y: np.ndarray, g: np.ndarray) -> list[Any]:
    op, u = node.op, vals[0]
    if op in _UNARY_DERIVATIVE:
        return [g * _UNARY_DERIVATIVE[op](u, y, *node.params)]
    if op in REDUCTIONS:
        return [_reduction_vjp(op, u, y, g, node.params[0])]
    if op in STRUCTURED:
        return [_structured_vjp(node, u, y, g)]
    v = vals[1]
    if op == "add":
        return [g, g]
    if op == "mul":
        return [g * v, g * u]
    take_u = u >= v if op == "maximum" else u > node.params[0]
    return [np.where(take_u, g, 0), np.where(take_u, 0, g)]


def _topological(root: Node) -> list[Node]:
    order: list[Node] = []
    seen: set[Node] = set()

    def visit(node: Node) -> None:
        if node in seen:
            return
        seen.add(node)
        for a in node.args:
            visit(a)
        order.append(node)

    visit(root)
    return order


def numpy_vjp(program: Program, rel: float = 0.0) -> Callable[[Any, np.ndarray], np.ndarray]:
    """The hand-written VJP of ``build(program, "numpy")``, for ``check(..., vjp=...)``.

    Parameters
    ----------
    program : Program
    rel : float
        Planted relative error: the VJP returned is ``(1 + rel)`` times the right one.

    Returns
    -------
    callable
        ``vjp(cotangent, x) -> uᵀJ``, shaped like ``x``, in ``x``'s dtype.
    """

    def vjp(cotangent: Any, x: np.ndarray) -> np.ndarray:
        order = _topological(program.root)
        interp = NumpyInterpreter()
        value: dict[Node, Any] = {}
        for node in order:
            args = [value[a] for a in node.args]
            value[node] = (
                x if node.op == "x" else getattr(interp, "op_" + node.op)(*args, *node.params)
            )
        cot: dict[Node, Any] = {program.root: np.asarray(cotangent, dtype=x.dtype)}
        for node in reversed(order):
            g = cot.get(node)
            if g is None or node.op == "x":
                continue
            vals = [value[a] for a in node.args]
            for a, ga in zip(node.args, _node_vjp(node, vals, value[node], g), strict=True):
                cot[a] = cot[a] + ga if a in cot else ga
        out = cot.get(Node("x"), np.zeros_like(x))
        return (np.asarray(out) * (1 + rel)).astype(x.dtype)

    return vjp


# ------------------------------------------------- PyTorch, JAX, TensorFlow interpreters


class TorchInterpreter(NumpyInterpreter):
    """PyTorch: ``torch``, ``torch.nn.functional``, ``torch.special``, ``torch.linalg``."""

    def __init__(self) -> None:
        import torch
        import torch.nn.functional as F

        self.torch, self.F = torch, F

    def op_exp(self, u: Any) -> Any:
        return self.torch.exp(u)

    def op_log(self, u: Any) -> Any:
        return self.torch.log(u)

    def op_sqrt(self, u: Any) -> Any:
        return self.torch.sqrt(u)

    def op_tanh(self, u: Any) -> Any:
        return self.torch.tanh(u)

    def op_sigmoid(self, u: Any) -> Any:
        return self.torch.sigmoid(u)

    def op_softplus(self, u: Any) -> Any:
        return self.F.softplus(u)

    def op_erf(self, u: Any) -> Any:
        return self.torch.special.erf(u)

    def op_sin(self, u: Any) -> Any:
        return self.torch.sin(u)

    def op_abs(self, u: Any) -> Any:
        return self.torch.abs(u)

    def op_relu(self, u: Any) -> Any:
        return self.F.relu(u)

    def op_square(self, u: Any) -> Any:
        return self.torch.square(u)

    def op_clip(self, u: Any, lo: float, hi: float) -> Any:
        return self.torch.clamp(u, lo, hi)

    def op_leaky(self, u: Any, slope: float) -> Any:
        return self.F.leaky_relu(u, slope)

    def op_maximum(self, u: Any, v: Any) -> Any:
        return self.torch.maximum(u, v)

    def op_where(self, u: Any, v: Any, t: float) -> Any:
        return self.torch.where(u > t, u, v)

    def _dims(self, u: Any, axis: int | None) -> Any:
        return tuple(range(u.ndim)) if axis is None else axis

    def op_sum(self, u: Any, axis: int | None) -> Any:
        return self.torch.sum(u, dim=self._dims(u, axis))

    def op_mean(self, u: Any, axis: int | None) -> Any:
        return self.torch.mean(u, dim=self._dims(u, axis))

    def op_max(self, u: Any, axis: int | None) -> Any:
        return self.torch.max(u) if axis is None else self.torch.max(u, dim=axis).values

    def op_logsumexp(self, u: Any, axis: int | None) -> Any:
        return self.torch.logsumexp(u, dim=self._dims(u, axis))

    def op_prod(self, u: Any, axis: int | None) -> Any:
        return self.torch.prod(u) if axis is None else self.torch.prod(u, dim=axis)

    def op_norm(self, u: Any, axis: int | None) -> Any:
        return self.torch.linalg.vector_norm(u, dim=axis)

    def op_matmul(self, u: Any, W: Any) -> Any:
        return u @ self.torch.tensor(W, dtype=u.dtype)

    def op_softmax(self, u: Any) -> Any:
        return self.F.softmax(u, dim=-1)

    def op_log_softmax(self, u: Any) -> Any:
        return self.F.log_softmax(u, dim=-1)

    def op_layer_norm(self, u: Any) -> Any:
        return self.F.layer_norm(u, u.shape[-1:], eps=_LN_EPS)


class JaxInterpreter(NumpyInterpreter):
    """JAX: ``jax.numpy``, ``jax.nn``, ``jax.scipy.special``."""

    def __init__(self) -> None:
        import jax
        import jax.numpy as jnp
        import jax.scipy.special

        self.jax, self.jnp = jax, jnp

    def op_exp(self, u: Any) -> Any:
        return self.jnp.exp(u)

    def op_log(self, u: Any) -> Any:
        return self.jnp.log(u)

    def op_sqrt(self, u: Any) -> Any:
        return self.jnp.sqrt(u)

    def op_tanh(self, u: Any) -> Any:
        return self.jnp.tanh(u)

    def op_sigmoid(self, u: Any) -> Any:
        return self.jax.nn.sigmoid(u)

    def op_softplus(self, u: Any) -> Any:
        return self.jax.nn.softplus(u)

    def op_erf(self, u: Any) -> Any:
        return self.jax.scipy.special.erf(u)

    def op_sin(self, u: Any) -> Any:
        return self.jnp.sin(u)

    def op_abs(self, u: Any) -> Any:
        return self.jnp.abs(u)

    def op_relu(self, u: Any) -> Any:
        return self.jax.nn.relu(u)

    def op_square(self, u: Any) -> Any:
        return self.jnp.square(u)

    def op_clip(self, u: Any, lo: float, hi: float) -> Any:
        return self.jnp.clip(u, lo, hi)

    def op_leaky(self, u: Any, slope: float) -> Any:
        return self.jax.nn.leaky_relu(u, slope)

    def op_maximum(self, u: Any, v: Any) -> Any:
        return self.jnp.maximum(u, v)

    def op_where(self, u: Any, v: Any, t: float) -> Any:
        return self.jnp.where(u > t, u, v)

    def op_sum(self, u: Any, axis: int | None) -> Any:
        return self.jnp.sum(u, axis=axis)

    def op_mean(self, u: Any, axis: int | None) -> Any:
        return self.jnp.mean(u, axis=axis)

    def op_max(self, u: Any, axis: int | None) -> Any:
        return self.jnp.max(u, axis=axis)

    def op_logsumexp(self, u: Any, axis: int | None) -> Any:
        return self.jax.nn.logsumexp(u, axis=axis)

    def op_prod(self, u: Any, axis: int | None) -> Any:
        return self.jnp.prod(u, axis=axis)

    def op_norm(self, u: Any, axis: int | None) -> Any:
        return self.jnp.linalg.norm(u if axis is not None else u.ravel(), axis=axis)

    def op_matmul(self, u: Any, W: Any) -> Any:
        return u @ self.jnp.asarray(W, dtype=u.dtype)

    def op_softmax(self, u: Any) -> Any:
        return self.jax.nn.softmax(u, axis=-1)

    def op_log_softmax(self, u: Any) -> Any:
        return self.jax.nn.log_softmax(u, axis=-1)

    def op_layer_norm(self, u: Any) -> Any:
        return self.jax.nn.standardize(u, axis=-1, epsilon=_LN_EPS)

    def op_gather(self, u: Any, *idx: int) -> Any:
        return self.jnp.take(u, self.jnp.asarray(idx), axis=-1)


class TensorflowInterpreter(NumpyInterpreter):
    """TensorFlow: ``tf``, ``tf.math``, ``tf.nn``."""

    def __init__(self) -> None:
        import tensorflow as tf

        self.tf = tf

    def op_exp(self, u: Any) -> Any:
        return self.tf.exp(u)

    def op_log(self, u: Any) -> Any:
        return self.tf.math.log(u)

    def op_sqrt(self, u: Any) -> Any:
        return self.tf.sqrt(u)

    def op_tanh(self, u: Any) -> Any:
        return self.tf.tanh(u)

    def op_sigmoid(self, u: Any) -> Any:
        return self.tf.sigmoid(u)

    def op_softplus(self, u: Any) -> Any:
        return self.tf.math.softplus(u)

    def op_erf(self, u: Any) -> Any:
        return self.tf.math.erf(u)

    def op_sin(self, u: Any) -> Any:
        return self.tf.sin(u)

    def op_abs(self, u: Any) -> Any:
        return self.tf.abs(u)

    def op_relu(self, u: Any) -> Any:
        return self.tf.nn.relu(u)

    def op_square(self, u: Any) -> Any:
        return self.tf.square(u)

    def op_clip(self, u: Any, lo: float, hi: float) -> Any:
        return self.tf.clip_by_value(u, lo, hi)

    def op_leaky(self, u: Any, slope: float) -> Any:
        return self.tf.nn.leaky_relu(u, alpha=slope)

    def op_maximum(self, u: Any, v: Any) -> Any:
        return self.tf.maximum(u, v)

    def op_where(self, u: Any, v: Any, t: float) -> Any:
        return self.tf.where(u > t, u, v)

    def op_sum(self, u: Any, axis: int | None) -> Any:
        return self.tf.reduce_sum(u, axis=axis)

    def op_mean(self, u: Any, axis: int | None) -> Any:
        return self.tf.reduce_mean(u, axis=axis)

    def op_max(self, u: Any, axis: int | None) -> Any:
        return self.tf.reduce_max(u, axis=axis)

    def op_logsumexp(self, u: Any, axis: int | None) -> Any:
        return self.tf.reduce_logsumexp(u, axis=axis)

    def op_prod(self, u: Any, axis: int | None) -> Any:
        return self.tf.reduce_prod(u, axis=axis)

    def op_norm(self, u: Any, axis: int | None) -> Any:
        return self.tf.norm(u, axis=axis)

    def op_matmul(self, u: Any, W: Any) -> Any:
        return self.tf.tensordot(u, self.tf.constant(W, dtype=u.dtype), axes=1)

    def op_softmax(self, u: Any) -> Any:
        return self.tf.nn.softmax(u, axis=-1)

    def op_log_softmax(self, u: Any) -> Any:
        return self.tf.nn.log_softmax(u, axis=-1)

    def op_layer_norm(self, u: Any) -> Any:
        mean, var = self.tf.nn.moments(u, axes=[-1], keepdims=True)
        return (u - mean) * self.tf.math.rsqrt(var + _LN_EPS)

    def op_gather(self, u: Any, *idx: int) -> Any:
        return self.tf.gather(u, list(idx), axis=-1)


_INTERPRETERS: dict[str, Callable[[], Interpreter]] = {
    "numpy": NumpyInterpreter,
    "torch": TorchInterpreter,
    "jax": JaxInterpreter,
    "tensorflow": TensorflowInterpreter,
}


def _interpreter(framework: str | Interpreter) -> Interpreter:
    if isinstance(framework, Interpreter):
        return framework
    if framework not in _INTERPRETERS:
        raise ValueError(f"framework {framework!r}; choose one of {', '.join(_INTERPRETERS)}")
    return _INTERPRETERS[framework]()


def _compiled(f: Callable[[Any], Any], program: Program, framework: Any) -> Callable[[Any], Any]:
    if not program.jit or framework not in ("jax", "tensorflow"):
        return f
    if framework == "jax":
        import jax

        return jax.jit(f)  # type: ignore[no-any-return]
    import tensorflow as tf

    return tf.function(f)  # type: ignore[no-any-return]


def build(program: Program, framework: str | Interpreter) -> Callable[[Any], Any]:
    """The program as a function of ``x`` written with one framework's operators.

    Parameters
    ----------
    program : Program
    framework : {"numpy", "torch", "jax", "tensorflow"} or Interpreter

    Returns
    -------
    callable
        ``f(x)``: ``x`` and the result are the framework's arrays (shape
        ``program.shape`` in; the program's output shape out), in ``x``'s
        dtype. Compiled with ``jax.jit``/``tf.function`` when ``program.jit``.

    Raises
    ------
    ValueError
        Unknown framework name.
    ImportError
        The framework is not installed.
    """
    interp = _interpreter(framework)

    def f(x: Any) -> Any:
        return interp.run(program, x)

    return _compiled(f, program, framework)


def to_input(program: Program, framework: str) -> Any:
    """The program's point as ``framework``'s array of ``program.dtype`` (see ``to_backend``)."""
    from ._handles import to_backend

    return to_backend(program.x(), framework, program.dtype)


def evaluate64(program: Program) -> np.ndarray:
    """The program's value at its point, in float64 NumPy (no framework needed)."""
    return np.asarray(NumpyInterpreter().run(program, program.x()))


# ----------------------------------------------------------------------- planted bugs


def _planted_torch(f: Callable[[Any], Any], rel: float) -> Callable[[Any], Any]:
    import torch

    class Planted(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any) -> Any:
            ctx.save_for_backward(x)
            return f(x)

        @staticmethod
        def backward(ctx: Any, g: Any) -> Any:
            (x,) = ctx.saved_tensors
            with torch.enable_grad():
                xx = x.detach().requires_grad_(True)
                (gx,) = torch.autograd.grad(f(xx), xx, g, allow_unused=True)
            gx = torch.zeros_like(x) if gx is None else gx
            return gx + rel * gx

    return Planted.apply  # type: ignore[no-any-return]


def _planted_jax(f: Callable[[Any], Any], rel: float) -> Callable[[Any], Any]:
    import jax

    @jax.custom_vjp
    def planted_f(x: Any) -> Any:
        return f(x)

    def fwd(x: Any) -> Any:
        return f(x), x

    def bwd(x: Any, g: Any) -> Any:
        (gx,) = jax.vjp(f, x)[1](g)
        return (gx + rel * gx,)

    planted_f.defvjp(fwd, bwd)
    return planted_f


def _planted_tensorflow(f: Callable[[Any], Any], rel: float) -> Callable[[Any], Any]:
    import tensorflow as tf

    @tf.custom_gradient
    def planted_f(x: Any) -> Any:
        def grad(upstream: Any) -> Any:
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = f(x)
            gx = tape.gradient(y, x, output_gradients=upstream)
            gx = tf.zeros_like(x) if gx is None else gx
            return gx + tf.cast(rel, gx.dtype) * gx

        return f(x), grad

    return planted_f  # type: ignore[no-any-return]


_PLANTERS = {"torch": _planted_torch, "jax": _planted_jax, "tensorflow": _planted_tensorflow}


def planted(program: Program, framework: str, rel: float) -> Callable[[Any], Any]:
    """The program with a custom gradient that is ``1 + rel`` times the right one.

    The function value is exactly that of :func:`build`; the VJP is scaled by
    ``1 + rel`` through the framework's custom-gradient mechanism wrapped
    around the whole program: ``torch.autograd.Function``, ``jax.custom_vjp``,
    ``tf.custom_gradient`` (then compiled if ``program.jit``). For NumPy use
    ``numpy_vjp(program, rel)`` as the ``vjp=`` of :func:`polygrad.check`.

    Raises
    ------
    ValueError
        ``framework`` is not one with autodiff.
    """
    if framework not in _PLANTERS:
        raise ValueError(f"framework {framework!r}; planted bugs exist for {', '.join(_PLANTERS)}")
    f = _interpreter(framework)

    def program_f(x: Any) -> Any:
        return f.run(program, x)

    return _compiled(_PLANTERS[framework](program_f, rel), program, framework)
