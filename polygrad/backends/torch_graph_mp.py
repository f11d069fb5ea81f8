"""Evaluate a PyTorch function on mpmath numbers by re-executing its ATen graph.

A float64 finite difference is a good reference for a float32 gradient but a
weak one for a float64 gradient (its error bar is about 1e-10 relative at
best). This module gives the PyTorch backend an ``evaluate_mp``: the user's own
function, evaluated at 50 (or ``dps``) decimal digits.

How
---
1. **Capture.** :func:`torch.fx.experimental.proxy_tensor.make_fx` traces the
   function with real tensors (``tracing_mode="real"``) at the dispatcher
   level below autograd. The graph holds ATen operator overloads
   (``aten.add.Tensor``, ``aten.convolution.default``...); composite operators
   (``linear``, ``matmul``, ``conv2d``, ``cross_entropy``, ``einsum``...) are
   already decomposed into core ones. The forward of a
   ``torch.autograd.Function`` is traced through (its ``backward`` is not part
   of a forward graph), and so is ``nn.Module.forward``: parameters and
   buffers become graph constants. This was preferred to
   ``torch.export``, which needs a module, re-traces with fake tensors and
   handles ``autograd.Function`` and closures less directly.
2. **Coverage.** Every node is looked up in a dispatch table, one rule per
   overload, before anything is evaluated. Operators without a rule that
   PyTorch itself can decompose (``torch._decomp.decomposition_table``:
   most backward operators such as ``tanh_backward`` or
   ``_log_softmax_backward_data``, ``im2col``, ``mish``...) are decomposed by
   tracing again with those decompositions; this is what lets a second-
   derivative check (``check(order=2)``, whose function is a gradient) use the
   mp reference. An operator that is still not covered raises
   :class:`UnsupportedOperatorError` naming it, and the backend then leaves
   ``evaluate_mp`` unset (the check uses a float64 reference and the report
   names the operator).
3. **Interpretation.** Floating tensors become NumPy object arrays of mpmath
   numbers (a private context at ``dps`` digits, see
   :mod:`polygrad.backends.mpmath`); integer and bool tensors stay NumPy
   ``int64``/``bool`` arrays. Each rule reads the overload's arguments by
   name with the schema's defaults (strides, padding, dims, keepdim,
   dtype...). After each node the value's shape is compared with the shape
   PyTorch produced while tracing, and its kind (floating, integer, bool) is
   set from the traced dtype.

Precision
---------
The mp reference computes the mathematical function the code expresses, with
no rounding to the working dtype: float32 parameters, buffers and captured
constants enter exactly (every binary float is an exact mpmath number),
Python float literals enter as the float64 values they are, and a cast to
another floating dtype (``x.float()``, ``x.half()``) is the identity. Casts to
integer or bool types are applied (truncation toward zero, ``!= 0``).
Library-defined approximations that are part of a function's definition are
kept as PyTorch defines them: ``softplus`` switches to the identity above its
``threshold``; ``gelu(approximate="tanh")`` is the tanh formula.

Validity of one trace
---------------------
The graph is traced at ``x0`` and re-executed at ``x0 + dx``. A trace is
valid at other points only if no tensor value decides the graph:

* Python control flow on tensor values (``if x.sum() > 0``, ``.item()``,
  ``float(x)``, ``bool(x)``) makes the trace fail
  (``aten._local_scalar_dense`` cannot be traced); no mp reference is built.
* Values that leave torch (``x.numpy()``, ``x.tolist()``) and come back as
  constants are caught by re-tracing at a perturbed point (a relative change
  of about 2^-6 in every checked input): if the graph's code or any of its
  constants differ, no mp reference is built.
* Branches inside the graph (``where``, ``relu``, ``max``, ``clamp``, pooling,
  ``sort``) are evaluated at every point, so the mp function switches
  branches exactly where the mathematical function does; a kink near ``x0``
  is then seen by the reference like in float64 (NONSMOOTH).
* Random operators (any overload tagged ``nondeterministic_seeded``:
  dropout in training mode, ``rand``, ``bernoulli``...) are refused.

Covered operators
-----------------
(``covered_operators()`` lists the exact overloads.)

* Elementwise: ``add sub rsub mul div`` (with ``rounding_mode``)
  ``floor_divide neg reciprocal pow square exp exp2 expm1 log log2 log10 log1p
  sqrt rsqrt sin cos tan asin acos atan atan2 sinh cosh tanh asinh acosh atanh
  sigmoid logit erf erfc erfinv lgamma digamma abs sign sgn floor ceil round
  trunc frac clamp clamp_min clamp_max hardtanh where maximum minimum fmax fmin
  hypot fmod remainder xlogy``, comparisons ``eq ne lt le gt ge``,
  ``logical_*`` and ``bitwise_*`` on bool/int tensors, ``isnan isinf
  masked_fill``.
* Activations: ``relu gelu`` (exact and tanh) ``silu softplus elu celu
  leaky_relu mish hardsigmoid hardswish softshrink hardshrink
  log_sigmoid_forward``.
* Conversions and creation: ``_to_copy clone alias detach lift_fresh_copy
  empty zeros ones full scalar_tensor arange linspace`` and the ``*_like`` /
  ``new_*`` forms (``empty`` is filled with zeros).
* Shapes and indexing: ``view _unsafe_view reshape permute transpose t expand
  squeeze unsqueeze cat stack slice select narrow index index_select gather
  index_put scatter scatter_add slice_scatter select_scatter split
  split_with_sizes unsafe_split unbind flip roll repeat constant_pad_nd
  diagonal diag_embed tril triu embedding upsample_nearest2d``.
* Reductions: ``sum mean prod amax amin max min argmax argmin logsumexp
  _softmax _safe_softmax _log_softmax cumsum cumprod var std
  linalg_vector_norm trace sort topk``.
* Linear algebra: ``mm bmm matmul mv dot addmm addmv baddbmm linear``.
* Layers and losses: ``convolution`` and ``convolution_backward`` (1-D/2-D/
  3-D; stride, padding, dilation, groups; not transposed),
  ``max_pool2d_with_indices avg_pool2d
  _adaptive_avg_pool2d native_layer_norm native_batch_norm
  _native_batch_norm_legit_no_training native_group_norm
  _scaled_dot_product_flash_attention_for_cpu`` (without dropout; with it
  ``nn.MultiheadAttention``, ``nn.TransformerEncoderLayer``, ``nn.LSTM`` and
  ``nn.GRU`` in eval mode are covered) ``nll_loss_forward mse_loss
  huber_loss smooth_l1_loss binary_cross_entropy_with_logits``.
* In-place forms (``add_``, ``relu_``, ``copy_``, ``fill_``, ``zero_``,
  ``index_put_``, ``squeeze_``...): the write goes into the NumPy array, whose
  views alias like PyTorch's. When a graph mutates tensors, aliasing is
  checked while it runs: a write into a view that NumPy had to copy raises
  (and the check falls back to float64) instead of being lost.

Not covered (the check falls back to float64 and the report names the
operator): complex tensors, transposed convolution, ``im2col``/``unfold``,
other pooling, upsampling and normalisation kernels, linear-algebra
decompositions and ``det``, ``cdist``, FFTs, sparse and quantized tensors,
``as_strided``, higher-order operators (``torch.cond``, ``while_loop``), and
anything else not listed.

Cost
----
Every node runs elementwise in Python on mpmath numbers, a few microseconds
per scalar operation at 50 digits; ``evaluate_mp.scalar_ops`` estimates the
operations of one evaluation. The mp reference makes ``2 * levels + 1``
evaluations per checked direction (29 by default), so it is meant for small
inputs and models: a 1x1x4x4 CNN takes about 1.5 ms per evaluation and its
16-entry Jacobian check about 2 s.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import PolygradError
from .mpmath import make_context

__all__ = [
    "GraphCaptureError",
    "GraphProgram",
    "UnsupportedOperatorError",
    "capture_graph",
    "covered_operators",
    "torch_mp_evaluator",
    "unsupported_operators",
]


class UnsupportedOperatorError(PolygradError, NotImplementedError):
    """An operator in the captured graph has no mpmath rule (the message names it)."""


class GraphCaptureError(PolygradError, RuntimeError):
    """The function's graph could not be captured, or is valid only at the traced point."""


Rule = Callable[["_Env", dict[str, Any]], Any]
RULES: dict[str, Rule] = {}


def _rule(*names: str) -> Callable[[Rule], Rule]:
    def deco(fn: Rule) -> Rule:
        for name in names:
            RULES[name] = fn
        return fn

    return deco


def covered_operators() -> list[str]:
    """Names of the ATen overloads with an mpmath rule (in-place ``op_`` forms not listed).

    Returns
    -------
    list of str
        Sorted names such as ``"aten.add.Tensor"``.
    """
    return sorted(RULES)


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
        if isinstance(v, self.mpf):
            return v
        if isinstance(v, (bool, np.bool_)):
            return self.one if v else self.zero
        if isinstance(v, (int, np.integer)):
            return self.mpf(int(v))
        return self.mpf(float(v))

    def F(self, v: Any) -> np.ndarray:
        """``v`` as an object array of mpf (a floating tensor)."""
        if isinstance(v, np.ndarray):
            if v.dtype == object:
                return v
            return self._obj(self.uf(self.scalar)(v))
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
            if str(dtype) == "torch.bool":
                return self.uf(lambda a: bool(a != 0))(v).astype(bool)
            return self.uf(_trunc_int)(v).astype(np.int64)
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


def _scalar_functions(E: _Env) -> dict[str, Callable[..., Any]]:
    """Scalar mp functions with PyTorch's conventions for poles and domains."""
    c = E.ctx
    nan, inf = E.nan, E.inf

    def real(fn: Callable[..., Any]) -> Callable[..., Any]:
        def g(*a: Any) -> Any:
            if any(c.isnan(x) for x in a):
                return nan
            try:
                r = fn(*a)
            except (ZeroDivisionError, ValueError, OverflowError):
                return nan
            return nan if isinstance(r, c.mpc) else r

        return g

    def div(a: Any, b: Any) -> Any:
        if b == 0:
            if a == 0 or c.isnan(a):
                return nan
            return inf if a > 0 else -inf
        return a / b

    def recip(x: Any) -> Any:
        return div(E.one, x)

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

    def digamma(x: Any) -> Any:
        if x == 0:
            return -inf
        if x < 0 and c.isint(x):
            return nan
        return c.digamma(x)

    def erfinv(x: Any) -> Any:
        if x == 1:
            return inf
        if x == -1:
            return -inf
        if abs(x) > 1:
            return nan
        return c.erfinv(x)

    def sigmoid(x: Any) -> Any:
        return 1 / (1 + c.exp(-x))

    def sign(x: Any) -> Any:
        return E.one if x > 0 else (-E.one if x < 0 else E.zero)

    def rsqrt(x: Any) -> Any:
        return inf if x == 0 else (nan if x < 0 else 1 / c.sqrt(x))

    def power(a: Any, b: Any) -> Any:
        if a == 0 and b < 0:
            return inf
        if isinstance(b, int) or c.isint(b):
            return a ** int(b)
        if a < 0:
            return nan
        return c.power(a, b)

    def vmax(a: Any, b: Any) -> Any:
        if c.isnan(a) or c.isnan(b):
            return nan
        return a if a >= b else b

    def vmin(a: Any, b: Any) -> Any:
        if c.isnan(a) or c.isnan(b):
            return nan
        return a if a <= b else b

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
        if c.isnan(b):
            return nan
        return E.zero if a == 0 else a * log(b)

    def atan2(a: Any, b: Any) -> Any:
        return c.atan2(a, b)

    f = {
        "exp": c.exp,
        "exp2": lambda x: c.power(2, x),
        "expm1": c.expm1,
        "log": log,
        "log2": lambda x: log(x) / c.ln2 if x != 0 else -inf,
        "log10": lambda x: log(x) / c.ln10 if x != 0 else -inf,
        "log1p": lambda x: log(1 + x) if x <= -1 else c.log1p(x),
        "sqrt": lambda x: nan if x < 0 else c.sqrt(x),
        "rsqrt": rsqrt,
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
        "sigmoid": sigmoid,
        "erf": c.erf,
        "erfc": c.erfc,
        "erfinv": erfinv,
        "lgamma": lgamma,
        "digamma": digamma,
        "abs": abs,
        "neg": operator.neg,
        "reciprocal": recip,
        "sign": sign,
        "sgn": sign,
        "floor": c.floor,
        "ceil": c.ceil,
        "round": c.nint,
        "trunc": lambda x: c.mpf(int(x)) if c.isfinite(x) else x,
        "frac": lambda x: x - int(x),
        "relu": lambda x: x if x > 0 else E.zero,
        "silu": lambda x: x * sigmoid(x),
        "div": div,
        "pow": power,
        "max": vmax,
        "min": vmin,
        "fmax": lambda a, b: b if c.isnan(a) else (a if c.isnan(b) else vmax(a, b)),
        "fmin": lambda a, b: b if c.isnan(a) else (a if c.isnan(b) else vmin(a, b)),
        "atan2": atan2,
        "hypot": c.hypot,
        "fmod": fmod,
        "remainder": remainder,
        "xlogy": xlogy,
    }
    return {k: real(v) for k, v in f.items()}


@functools.lru_cache(maxsize=8)
def _env(dps: int) -> _Env:
    return _Env(dps)


# ------------------------------------------------------------------ elementwise rules

_UNARY = [
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos",
    "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh",
    "sigmoid", "erf", "erfc", "erfinv", "lgamma", "digamma", "reciprocal", "floor", "ceil",
    "round", "trunc", "frac", "relu", "silu",
]  # fmt: skip
_INT_SAFE = {"abs", "neg", "sign", "sgn", "floor", "ceil", "round", "trunc", "relu"}


def _unary(name: str) -> Rule:
    def rule(E: _Env, a: dict[str, Any]) -> Any:
        x = a["self"]
        if not E.is_float(x) and name in _INT_SAFE:
            x = _arr(x)
            int_fns: dict[str, Callable[[np.ndarray], Any]] = {
                "abs": np.abs,
                "neg": np.negative,
                "sign": np.sign,
                "sgn": np.sign,
                "relu": lambda v: np.maximum(v, 0),
            }
            return int_fns.get(name, np.copy)(x)
        return E.map(E.fns[name], x)

    return rule


for _n in _UNARY + ["abs", "neg", "sign", "sgn"]:
    RULES[f"aten.{_n}.default"] = _unary(_n)
RULES["aten.arctan2.default"] = RULES["aten.atan2.default"] = lambda E, a: E.map(
    E.fns["atan2"], a["self"], a["other"]
)
RULES["aten.special_erfcx.default"] = lambda E, a: E.map(
    lambda x: E.ctx.exp(x * x) * E.ctx.erfc(x), a["self"]
)


@_rule("aten.round.decimals")
def _round_decimals(E: _Env, a: dict[str, Any]) -> Any:
    s = E.mpf(10) ** int(a["decimals"])
    return E.map(lambda x: E.ctx.nint(x * s) / s, a["self"])


def _numeric(fn_float: Callable[..., Any], fn_int: Callable[..., Any]) -> Rule:
    """A binary rule: mp arithmetic when either operand is floating, else NumPy integers."""

    def rule(E: _Env, a: dict[str, Any]) -> Any:
        x, y = a["self"], a["other"]
        if E.is_float(x) or E.is_float(y):
            return fn_float(E, E.F(x), E.F(y), a)
        return fn_int(_arr(x), _arr(y), a)

    return rule


def _alpha(E: _Env, y: Any, a: dict[str, Any]) -> Any:
    al = a.get("alpha", 1)
    return y if al == 1 else y * E.scalar(al)


def _add_f(E: _Env, x: Any, y: Any, a: dict[str, Any]) -> Any:
    return E.O(x + _alpha(E, y, a))


def _sub_f(E: _Env, x: Any, y: Any, a: dict[str, Any]) -> Any:
    return E.O(x - _alpha(E, y, a))


def _int_add(x: Any, y: Any, a: dict[str, Any]) -> Any:
    return x + y * a.get("alpha", 1) if x.dtype != bool else np.logical_or(x, y)


for _ov in ("Tensor", "Scalar"):
    RULES[f"aten.add.{_ov}"] = _numeric(_add_f, _int_add)
    RULES[f"aten.sub.{_ov}"] = _numeric(_sub_f, lambda x, y, a: x - y * a.get("alpha", 1))
    RULES[f"aten.rsub.{_ov}"] = _numeric(
        lambda E, x, y, a: _sub_f(E, y, x, a), lambda x, y, a: y - x * a.get("alpha", 1)
    )
    RULES[f"aten.mul.{_ov}"] = _numeric(
        lambda E, x, y, a: E.O(x * y),
        lambda x, y, a: x * y if x.dtype != bool else np.logical_and(x, y),
    )


def _div_rule(E: _Env, a: dict[str, Any]) -> Any:
    x, y, mode = a["self"], a["other"], a.get("rounding_mode")
    if mode is not None and not (E.is_float(x) or E.is_float(y)):
        x, y = _arr(x), _arr(y)
        if mode == "floor":
            return np.floor_divide(x, y)
        return np.trunc(x / y).astype(np.int64)
    q = E.map(E.fns["div"], x, y)
    if mode == "floor":
        return E.map(E.ctx.floor, q)
    if mode == "trunc":
        return E.map(E.fns["trunc"], q)
    return q


for _ov in ("Tensor", "Scalar", "Tensor_mode", "Scalar_mode"):
    RULES[f"aten.div.{_ov}"] = _div_rule
RULES["aten.floor_divide.default"] = RULES["aten.floor_divide.Scalar"] = lambda E, a: _div_rule(
    E, {**a, "rounding_mode": "floor"}
)
RULES["aten.true_divide.Tensor"] = _div_rule


def _pow_rule(E: _Env, a: dict[str, Any]) -> Any:
    x, y = a["self"], a["exponent"]
    if not (E.is_float(x) or E.is_float(y)):
        return np.power(_arr(x), _arr(y))
    if isinstance(y, (int, np.integer)) and not isinstance(y, bool):
        return E.map(lambda v: E.fns["pow"](v, int(y)), x)
    return E.map(E.fns["pow"], x, y)


for _ov in ("Tensor_Scalar", "Tensor_Tensor", "Scalar"):
    RULES[f"aten.pow.{_ov}"] = _pow_rule
RULES["aten.square.default"] = lambda E, a: _pow_rule(E, {"self": a["self"], "exponent": 2})


def _binary_map(fname: str, int_fn: Callable[..., Any] | None) -> Rule:
    def rule(E: _Env, a: dict[str, Any]) -> Any:
        x, y = a["self"], a["other"]
        if int_fn is not None and not (E.is_float(x) or E.is_float(y)):
            return int_fn(_arr(x), _arr(y))
        return E.map(E.fns[fname], x, y)

    return rule


for _n, _f, _i in [
    ("maximum", "max", np.maximum),
    ("minimum", "min", np.minimum),
    ("fmax", "fmax", np.maximum),
    ("fmin", "fmin", np.minimum),
    ("hypot", "hypot", None),
    ("fmod", "fmod", np.fmod),
    ("remainder", "remainder", np.remainder),
    ("xlogy", "xlogy", None),
]:
    for _ov in ("default", "Tensor", "Scalar", "Self_Scalar", "Other_Scalar"):
        RULES[f"aten.{_n}.{_ov}"] = _binary_map(_f, _i)


def _compare(op: Callable[[Any, Any], Any]) -> Rule:
    def rule(E: _Env, a: dict[str, Any]) -> Any:
        x, y = a["self"], a["other"]
        if E.is_float(x) or E.is_float(y):
            x, y = E.F(x), E.F(y)
        return np.asarray(op(x, y), dtype=bool)

    return rule


for _n, _cmp in [
    ("eq", np.equal),
    ("ne", np.not_equal),
    ("lt", np.less),
    ("le", np.less_equal),
    ("gt", np.greater),
    ("ge", np.greater_equal),
]:
    for _ov in ("Tensor", "Scalar"):
        RULES[f"aten.{_n}.{_ov}"] = _compare(_cmp)


def _truth(E: _Env, v: Any) -> np.ndarray:
    """A tensor's truth values (``!= 0``) as a bool array."""
    if E.is_float(v):
        return np.asarray(E.uf(lambda u: bool(u != 0))(E.F(v)), dtype=bool)
    return np.asarray(v) != 0


def _logical(op: Callable[..., Any]) -> Rule:
    def rule(E: _Env, a: dict[str, Any]) -> Any:
        args = [a["self"]] + ([a["other"]] if "other" in a else [])
        return op(*[_truth(E, v) for v in args])

    return rule


for _n, _lop in [
    ("logical_not", np.logical_not),
    ("logical_and", np.logical_and),
    ("logical_or", np.logical_or),
    ("logical_xor", np.logical_xor),
]:
    RULES[f"aten.{_n}.default"] = _logical(_lop)


def _bitwise(op: Callable[..., Any]) -> Rule:
    def rule(E: _Env, a: dict[str, Any]) -> Any:
        args = [a["self"]] + ([a["other"]] if "other" in a else [])
        if any(E.is_float(v) for v in args):
            raise TypeError("bitwise operators need integer or bool tensors")
        return op(*[_arr(v) for v in args])

    return rule


for _n, _bop in [
    ("bitwise_not", np.invert),
    ("bitwise_and", np.bitwise_and),
    ("bitwise_or", np.bitwise_or),
    ("bitwise_xor", np.bitwise_xor),
]:
    for _ov in ("default", "Tensor", "Scalar"):
        RULES[f"aten.{_n}.{_ov}"] = _bitwise(_bop)


@_rule("aten.isnan.default")
def _isnan(E: _Env, a: dict[str, Any]) -> Any:
    x = a["self"]
    if not E.is_float(x):
        return np.zeros(np.shape(x), dtype=bool)
    return E.uf(E.ctx.isnan)(E.F(x)).astype(bool)


@_rule("aten.isinf.default")
def _isinf(E: _Env, a: dict[str, Any]) -> Any:
    x = a["self"]
    if not E.is_float(x):
        return np.zeros(np.shape(x), dtype=bool)
    return E.uf(E.ctx.isinf)(E.F(x)).astype(bool)


@_rule("aten.where.self", "aten.where.ScalarSelf", "aten.where.ScalarOther", "aten.where.Scalar")
def _where(E: _Env, a: dict[str, Any]) -> Any:
    x, y = a["self"], a["other"]
    if E.is_float(x) or E.is_float(y):
        x, y = E.F(x), E.F(y)
    return np.where(_arr(a["condition"]), x, y)


@_rule("aten.masked_fill.Scalar", "aten.masked_fill.Tensor")
def _masked_fill(E: _Env, a: dict[str, Any]) -> Any:
    x, v = a["self"], a["value"]
    if E.is_float(x):
        v = E.F(v)
    return np.where(_arr(a["mask"]), v, x)


def _clamp_rule(E: _Env, a: dict[str, Any]) -> Any:
    x = a["self"]
    lo, hi = a.get("min"), a.get("max")
    if not (E.is_float(x) or E.is_float(lo) or E.is_float(hi)):
        return np.clip(_arr(x), lo, hi)
    out = E.F(x)
    if lo is not None:
        out = E.map(E.fns["max"], out, lo)
    if hi is not None:
        out = E.map(E.fns["min"], out, hi)
    return out


for _n in ("clamp.default", "clamp.Tensor", "clip.default", "clip.Tensor"):
    RULES[f"aten.{_n}"] = _clamp_rule
RULES["aten.clamp_min.default"] = RULES["aten.clamp_min.Tensor"] = lambda E, a: _clamp_rule(
    E, {"self": a["self"], "min": a["min"]}
)
RULES["aten.clamp_max.default"] = RULES["aten.clamp_max.Tensor"] = lambda E, a: _clamp_rule(
    E, {"self": a["self"], "max": a["max"]}
)
RULES["aten.hardtanh.default"] = lambda E, a: _clamp_rule(
    E, {"self": a["self"], "min": a["min_val"], "max": a["max_val"]}
)


# ------------------------------------------------------------------ activations


@_rule("aten.gelu.default")
def _gelu(E: _Env, a: dict[str, Any]) -> Any:
    c = E.ctx
    if a.get("approximate", "none") == "tanh":
        k = c.sqrt(2 / c.pi)
        kappa = c.mpf("0.044715")
        return E.map(lambda x: x / 2 * (1 + c.tanh(k * (x + kappa * x**3))), a["self"])
    r2 = c.sqrt(2)
    return E.map(lambda x: x / 2 * (1 + c.erf(x / r2)), a["self"])


@_rule("aten.softplus.default")
def _softplus(E: _Env, a: dict[str, Any]) -> Any:
    c = E.ctx
    beta, thr = E.scalar(a.get("beta", 1)), E.scalar(a.get("threshold", 20))

    def f(x: Any) -> Any:
        bx = beta * x
        return x if bx > thr else c.log1p(c.exp(bx)) / beta

    return E.map(f, a["self"])


@_rule("aten.elu.default")
def _elu(E: _Env, a: dict[str, Any]) -> Any:
    c = E.ctx
    al, sc, isc = (E.scalar(a.get(k, 1)) for k in ("alpha", "scale", "input_scale"))
    return E.map(lambda x: sc * x if x > 0 else sc * al * c.expm1(x * isc), a["self"])


@_rule("aten.leaky_relu.default")
def _leaky_relu(E: _Env, a: dict[str, Any]) -> Any:
    s = E.scalar(a.get("negative_slope", 0.01))
    return E.map(lambda x: x if x > 0 else x * s, a["self"])


@_rule("aten.log_sigmoid_forward.default")
def _log_sigmoid(E: _Env, a: dict[str, Any]) -> Any:
    c = E.ctx
    out = E.map(lambda x: x - c.log1p(c.exp(x)) if x < 0 else -c.log1p(c.exp(-x)), a["self"])
    return out, np.zeros(np.shape(out), dtype=object)


@_rule("aten.logit.default")
def _logit(E: _Env, a: dict[str, Any]) -> Any:
    eps = a.get("eps")
    lo = None if eps is None else E.scalar(eps)
    log = E.fns["log"]

    def f(x: Any) -> Any:
        if lo is not None:
            x = min(max(x, lo), 1 - lo)
        return log(E.fns["div"](x, 1 - x))

    return E.map(f, a["self"])


@_rule("aten.mish.default")
def _mish(E: _Env, a: dict[str, Any]) -> Any:
    c = E.ctx
    return E.map(lambda x: x * c.tanh(c.log1p(c.exp(x))), a["self"])


@_rule("aten.hardsigmoid.default")
def _hardsigmoid(E: _Env, a: dict[str, Any]) -> Any:
    return E.map(lambda x: min(max(x + 3, E.zero), E.mpf(6)) / 6, a["self"])


@_rule("aten.hardswish.default")
def _hardswish(E: _Env, a: dict[str, Any]) -> Any:
    return E.map(lambda x: x * min(max(x + 3, E.zero), E.mpf(6)) / 6, a["self"])


@_rule("aten.celu.default")
def _celu(E: _Env, a: dict[str, Any]) -> Any:
    al = E.scalar(a.get("alpha", 1))
    return E.map(lambda x: x if x > 0 else al * E.ctx.expm1(x / al), a["self"])


@_rule("aten.softshrink.default")
def _softshrink(E: _Env, a: dict[str, Any]) -> Any:
    lam = E.scalar(a.get("lambd", 0.5))
    return E.map(lambda x: x - lam if x > lam else (x + lam if x < -lam else E.zero), a["self"])


@_rule("aten.hardshrink.default")
def _hardshrink(E: _Env, a: dict[str, Any]) -> Any:
    lam = E.scalar(a.get("lambd", 0.5))
    return E.map(lambda x: x if abs(x) > lam else E.zero, a["self"])


# ------------------------------------------------------------------ conversions, creation


def _copy(E: _Env, a: dict[str, Any]) -> Any:
    return _arr(a["self"]).copy()


for _n in (
    "_to_copy.default",
    "clone.default",
    "lift_fresh_copy.default",
    "contiguous.default",
    "to.dtype",
    "to.dtype_layout",
    "to.device",
    "type_as.default",
    "_to_dense.default",
):
    RULES[f"aten.{_n}"] = _copy
for _n in ("alias.default", "detach.default", "lift_fresh.default"):
    RULES[f"aten.{_n}"] = lambda E, a: _arr(a["self"])


def _fill_value(key: str | None, value: Any = 0) -> Rule:
    return lambda E, a: E.filled(a[key] if key else value)


for _n in ("empty.memory_format", "empty_like.default", "new_empty.default"):
    RULES[f"aten.{_n}"] = _fill_value(None, 0)
for _n in ("zeros.default", "zeros_like.default", "new_zeros.default"):
    RULES[f"aten.{_n}"] = _fill_value(None, 0)
for _n in ("ones.default", "ones_like.default", "new_ones.default"):
    RULES[f"aten.{_n}"] = _fill_value(None, 1)
for _n in ("full.default", "full_like.default", "new_full.default"):
    RULES[f"aten.{_n}"] = _fill_value("fill_value")
RULES["aten.scalar_tensor.default"] = _fill_value("s")


@_rule("aten.arange.default", "aten.arange.start", "aten.arange.start_step")
def _arange(E: _Env, a: dict[str, Any]) -> Any:
    start = a.get("start", 0) if "end" in a else 0
    step = a.get("step", 1)
    n = int(E.val.shape[0])
    if E.val.dtype.is_floating_point:
        s0, st = E.scalar(start), E.scalar(step)
        return E._obj(np.array([s0 + i * st for i in range(n)], dtype=object))
    return (int(start) + np.arange(n, dtype=np.int64) * int(step)).astype(np.int64)


@_rule("aten.linspace.default")
def _linspace(E: _Env, a: dict[str, Any]) -> Any:
    n = int(a["steps"])
    lo, hi = E.scalar(a["start"]), E.scalar(a["end"])
    vals = [lo + (hi - lo) * i / (n - 1) for i in range(n)] if n > 1 else [lo] * n
    out = np.empty(n, dtype=object)
    out[:] = vals
    return out


# ------------------------------------------------------------------ shapes and indexing


def _reshape(x: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    return np.reshape(x, tuple(int(s) for s in shape))


for _n in ("view.default", "_unsafe_view.default", "reshape.default"):
    RULES[f"aten.{_n}"] = lambda E, a: _reshape(
        _arr(a["self"]), a["size"] if "size" in a else a["shape"]
    )
RULES["aten.permute.default"] = lambda E, a: np.transpose(
    _arr(a["self"]), [_ax(d, np.ndim(a["self"])) for d in a["dims"]]
)
RULES["aten.transpose.int"] = lambda E, a: np.swapaxes(_arr(a["self"]), a["dim0"], a["dim1"])
RULES["aten.t.default"] = lambda E, a: _arr(a["self"]).T
RULES["aten.unsqueeze.default"] = lambda E, a: np.expand_dims(
    _arr(a["self"]), int(a["dim"]) % (np.ndim(a["self"]) + 1)
)


@_rule("aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default")
def _squeeze(E: _Env, a: dict[str, Any]) -> Any:
    x = _arr(a["self"])
    if x.ndim == 0:
        return x
    dims = _dims(a.get("dim"), x.ndim)
    return np.squeeze(x, axis=tuple(d for d in dims if x.shape[d] == 1))


@_rule("aten.expand.default")
def _expand(E: _Env, a: dict[str, Any]) -> Any:
    x = _arr(a["self"])
    size = [int(s) for s in a["size"]]
    lead = len(size) - x.ndim
    shape = [x.shape[i - lead] if s == -1 else s for i, s in enumerate(size)]
    return np.broadcast_to(x, tuple(shape))


def _promote_all(E: _Env, ts: Sequence[Any]) -> list[np.ndarray]:
    ts = [_arr(t) for t in ts]
    if any(E.is_float(t) for t in ts):
        return [E.F(t) for t in ts]
    return ts


@_rule("aten.cat.default")
def _cat(E: _Env, a: dict[str, Any]) -> Any:
    ts = _promote_all(E, a["tensors"])
    keep = [t for t in ts if not (t.ndim == 1 and t.shape[0] == 0)] or ts
    return np.concatenate(keep, axis=_ax(a.get("dim", 0), keep[0].ndim))


@_rule("aten.stack.default")
def _stack(E: _Env, a: dict[str, Any]) -> Any:
    ts = _promote_all(E, a["tensors"])
    return np.stack(ts, axis=int(a.get("dim", 0)) % (ts[0].ndim + 1))


@_rule("aten.slice.Tensor")
def _slice(E: _Env, a: dict[str, Any]) -> Any:
    x = _arr(a["self"])
    d = _ax(a.get("dim", 0), x.ndim)
    idx = [slice(None)] * x.ndim
    idx[d] = slice(a.get("start"), a.get("end"), a.get("step", 1))
    return x[tuple(idx)]


@_rule("aten.select.int")
def _select(E: _Env, a: dict[str, Any]) -> Any:
    x = _arr(a["self"])
    d = _ax(a["dim"], x.ndim)
    i = int(a["index"]) % x.shape[d]
    idx = [slice(None)] * x.ndim
    idx[d] = slice(i, i + 1)
    return np.squeeze(x[tuple(idx)], axis=d)  # a view, also for 0-d results


@_rule("aten.narrow.default")
def _narrow(E: _Env, a: dict[str, Any]) -> Any:
    s = int(a["start"])
    return _slice(E, {"self": a["self"], "dim": a["dim"], "start": s, "end": s + a["length"]})


def _index_tuple(indices: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(slice(None) if i is None else _arr(i) for i in indices)


@_rule("aten.index.Tensor")
def _index(E: _Env, a: dict[str, Any]) -> Any:
    return _arr(a["self"])[_index_tuple(a["indices"])]


@_rule("aten.index_put.default")
def _index_put(E: _Env, a: dict[str, Any]) -> Any:
    x = _arr(a["self"]).copy()
    v = a["values"]
    v = E.F(v) if x.dtype == object else _arr(v)
    idx = _index_tuple(a["indices"])
    if a.get("accumulate", False):
        np.add.at(x, idx, v)
    else:
        x[idx] = v
    return x


@_rule("aten.index_select.default")
def _index_select(E: _Env, a: dict[str, Any]) -> Any:
    x = _arr(a["self"])
    return np.take(x, _arr(a["index"]).reshape(-1), axis=_ax(a["dim"], x.ndim))


def _along(x: np.ndarray, index: np.ndarray, d: int) -> tuple[Any, ...]:
    """Full index tuple selecting ``x[..., index, ...]`` along axis ``d`` (gather/scatter)."""
    grid: list[Any] = list(np.indices(index.shape, sparse=True))
    grid[d] = index
    return tuple(grid)


@_rule("aten.gather.default")
def _gather(E: _Env, a: dict[str, Any]) -> Any:
    x, index = _arr(a["self"]), _arr(a["index"])
    if x.ndim == 0:
        return x.copy()
    return x[_along(x, index, _ax(a["dim"], x.ndim))]


def _scatter(reduce_add: bool) -> Rule:
    def rule(E: _Env, a: dict[str, Any]) -> Any:
        x, index = _arr(a["self"]).copy(), _arr(a["index"])
        d = _ax(a["dim"], x.ndim)
        src = a["src"] if "src" in a else a["value"]
        src = E.F(src) if x.dtype == object else _arr(src)
        if np.ndim(src):
            src = src[tuple(slice(0, s) for s in index.shape)]
        tup = _along(x, index, d)
        if reduce_add:
            np.add.at(x, tup, np.broadcast_to(src, index.shape))
        else:
            x[tup] = src
        return x

    return rule


RULES["aten.scatter.src"] = RULES["aten.scatter.value"] = _scatter(False)
RULES["aten.scatter_add.default"] = _scatter(True)


@_rule("aten.slice_scatter.default")
def _slice_scatter(E: _Env, a: dict[str, Any]) -> Any:
    x = _arr(a["self"]).copy()
    view = _slice(E, {**a, "self": x})
    view[...] = E.F(a["src"]) if x.dtype == object else a["src"]
    return x


@_rule("aten.select_scatter.default")
def _select_scatter(E: _Env, a: dict[str, Any]) -> Any:
    x = _arr(a["self"]).copy()
    view = _select(E, {**a, "self": x})
    view[...] = E.F(a["src"]) if x.dtype == object else a["src"]
    return x


@_rule("aten.split.Tensor", "aten.split_with_sizes.default")
def _split(E: _Env, a: dict[str, Any]) -> Any:
    x = _arr(a["self"])
    d = _ax(a.get("dim", 0), x.ndim)
    n = x.shape[d]
    if "split_sizes" in a:
        sizes = [int(s) for s in a["split_sizes"]]
    else:
        k = int(a["split_size"])
        sizes = [min(k, n - i) for i in range(0, n, k)] if n else [0]
    out, off = [], 0
    for s in sizes:
        out.append(_slice(E, {"self": x, "dim": d, "start": off, "end": off + s}))
        off += s
    return out


@_rule("aten.unbind.int")
def _unbind(E: _Env, a: dict[str, Any]) -> Any:
    x = _arr(a["self"])
    d = _ax(a.get("dim", 0), x.ndim)
    return [_select(E, {"self": x, "dim": d, "index": i}) for i in range(x.shape[d])]


RULES["aten.flip.default"] = lambda E, a: np.flip(
    _arr(a["self"]), axis=_dims(a["dims"], np.ndim(a["self"]))
).copy()


@_rule("aten.roll.default")
def _roll(E: _Env, a: dict[str, Any]) -> Any:
    x = _arr(a["self"])
    dims = list(a.get("dims") or [])
    shifts = [int(s) for s in a["shifts"]]
    if not dims:
        return np.roll(x.reshape(-1), shifts[0]).reshape(x.shape)
    return np.roll(x, shifts, axis=tuple(_ax(d, x.ndim) for d in dims))


RULES["aten.repeat.default"] = lambda E, a: np.tile(
    _arr(a["self"]), tuple(int(r) for r in a["repeats"])
)


@_rule("aten.constant_pad_nd.default")
def _pad(E: _Env, a: dict[str, Any]) -> Any:
    x = _arr(a["self"])
    pad = [int(p) for p in a["pad"]]
    value = a.get("value", 0)
    out = E.coerce(np.full(tuple(E.val.shape), E.scalar(value), dtype=object), E.val.dtype)
    src: list[slice] = [slice(None)] * x.ndim
    dst: list[slice] = [slice(None)] * x.ndim
    for i in range(len(pad) // 2):
        d = x.ndim - 1 - i
        lo, hi, n = pad[2 * i], pad[2 * i + 1], x.shape[d]
        src[d] = slice(max(-lo, 0), n - max(-hi, 0))
        dst[d] = slice(max(lo, 0), max(lo, 0) + max(n - max(-lo, 0) - max(-hi, 0), 0))
    out[tuple(dst)] = x[tuple(src)] if out.dtype != object else E.F(x)[tuple(src)]
    return out


@_rule("aten.embedding.default")
def _embedding(E: _Env, a: dict[str, Any]) -> Any:
    return np.take(_arr(a["weight"]), _arr(a["indices"]), axis=0)


RULES["aten.unsafe_split.Tensor"] = RULES["aten.split.Tensor"]
RULES["aten.unsafe_split_with_sizes.default"] = RULES["aten.split_with_sizes.default"]


@_rule("aten.diagonal.default")
def _diagonal(E: _Env, a: dict[str, Any]) -> Any:
    x = _arr(a["self"])
    d1, d2 = _ax(a.get("dim1", 0), x.ndim), _ax(a.get("dim2", 1), x.ndim)
    view = np.diagonal(x, offset=int(a.get("offset", 0)), axis1=d1, axis2=d2)
    if x.flags.writeable:  # NumPy hands out diagonals read-only; PyTorch's can be written
        view.setflags(write=True)
    return view


@_rule("aten.diag_embed.default")
def _diag_embed(E: _Env, a: dict[str, Any]) -> Any:
    x = _arr(a["self"])
    out = E.filled(0)
    d1, d2 = _ax(a.get("dim1", -2), out.ndim), _ax(a.get("dim2", -1), out.ndim)
    view = np.diagonal(out, offset=int(a.get("offset", 0)), axis1=d1, axis2=d2)
    view.setflags(write=True)
    view[...] = E.F(x) if out.dtype == object else x
    return out


def _tri(lower: bool) -> Rule:
    def rule(E: _Env, a: dict[str, Any]) -> Any:
        x = _arr(a["self"])
        k = int(a.get("diagonal", 0))
        rows, cols = np.indices(x.shape[-2:])
        keep = (cols - rows <= k) if lower else (cols - rows >= k)
        zero = E.zero if x.dtype == object else np.zeros((), x.dtype)
        return np.where(keep, x, zero)

    return rule


RULES["aten.tril.default"] = _tri(True)
RULES["aten.triu.default"] = _tri(False)


@_rule("aten.upsample_nearest2d.default", "aten.upsample_nearest2d.vec")
def _upsample_nearest2d(E: _Env, a: dict[str, Any]) -> Any:
    x = _arr(a["input"] if "input" in a else a["self"])
    H, W = x.shape[-2:]
    oh, ow = (int(v) for v in E.val.shape[-2:])
    sh, sw = a.get("scales_h"), a.get("scales_w")
    if a.get("scale_factors"):
        sh, sw = a["scale_factors"]
    # PyTorch's "nearest": src = floor(dst * scale), scale = 1 / scale_factor or in / out
    fh = (1.0 / sh) if sh else H / oh
    fw = (1.0 / sw) if sw else W / ow
    r = np.minimum(np.floor(np.arange(oh) * np.float32(fh)).astype(np.int64), H - 1)
    c = np.minimum(np.floor(np.arange(ow) * np.float32(fw)).astype(np.int64), W - 1)
    return x[..., r[:, None], c[None, :]]


# ------------------------------------------------------------------ reductions


def _sum_rule(E: _Env, a: dict[str, Any]) -> Any:
    x = _arr(a["self"])
    axes = _dims(a.get("dim"), x.ndim)
    keep = bool(a.get("keepdim", False))
    if x.dtype != object:
        return np.sum(x.astype(np.int64), axis=axes, keepdims=keep)
    if x.size == 0:
        return E.F(np.zeros(np.sum(np.zeros(x.shape), axis=axes, keepdims=keep).shape))
    return E.O(np.sum(x, axis=axes, keepdims=keep))


RULES["aten.sum.default"] = RULES["aten.sum.dim_IntList"] = _sum_rule


@_rule("aten.mean.default", "aten.mean.dim")
def _mean(E: _Env, a: dict[str, Any]) -> Any:
    x = E.F(a["self"])
    axes = _dims(a.get("dim"), x.ndim)
    count = int(np.prod([x.shape[d] for d in axes], dtype=np.int64)) if x.ndim else 1
    return E.map(lambda s: E.fns["div"](s, E.mpf(count)), _sum_rule(E, {**a, "self": x}))


@_rule("aten.prod.default", "aten.prod.dim_int")
def _prod(E: _Env, a: dict[str, Any]) -> Any:
    x = _arr(a["self"])
    axes = _dims(a.get("dim"), x.ndim)
    keep = bool(a.get("keepdim", False))
    if x.dtype != object:
        return np.prod(x.astype(np.int64), axis=axes, keepdims=keep)
    return E.O(np.prod(x, axis=axes, keepdims=keep)) if x.size else E.filled(1)


def _extreme(name: str) -> Rule:
    def rule(E: _Env, a: dict[str, Any]) -> Any:
        x = _arr(a["self"])
        axes = _dims(a.get("dim"), x.ndim)
        keep = bool(a.get("keepdim", False))
        if x.dtype != object or x.ndim == 0:
            return (np.max if name == "max" else np.min)(x, axis=axes, keepdims=keep)
        fn = E.uf(E.fns[name], 2)
        out = x
        for d in sorted(axes, reverse=True):
            out = fn.reduce(out, axis=d, keepdims=keep)
        return E.O(out)

    return rule


RULES["aten.amax.default"] = RULES["aten.max.default"] = _extreme("max")
RULES["aten.amin.default"] = RULES["aten.min.default"] = _extreme("min")


def _arg(name: str) -> Rule:
    def rule(E: _Env, a: dict[str, Any]) -> Any:
        x = _arr(a["self"])
        keep = bool(a.get("keepdim", False))
        fn = np.argmax if name == "max" else np.argmin
        if a.get("dim") is None:
            i = fn(x.reshape(-1))
            return np.full((1,) * x.ndim if keep else (), i, dtype=np.int64)
        d = _ax(a["dim"], x.ndim)
        if x.ndim == 0:
            return np.zeros((), dtype=np.int64)
        return fn(x, axis=d, keepdims=keep).astype(np.int64)

    return rule


RULES["aten.argmax.default"] = _arg("max")
RULES["aten.argmin.default"] = _arg("min")


def _extreme_dim(name: str) -> Rule:
    def rule(E: _Env, a: dict[str, Any]) -> Any:
        x = _arr(a["self"])
        if x.ndim == 0:
            return x.copy(), np.zeros((), dtype=np.int64)
        d = _ax(a["dim"], x.ndim)
        keep = bool(a.get("keepdim", False))
        idx = (np.argmax if name == "max" else np.argmin)(x, axis=d, keepdims=True)
        vals = np.take_along_axis(x, idx, axis=d)
        if not keep:
            vals, idx = np.squeeze(vals, axis=d), np.squeeze(idx, axis=d)
        return vals, idx.astype(np.int64)

    return rule


RULES["aten.max.dim"] = _extreme_dim("max")
RULES["aten.min.dim"] = _extreme_dim("min")


def _max_keep(E: _Env, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """Max over ``axes`` (keepdims), with infinities replaced by 0 (a safe shift)."""
    m = x
    for d in axes:
        m = E.uf(E.fns["max"], 2).reduce(m, axis=d, keepdims=True)
    return E.O(np.where(E.uf(E.ctx.isinf)(E.O(m)).astype(bool), E.zero, m))


@_rule("aten.logsumexp.default")
def _logsumexp(E: _Env, a: dict[str, Any]) -> Any:
    x = E.F(a["self"])
    if x.ndim == 0:
        return x.copy()
    axes = _dims(a.get("dim"), x.ndim)
    m = _max_keep(E, x, axes)
    s = np.sum(E.map(E.ctx.exp, x - m), axis=axes, keepdims=True)
    out = E.map(E.fns["log"], s) + m
    return E.O(out if a.get("keepdim", False) else np.squeeze(out, axis=axes))


@_rule("aten._softmax.default", "aten.softmax.int")
def _softmax(E: _Env, a: dict[str, Any]) -> Any:
    x = E.F(a["self"])
    if x.ndim == 0:
        return E.filled(1)
    d = (_ax(a["dim"], x.ndim),)
    e = E.map(E.ctx.exp, x - _max_keep(E, x, d))
    return E.O(e / np.sum(e, axis=d, keepdims=True))


@_rule("aten._log_softmax.default", "aten.log_softmax.int")
def _log_softmax(E: _Env, a: dict[str, Any]) -> Any:
    x = E.F(a["self"])
    if x.ndim == 0:
        return E.filled(0)
    d = (_ax(a["dim"], x.ndim),)
    z = E.O(x - _max_keep(E, x, d))
    return E.O(z - E.map(E.fns["log"], np.sum(E.map(E.ctx.exp, z), axis=d, keepdims=True)))


def _cum(fn: Callable[..., Any]) -> Rule:
    def rule(E: _Env, a: dict[str, Any]) -> Any:
        x = _arr(a["self"])
        if x.ndim == 0:
            return x.copy()
        if x.dtype != object:
            x = x.astype(np.int64)
        return fn(x, axis=_ax(a["dim"], x.ndim))

    return rule


RULES["aten.cumsum.default"] = _cum(np.cumsum)
RULES["aten.cumprod.default"] = _cum(np.cumprod)


def _var(E: _Env, a: dict[str, Any]) -> np.ndarray:
    x = E.F(a["self"])
    axes = _dims(a.get("dim"), x.ndim)
    keep = bool(a.get("keepdim", False))
    corr = a.get("correction")
    corr = 1 if corr is None else corr
    n = int(np.prod([x.shape[d] for d in axes], dtype=np.int64)) if x.ndim else 1
    mean = np.sum(x, axis=axes, keepdims=True) / E.mpf(n) if x.ndim else x
    dev = E.O(x - mean)
    ss = np.sum(dev * dev, axis=axes, keepdims=keep) if x.ndim else dev * dev
    return E.map(lambda s: E.fns["div"](s, E.scalar(max(n - corr, 0))), ss)


RULES["aten.var.correction"] = _var
RULES["aten.std.correction"] = lambda E, a: E.map(E.fns["sqrt"], _var(E, a))


@_rule("aten.linalg_vector_norm.default")
def _vector_norm(E: _Env, a: dict[str, Any]) -> Any:
    x = E.map(abs, a["self"])
    axes = _dims(a.get("dim"), x.ndim)
    keep = bool(a.get("keepdim", False))
    p = a.get("ord", 2)
    if x.ndim == 0:
        return x if p != 0 else E.map(lambda v: E.one if v != 0 else E.zero, x)
    if p == math.inf:
        return _extreme("max")(E, {"self": x, "dim": list(axes), "keepdim": keep})
    if p == -math.inf:
        return _extreme("min")(E, {"self": x, "dim": list(axes), "keepdim": keep})
    if p == 0:
        return E.O(np.sum(E.map(lambda v: E.one if v != 0 else E.zero, x), axis=axes))
    pp = E.scalar(p)
    s = np.sum(E.map(lambda v: v**pp if p != 2 else v * v, x), axis=axes, keepdims=keep)
    return E.map(lambda v: E.ctx.sqrt(v) if p == 2 else E.fns["pow"](v, 1 / pp), s)


@_rule("aten.sort.default", "aten.sort.stable")
def _sort(E: _Env, a: dict[str, Any]) -> Any:
    x = _arr(a["self"])
    if x.ndim == 0:
        return x.copy(), np.zeros((), dtype=np.int64)
    d = _ax(a.get("dim", -1), x.ndim)
    key = x.astype(np.int64) if x.dtype == bool else x
    if a.get("descending", False):
        key = E.O(-key) if key.dtype == object else -key
    idx = np.argsort(key, axis=d, kind="stable")
    return np.take_along_axis(x, idx, axis=d), idx.astype(np.int64)


@_rule("aten.topk.default")
def _topk(E: _Env, a: dict[str, Any]) -> Any:
    x = _arr(a["self"])
    d = _ax(a.get("dim", -1), x.ndim) if x.ndim else 0
    vals, idx = _sort(E, {"self": x, "dim": d, "descending": a.get("largest", True)})
    k = int(a["k"])
    if x.ndim == 0:
        return vals, idx
    sl = [slice(None)] * x.ndim
    sl[d] = slice(0, k)
    return vals[tuple(sl)], idx[tuple(sl)]


# ------------------------------------------------------------------ linear algebra


def _matmul(E: _Env, x: Any, y: Any) -> np.ndarray:
    x, y = _arr(x), _arr(y)
    if x.dtype == object or y.dtype == object:
        x, y = E.F(x), E.F(y)
        if x.shape[-1] == 0:
            shape = np.matmul(np.zeros(x.shape), np.zeros(y.shape)).shape
            return E.F(np.zeros(shape))
    return E.O(np.matmul(x, y)) if x.dtype == object else np.matmul(x, y)


for _n in ("mm.default", "bmm.default", "matmul.default", "mv.default", "dot.default"):
    _second = {"mv.default": "vec", "dot.default": "tensor"}.get(_n, "mat2")
    RULES[f"aten.{_n}"] = (lambda k: lambda E, a: _matmul(E, a["self"], a.get(k, a.get("other"))))(
        _second
    )


def _addmm_like(first: str, second: str) -> Rule:
    def rule(E: _Env, a: dict[str, Any]) -> Any:
        prod = _matmul(E, a[first], a[second])
        beta, alpha = a.get("beta", 1), a.get("alpha", 1)
        if alpha != 1:
            prod = E.O(prod * E.scalar(alpha))
        if beta == 0:
            return prod
        if not E.is_float(prod):
            return prod + _arr(a["self"]) * beta
        s = E.F(a["self"])
        return E.O(prod + (s if beta == 1 else s * E.scalar(beta)))

    return rule


RULES["aten.addmm.default"] = _addmm_like("mat1", "mat2")
RULES["aten.baddbmm.default"] = _addmm_like("batch1", "batch2")
RULES["aten.addmv.default"] = _addmm_like("mat", "vec")


@_rule("aten.linear.default")
def _linear(E: _Env, a: dict[str, Any]) -> Any:
    out = _matmul(E, a["input"], np.swapaxes(_arr(a["weight"]), -1, -2))
    return out if a.get("bias") is None else E.O(out + E.F(a["bias"]))


# ------------------------------------------------------------------ neural-network layers


@_rule("aten.convolution.default", "aten._convolution.default")
def _convolution(E: _Env, a: dict[str, Any]) -> Any:
    if a.get("transposed", False):
        raise UnsupportedOperatorError("aten.convolution.default with transposed=True")
    x, w = E.F(a["input"]), E.F(a["weight"])
    nd = w.ndim - 2
    stride, pad, dil = (_tup(a[k], nd) for k in ("stride", "padding", "dilation"))
    groups = int(a.get("groups", 1))
    N, C = x.shape[:2]
    Cout, Cg = w.shape[:2]
    Og = Cout // groups
    if any(pad):
        xp = np.full((N, C, *[x.shape[2 + i] + 2 * pad[i] for i in range(nd)]), E.zero, object)
        xp[
            (slice(None), slice(None), *[slice(p, p + x.shape[2 + i]) for i, p in enumerate(pad)])
        ] = x
    else:
        xp = x
    out_sp = tuple(int(s) for s in E.val.shape[2:])
    out = np.full((N, Cout, *out_sp), E.zero, dtype=object)
    for k in itertools.product(*[range(s) for s in w.shape[2:]]):
        sl = tuple(
            slice(k[i] * dil[i], k[i] * dil[i] + stride[i] * (out_sp[i] - 1) + 1, stride[i])
            for i in range(nd)
        )
        win = xp[(slice(None), slice(None), *sl)]  # (N, C, *out)
        for g in range(groups):
            taps: tuple[Any, ...] = (slice(g * Og, (g + 1) * Og), slice(None), *k)
            wg = w[taps]  # (Og, Cg)
            xg = np.moveaxis(win[:, g * Cg : (g + 1) * Cg], 1, -1)  # (N, *out, Cg)
            out[:, g * Og : (g + 1) * Og] += np.moveaxis(np.matmul(xg, wg.T), -1, 1)
    if a.get("bias") is not None:
        out = out + E.F(a["bias"]).reshape((Cout,) + (1,) * nd)
    return E.O(out)


@_rule("aten.convolution_backward.default")
def _convolution_backward(E: _Env, a: dict[str, Any]) -> Any:
    """Input, weight and bias gradients of a convolution (for second-derivative checks)."""
    if a.get("transposed", False):
        raise UnsupportedOperatorError("aten.convolution_backward.default with transposed=True")
    g, x, w = E.F(a["grad_output"]), E.F(a["input"]), E.F(a["weight"])
    nd = w.ndim - 2
    stride, pad, dil = (_tup(a[k], nd) for k in ("stride", "padding", "dilation"))
    groups = int(a.get("groups", 1))
    N, C = x.shape[:2]
    Cout, Cg = w.shape[:2]
    Og = Cout // groups
    sp = x.shape[2:]
    xp = np.full((N, C, *[sp[i] + 2 * pad[i] for i in range(nd)]), E.zero, dtype=object)
    inner: tuple[Any, ...] = (
        slice(None),
        slice(None),
        *[slice(pad[i], pad[i] + sp[i]) for i in range(nd)],
    )
    xp[inner] = x
    gxp = np.full(xp.shape, E.zero, dtype=object)
    gw = np.full(w.shape, E.zero, dtype=object)
    out_sp = g.shape[2:]
    for k in itertools.product(*[range(s) for s in w.shape[2:]]):
        sl = tuple(
            slice(k[i] * dil[i], k[i] * dil[i] + stride[i] * (out_sp[i] - 1) + 1, stride[i])
            for i in range(nd)
        )
        for grp in range(groups):
            o_sl, c_sl = slice(grp * Og, (grp + 1) * Og), slice(grp * Cg, (grp + 1) * Cg)
            gg = np.moveaxis(g[:, o_sl], 1, -1)  # (N, *out, Og)
            xg = np.moveaxis(xp[(slice(None), c_sl, *sl)], 1, -1)  # (N, *out, Cg)
            taps: tuple[Any, ...] = (o_sl, slice(None), *k)
            gw[taps] += np.matmul(gg.reshape(-1, Og).T, xg.reshape(-1, Cg))
            win: tuple[Any, ...] = (slice(None), c_sl, *sl)
            gxp[win] += np.moveaxis(np.matmul(gg, w[taps]), -1, 1)
    mask = list(a.get("output_mask", [True, True, True]))
    grad_bias = E.O(np.sum(g, axis=(0, *range(2, g.ndim))))
    return (
        E.O(gxp[inner]) if mask[0] else None,
        E.O(gw) if mask[1] else None,
        grad_bias if mask[2] else None,
    )


def _pool_windows(
    E: _Env, x: np.ndarray, k: tuple[int, ...], s: tuple[int, ...], p: tuple[int, ...],
    d: tuple[int, ...], out_sp: tuple[int, ...], fill: Any,
) -> tuple[np.ndarray, list[tuple[int, int]]]:  # fmt: skip
    """Stack of the 2-D pooling windows ``(..., oh, ow, kh*kw)`` of a padded input."""
    H, W = x.shape[-2:]
    xp = np.full(
        (*x.shape[:-2], max(H + 2 * p[0], (out_sp[0] - 1) * s[0] + d[0] * (k[0] - 1) + 1),
         max(W + 2 * p[1], (out_sp[1] - 1) * s[1] + d[1] * (k[1] - 1) + 1)),
        fill, dtype=object,
    )  # fmt: skip
    xp[..., p[0] : p[0] + H, p[1] : p[1] + W] = x
    wins, offs = [], []
    for i in range(k[0]):
        for j in range(k[1]):
            r0, c0 = i * d[0], j * d[1]
            rows = slice(r0, r0 + s[0] * (out_sp[0] - 1) + 1, s[0])
            cols = slice(c0, c0 + s[1] * (out_sp[1] - 1) + 1, s[1])
            wins.append(xp[..., rows, cols])
            offs.append((r0 - p[0], c0 - p[1]))
    return np.stack(wins, axis=-1), offs


@_rule("aten.max_pool2d_with_indices.default", "aten.max_pool2d.default")
def _max_pool2d(E: _Env, a: dict[str, Any]) -> Any:
    x = E.F(a["self"])
    k = _tup(a["kernel_size"], 2)
    s = _tup(a.get("stride") or k, 2)
    p, d = _tup(a.get("padding", 0), 2), _tup(a.get("dilation", 1), 2)
    val = E.val[0] if isinstance(E.val, (tuple, list)) else E.val
    out_sp = tuple(int(v) for v in val.shape[-2:])
    wins, offs = _pool_windows(E, x, k, s, p, d, out_sp, -E.inf)
    j = np.argmax(wins, axis=-1)
    vals = np.take_along_axis(wins, j[..., None], axis=-1)[..., 0]
    if not isinstance(E.val, (tuple, list)):
        return vals
    W = x.shape[-1]
    r = np.arange(out_sp[0])[:, None] * s[0] + np.array([o[0] for o in offs])[j]
    c = np.arange(out_sp[1])[None, :] * s[1] + np.array([o[1] for o in offs])[j]
    return vals, (r * W + c).astype(np.int64)


@_rule("aten.avg_pool2d.default")
def _avg_pool2d(E: _Env, a: dict[str, Any]) -> Any:
    x = E.F(a["self"])
    k = _tup(a["kernel_size"], 2)
    s = _tup(a.get("stride") or k, 2)
    p = _tup(a.get("padding", 0), 2)
    H, W = x.shape[-2:]
    out_sp = tuple(int(v) for v in E.val.shape[-2:])
    wins, _ = _pool_windows(E, x, k, s, p, (1, 1), out_sp, E.zero)
    total = np.sum(wins, axis=-1)
    div = a.get("divisor_override")
    if div:
        return E.O(total / E.mpf(int(div)))
    counts = np.empty(out_sp, dtype=np.int64)
    for i in range(out_sp[0]):
        for j in range(out_sp[1]):
            h0, w0 = i * s[0] - p[0], j * s[1] - p[1]
            h1, w1 = min(h0 + k[0], H + p[0]), min(w0 + k[1], W + p[1])
            if a.get("count_include_pad", True):
                counts[i, j] = (h1 - h0) * (w1 - w0)
            else:
                counts[i, j] = (min(h1, H) - max(h0, 0)) * (min(w1, W) - max(w0, 0))
    return E.O(total / E.F(counts))


@_rule("aten._adaptive_avg_pool2d.default", "aten.adaptive_avg_pool2d.default")
def _adaptive_avg_pool2d(E: _Env, a: dict[str, Any]) -> Any:
    x = E.F(a["self"])
    H, W = x.shape[-2:]
    oh, ow = (int(v) for v in E.val.shape[-2:])
    out = np.empty((*x.shape[:-2], oh, ow), dtype=object)
    for i in range(oh):
        h0, h1 = (i * H) // oh, -(-((i + 1) * H) // oh)
        for j in range(ow):
            w0, w1 = (j * W) // ow, -(-((j + 1) * W) // ow)
            blk = x[..., h0:h1, w0:w1]
            out[..., i, j] = np.sum(blk, axis=(-2, -1)) / E.mpf((h1 - h0) * (w1 - w0))
    return out


@_rule("aten.native_layer_norm.default")
def _layer_norm(E: _Env, a: dict[str, Any]) -> Any:
    x = E.F(a["input"])
    k = len(a["normalized_shape"])
    axes = tuple(range(x.ndim - k, x.ndim))
    n = E.mpf(int(np.prod(x.shape[x.ndim - k :], dtype=np.int64)))
    mean = E.O(np.sum(x, axis=axes, keepdims=True) / n)
    dev = E.O(x - mean)
    var = E.O(np.sum(dev * dev, axis=axes, keepdims=True) / n)
    rstd = E.map(E.fns["rsqrt"], var + E.scalar(a["eps"]))
    out = dev * rstd
    if a.get("weight") is not None:
        out = out * E.F(a["weight"])
    if a.get("bias") is not None:
        out = out + E.F(a["bias"])
    return E.O(out), mean, rstd


def _batch_norm(E: _Env, a: dict[str, Any], training: bool) -> Any:
    x = E.F(a["input"])
    shape = (1, -1) + (1,) * (x.ndim - 2)
    axes = tuple(d for d in range(x.ndim) if d != 1)
    eps = E.scalar(a["eps"])
    rm, rv = a.get("running_mean"), a.get("running_var")
    if training:
        n = int(np.prod([x.shape[d] for d in axes], dtype=np.int64))
        mean = E.O(np.sum(x, axis=axes) / E.mpf(n))
        dev = E.O(x - mean.reshape(shape))
        ss = E.O(np.sum(dev * dev, axis=axes))
        var = E.O(ss / E.mpf(n))
        mom = E.scalar(a.get("momentum", 0.1))
        if rm is not None and rv is not None and rm.dtype == object and n > 1:
            rm[...] = (1 - mom) * rm + mom * mean
            rv[...] = (1 - mom) * rv + mom * ss / E.mpf(n - 1)
    else:
        mean, var = E.F(rm), E.F(rv)
        dev = E.O(x - mean.reshape(shape))
    invstd = E.map(E.fns["rsqrt"], var + eps)
    out = dev * invstd.reshape(shape)
    if a.get("weight") is not None:
        out = out * E.F(a["weight"]).reshape(shape)
    if a.get("bias") is not None:
        out = out + E.F(a["bias"]).reshape(shape)
    if training:
        return E.O(out), mean, invstd
    extra = [np.empty(tuple(v.shape), dtype=object) for v in E.val[1:3]]
    return E.O(out), *extra


RULES["aten.native_batch_norm.default"] = lambda E, a: _batch_norm(E, a, bool(a["training"]))
RULES["aten._native_batch_norm_legit_no_training.default"] = lambda E, a: _batch_norm(E, a, False)
RULES["aten._native_batch_norm_legit.default"] = lambda E, a: _batch_norm(E, a, bool(a["training"]))


def _reduce(E: _Env, loss: np.ndarray, reduction: int) -> Any:
    if reduction == 0:
        return loss
    s = E.O(np.sum(loss))
    return s if reduction == 2 else E.O(s / E.mpf(max(loss.size, 1)))


@_rule("aten.mse_loss.default")
def _mse_loss(E: _Env, a: dict[str, Any]) -> Any:
    d = E.O(E.F(a["self"]) - E.F(a["target"]))
    return _reduce(E, E.O(d * d), int(a.get("reduction", 1)))


@_rule("aten.binary_cross_entropy_with_logits.default")
def _bce_logits(E: _Env, a: dict[str, Any]) -> Any:
    c = E.ctx
    x, t = E.F(a["self"]), E.F(a["target"])
    sp = E.map(lambda v: c.log1p(c.exp(-abs(v))) + (-v if v < 0 else E.zero), x)
    pw = a.get("pos_weight")
    lw = 1 if pw is None else (1 + (E.F(pw) - 1) * t)
    loss = (1 - t) * x + lw * sp
    if a.get("weight") is not None:
        loss = loss * E.F(a["weight"])
    return _reduce(E, E.O(loss), int(a.get("reduction", 1)))


@_rule("aten.nll_loss_forward.default")
def _nll_loss(E: _Env, a: dict[str, Any]) -> Any:
    x, t = E.F(a["self"]), _arr(a["target"]).astype(np.int64)
    one_d = x.ndim == 1
    if one_d:
        x, t = x[None], t.reshape(1)
    ign = int(a.get("ignore_index", -100))
    keep = t != ign
    tt = np.where(keep, t, 0)
    w = E.F(np.ones(x.shape[1])) if a.get("weight") is None else E.F(a["weight"])
    wt = np.where(keep, w[tt], E.zero)
    loss = E.O(-x[np.arange(x.shape[0]), tt] * wt)
    total = E.O(np.sum(wt))
    red = int(a.get("reduction", 1))
    if red == 0:
        return (loss[0] if one_d else loss), total
    s = E.O(np.sum(loss))
    if red == 2:
        return s, total
    return E.map(E.fns["div"], s, total), total


@_rule("aten.huber_loss.default")
def _huber_loss(E: _Env, a: dict[str, Any]) -> Any:
    delta = E.scalar(a.get("delta", 1.0))

    def f(d: Any) -> Any:
        d = abs(d)
        return d * d / 2 if d < delta else delta * (d - delta / 2)

    diff = E.O(E.F(a["self"]) - E.F(a["target"]))
    return _reduce(E, E.map(f, diff), int(a.get("reduction", 1)))


@_rule("aten.smooth_l1_loss.default")
def _smooth_l1_loss(E: _Env, a: dict[str, Any]) -> Any:
    beta = E.scalar(a.get("beta", 1.0))

    def f(d: Any) -> Any:
        d = abs(d)
        return d * d / 2 / beta if d < beta else d - beta / 2

    diff = E.O(E.F(a["self"]) - E.F(a["target"]))
    return _reduce(E, E.map(f, diff), int(a.get("reduction", 1)))


@_rule("aten.native_group_norm.default")
def _group_norm(E: _Env, a: dict[str, Any]) -> Any:
    x = E.F(a["input"])
    N, C, G = int(a["N"]), int(a["C"]), int(a["group"])
    g = x.reshape(N, G, -1)
    n = E.mpf(g.shape[-1])
    mean = E.O(np.sum(g, axis=-1, keepdims=True) / n)
    dev = E.O(g - mean)
    var = E.O(np.sum(dev * dev, axis=-1, keepdims=True) / n)
    rstd = E.map(E.fns["rsqrt"], var + E.scalar(a["eps"]))
    out = E.O(dev * rstd).reshape(x.shape)
    shape = (1, C) + (1,) * (x.ndim - 2)
    if a.get("weight") is not None:
        out = out * E.F(a["weight"]).reshape(shape)
    if a.get("bias") is not None:
        out = out + E.F(a["bias"]).reshape(shape)
    return E.O(out), mean.reshape(N, G), rstd.reshape(N, G)


@_rule("aten.trace.default")
def _trace(E: _Env, a: dict[str, Any]) -> Any:
    d = np.diagonal(_arr(a["self"]))
    return E.O(np.sum(d)) if d.dtype == object and d.size else np.sum(d)


@_rule("aten._safe_softmax.default")
def _safe_softmax(E: _Env, a: dict[str, Any]) -> Any:
    x = E.F(a["self"])
    if x.ndim == 0:
        return E.filled(1)
    d = _ax(a["dim"], x.ndim)
    masked = np.all(E.uf(lambda v: v == -E.inf)(x).astype(bool), axis=d, keepdims=True)
    return np.where(masked, E.zero, _softmax(E, {"self": x, "dim": d}))


@_rule("aten._scaled_dot_product_flash_attention_for_cpu.default")
def _sdpa_cpu(E: _Env, a: dict[str, Any]) -> Any:
    if a.get("dropout_p", 0.0):
        raise UnsupportedOperatorError("scaled dot-product attention with dropout is random")
    q, k, v = E.F(a["query"]), E.F(a["key"]), E.F(a["value"])
    scale = a.get("scale")
    scale = E.one / E.ctx.sqrt(q.shape[-1]) if scale is None else E.scalar(scale)
    s = E.O(np.matmul(q, np.swapaxes(k, -1, -2)) * scale)
    L, S = s.shape[-2:]
    mask = a.get("attn_mask")
    if mask is not None:
        mask = _arr(mask)
        s = E.O(np.where(mask, s, -E.inf) if mask.dtype == bool else s + E.F(mask))
    if a.get("is_causal", False):
        s = E.O(np.where(np.tril(np.ones((L, S), dtype=bool)), s, -E.inf))
    lse = _logsumexp(E, {"self": s, "dim": [-1], "keepdim": False})
    p = _safe_softmax(E, {"self": s, "dim": -1})
    return E.O(np.matmul(p, v)), lse


# ------------------------------------------------------------------ in-place writes


@_rule("aten.copy_.default", "aten.copy.default")
def _copy_(E: _Env, a: dict[str, Any]) -> Any:
    dst = _arr(a["self"])
    src = E.F(a["src"]) if dst.dtype == object else E.coerce(_arr(a["src"]), E.val.dtype)
    dst = dst if a.get("_inplace") else dst.copy()
    dst[...] = src
    return dst


@_rule("aten.fill_.Scalar", "aten.fill_.Tensor", "aten.fill.Scalar", "aten.fill.Tensor")
def _fill(E: _Env, a: dict[str, Any]) -> Any:
    dst = _arr(a["self"])
    v = a["value"]
    dst = dst if a.get("_inplace") else dst.copy()
    dst[...] = E.F(v) if dst.dtype == object else E.coerce(_arr(v), E.val.dtype)
    return dst


@_rule("aten.zero_.default", "aten.zero.default")
def _zero(E: _Env, a: dict[str, Any]) -> Any:
    dst = _arr(a["self"])
    dst = dst if a.get("_inplace") else dst.copy()
    dst[...] = E.zero if dst.dtype == object else 0
    return dst


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


# ------------------------------------------------------------------ capture and checks


def capture_graph(
    fn: Callable[..., Any], primals: Sequence[Any], decompositions: dict[Any, Any] | None = None
) -> Any:
    """Trace ``fn(*primals)`` to an ATen-level ``torch.fx.GraphModule``.

    Parameters
    ----------
    fn : callable
        Takes tensors shaped like ``primals`` and returns one tensor.
    primals : sequence of Tensor
        Example inputs; the trace runs the function on copies of them.
    decompositions : dict, optional
        ``{OpOverload: python function}``: operators to decompose while
        tracing (see :func:`_decompositions_for`).

    Returns
    -------
    torch.fx.GraphModule
        Traced with ``make_fx(fn, tracing_mode="real")``.

    Raises
    ------
    GraphCaptureError
        The trace failed (data-dependent Python control flow, ``.item()``...).
    """
    from torch.fx.experimental.proxy_tensor import make_fx

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            traced = make_fx(fn, decomposition_table=decompositions, tracing_mode="real")
            return traced(*[p.detach().clone() for p in primals])
    except Exception as exc:  # noqa: BLE001 - any tracing failure is reported the same way
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        hint = ""
        if "_local_scalar_dense" in str(exc):
            hint = (
                " (a tensor value is read by Python: .item(), float(), bool(), or an `if` on a "
                "tensor; the graph would be valid only at the traced point)"
            )
        raise GraphCaptureError(
            f"the function could not be traced to an ATen graph{hint}: "
            f"{type(exc).__name__}: {text[:200]}"
        ) from exc


def _decompositions_for(gm: Any, known: dict[Any, Any]) -> dict[Any, Any]:
    """PyTorch's own decompositions of the graph's operators that have no mpmath rule.

    ``torch._decomp.decomposition_table`` rewrites many composite and
    backward operators (``tanh_backward``, ``_log_softmax_backward_data``,
    ``select_backward``...) into core ones; a graph re-traced with them can
    then be covered. Random operators are left alone.
    """
    import torch

    try:
        from torch._decomp import decomposition_table
    except ImportError:  # pragma: no cover - present in every supported torch
        return {}
    out = {}
    for node in gm.graph.nodes:
        op = node.target
        if node.op != "call_function" or not isinstance(op, torch._ops.OpOverload):
            continue
        if op in known or _base_rule(str(op))[0] is not None:
            continue
        if torch.Tag.nondeterministic_seeded in op.tags:
            continue
        if op in decomposition_table:
            out[op] = decomposition_table[op]
    return out


def unsupported_operators(gm: Any) -> list[str]:
    """Operators of a captured graph that the mp interpreter cannot evaluate.

    Parameters
    ----------
    gm : torch.fx.GraphModule
        From :func:`capture_graph`.

    Returns
    -------
    list of str
        Each entry names an operator and why (no rule, random, complex
        values, transposed convolution...); empty when all are covered.
    """
    import torch

    bad: list[str] = []
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output", "get_attr"):
            val = getattr(gm, node.target, None) if node.op == "get_attr" else None
            if isinstance(val, torch.Tensor) and val.is_complex():
                bad.append(f"{node.target} (a complex constant)")
            continue
        if node.op != "call_function":
            bad.append(f"{node.op} {node.target}")
            continue
        if node.target is operator.getitem:
            continue
        if not isinstance(node.target, torch._ops.OpOverload):
            bad.append(f"{node.target} (not an ATen operator)")
            continue
        name = str(node.target)
        bound = _bind(node.target, node.args, node.kwargs)
        if torch.Tag.nondeterministic_seeded in node.target.tags and bound.get("dropout_p", 1):
            bad.append(f"{name} (random)")
            continue
        rule, _ = _base_rule(name)
        if rule is None:
            bad.append(name)
            continue
        val = node.meta.get("val")
        vals = val if isinstance(val, (tuple, list)) else [val]
        if any(isinstance(v, torch.Tensor) and v.is_complex() for v in vals):
            bad.append(f"{name} (complex values)")
        elif bound.get("transposed"):
            bad.append(f"{name} (transposed)")
    return list(dict.fromkeys(bad))


def _bind(op: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Arguments of an ATen overload by name, with the schema's defaults filled in."""
    out: dict[str, Any] = {}
    schema_args = op._schema.arguments
    for i, arg in enumerate(schema_args):
        if i < len(args) and not arg.kwarg_only:
            out[arg.name] = args[i]
        elif arg.name in kwargs:
            out[arg.name] = kwargs[arg.name]
        elif arg.has_default_value():
            out[arg.name] = arg.default_value
    return out


def _graph_signature(gm: Any) -> tuple[str, list[Any]]:
    import torch

    consts = []
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            v = getattr(gm, node.target)
            consts.append(v.detach() if isinstance(v, torch.Tensor) else v)
    return gm.code, consts


def _same_graph(a: Any, b: Any) -> bool:
    import torch

    code_a, ca = _graph_signature(a)
    code_b, cb = _graph_signature(b)
    if code_a != code_b or len(ca) != len(cb):
        return False
    for u, v in zip(ca, cb, strict=True):
        if isinstance(u, torch.Tensor):
            if not (isinstance(v, torch.Tensor) and u.shape == v.shape and torch.equal(u, v)):
                return False
        elif u != v:
            return False
    return True


def _perturbed(primals: Sequence[Any]) -> list[Any]:
    """Every checked input moved by about 2^-6 of its size, with pseudo-random signs."""
    import torch

    out = []
    rng = np.random.default_rng(12345)
    for p in primals:
        x = p.detach().to(torch.float64).cpu().numpy()
        typical = float(np.mean(np.abs(x))) if x.size and np.any(x) else 1.0
        step = 2.0**-6 * np.maximum(np.abs(x), typical)
        signs = rng.choice([-1.0, 1.0], size=x.shape)
        out.append(torch.as_tensor(x + signs * step).to(device=p.device, dtype=p.dtype))
    return out


# ------------------------------------------------------------------ the interpreter


class GraphProgram:
    """A captured graph, re-executed on mpmath numbers.

    Parameters
    ----------
    gm : torch.fx.GraphModule
        From :func:`capture_graph`; must have no unsupported operators.
    shapes : list of tuple
        Shapes of the graph's inputs (the checked tensors).

    Attributes
    ----------
    scalar_ops : int
        Estimated number of scalar mpmath operations per evaluation (output
        elements of every node; multiply-adds for matrix products and
        convolutions): the cost of one evaluation is about this many times a
        few microseconds at 50 digits.

    Notes
    -----
    When the graph mutates tensors in place, aliasing is checked as it runs:
    an in-place write into the result of a view operator that NumPy had to
    copy (where PyTorch has a view) raises instead of being lost, and the
    result of a non-view operator never shares memory with its inputs.
    """

    def __init__(self, gm: Any, shapes: Sequence[tuple[int, ...]]):
        import torch

        self.shapes = [tuple(int(s) for s in sh) for sh in shapes]
        self.steps: list[tuple[Any, ...]] = []
        self.constants: dict[str, Any] = {}
        self._const_mp: dict[int, dict[str, np.ndarray]] = {}
        self.output: Any = None
        self.mutates = False
        self.scalar_ops = 0
        n_inputs = 0
        for node in gm.graph.nodes:
            if node.op == "get_attr":
                v = getattr(gm, node.target)
                if isinstance(v, torch.Tensor):
                    self.constants[node.name] = v  # converted on first use (see _constants)
                self.steps.append(("const", node.name, node.target))
            elif node.op == "placeholder":
                self.steps.append(("input", node.name, n_inputs))
                n_inputs += 1
            elif node.op == "call_function":
                val = node.meta.get("val")
                if node.target is operator.getitem:
                    self.steps.append(("getitem", node.name, node.args, val))
                    continue
                name = str(node.target)
                rule, inplace = _base_rule(name)
                if rule is None:
                    raise UnsupportedOperatorError(f"{name} has no mpmath rule")
                bound = _bind(node.target, node.args, node.kwargs)
                writes = name in _WRITES_ITSELF or inplace
                if name in _WRITES_ITSELF:
                    bound["_inplace"] = True
                self.mutates |= bool(node.target._schema.is_mutable)
                self.scalar_ops += _node_cost(name, node, val)
                is_view = bool(getattr(node.target, "is_view", False))
                step = ("call", node.name, name, rule, bound, inplace, val, is_view, writes)
                self.steps.append(step)
            elif node.op == "output":
                self.output = node.args[0]
            else:
                raise UnsupportedOperatorError(f"graph node {node.op} {node.target}")

    def _constants(self, E: _Env, dps: int) -> dict[str, np.ndarray]:
        """The graph's tensor constants as mp (floating) or int64/bool arrays, fresh copies."""
        import torch

        cached = self._const_mp.get(dps)
        if cached is None:
            cached = {}
            for k, v in self.constants.items():
                t = v.detach().cpu()
                if t.is_floating_point():  # float32/float16/bfloat16 -> float64 is exact
                    cached[k] = E.F(t.to(torch.float64).numpy())
                elif t.dtype == torch.bool:
                    cached[k] = t.numpy().astype(bool)
                else:
                    cached[k] = t.to(torch.int64).numpy().copy()
            self._const_mp[dps] = cached
        return {k: v.copy() for k, v in cached.items()}

    def run(self, inputs: Sequence[np.ndarray], dps: int) -> Any:
        """Evaluate on input leaves (object arrays of mpf) at ``dps`` digits; return the output.

        Raises
        ------
        RuntimeError
            A rule produced a shape other than the traced one, or an in-place
            write would not reach the tensor PyTorch writes into.
        """
        import torch

        E = _env(dps)
        env: dict[str, Any] = {}
        copied: set[str] = set()  # view results that NumPy had to copy (and views of them)
        consts = self._constants(E, dps)

        def look(v: Any) -> Any:
            if isinstance(v, torch.fx.Node):
                return env[v.name]
            if isinstance(v, (list, tuple)):
                return type(v)(look(u) for u in v)
            return v

        for step in self.steps:
            kind, name = step[0], step[1]
            if kind == "input":
                env[name] = inputs[step[2]]
            elif kind == "const":
                env[name] = consts.get(name)
            elif kind == "getitem":
                src, idx = step[2]
                v = env[src.name][idx]
                env[name] = self._settle(E, v, step[3], name) if step[3] is not None else v
                if src.name in copied:
                    copied.add(name)
            else:
                _, _, op, rule, bound, inplace, val, is_view, writes = step
                a = {k: look(v) for k, v in bound.items()}
                E.val = val
                src = bound.get("self", bound.get("input"))
                src_name = src.name if isinstance(src, torch.fx.Node) else None
                if self.mutates and writes and src_name in copied:
                    raise RuntimeError(
                        f"{op} writes into a view that the mp interpreter holds as a copy"
                    )
                out = rule(E, a)
                if inplace:
                    dst = a["self"]
                    dst[...] = E.coerce(_arr(out), val.dtype) if val is not None else out
                    out = dst
                if isinstance(val, torch.Tensor):
                    out = self._settle(E, out, val, f"{name} ({op})")
                if self.mutates and not writes:
                    guarded = self._alias_guard(out, a.get("self", a.get("input")), is_view)
                    if not is_view:
                        out = guarded
                    elif guarded is None or src_name in copied:
                        copied.add(name)
                if self.mutates and writes and src_name in copied:
                    copied.add(name)
                env[name] = out
        return look(self.output)

    @staticmethod
    def _alias_guard(out: Any, src: Any, is_view: bool) -> Any:
        """For a view op: ``out``, or None when NumPy copied; else ``out`` not aliasing ``src``."""
        if not isinstance(out, np.ndarray) or not isinstance(src, np.ndarray):
            return out
        shares = out.size > 0 and np.may_share_memory(out, src)
        if is_view:
            return out if (shares or out.size == 0) else None
        return out.copy() if shares else out

    @staticmethod
    def _settle(E: _Env, v: Any, val: Any, where: str) -> Any:
        """Set the kind from the traced dtype; check the shape against the trace."""
        import torch

        if not isinstance(val, torch.Tensor):
            return v
        v = E.coerce(v, val.dtype)
        if tuple(v.shape) != tuple(val.shape):
            raise RuntimeError(
                f"mp evaluation of {where} gave shape {tuple(v.shape)}, the trace "
                f"{tuple(val.shape)}"
            )
        return v


def _node_cost(name: str, node: Any, val: Any) -> int:
    """Estimated scalar operations of one node (see ``GraphProgram.scalar_ops``)."""
    import torch

    vals = val if isinstance(val, (tuple, list)) else [val]
    out = sum(int(v.numel()) for v in vals if isinstance(v, torch.Tensor))
    ins = [a.meta.get("val") for a in node.all_input_nodes]
    ins = [v for v in ins if isinstance(v, torch.Tensor)]
    if any(k in name for k in ("mm", "matmul", "linear", "mv.", "dot.")) and ins:
        return out * int(ins[0].shape[-1]) if ins[0].dim() else out
    if "convolution" in name and len(ins) >= 2:
        w = ins[1]
        return out * int(np.prod(tuple(w.shape[1:]), dtype=np.int64))
    return max(out, max((int(v.numel()) for v in ins), default=0))


def torch_mp_evaluator(
    call: Callable[..., Any], primals: Sequence[Any]
) -> Callable[[np.ndarray, np.ndarray, int], np.ndarray]:
    """Build ``evaluate_mp`` for a torch function of the checked tensors.

    Parameters
    ----------
    call : callable
        ``call(*leaves) -> Tensor``: the function as a function of the
        checked tensors, returning its outputs flattened to one 1-D floating
        tensor.
    primals : sequence of Tensor
        The checked tensors at ``x0`` (their shapes and dtypes are used to
        trace).

    Returns
    -------
    callable
        ``(x0, dx, dps) -> y``: the function at ``x0 + dx`` (float64 ``(n,)``
        each, summed exactly) evaluated on mpmath numbers at ``dps`` decimal
        digits; ``y`` is an object array ``(m,)`` of mpf.

    Raises
    ------
    GraphCaptureError
        The function could not be traced, or a trace at a perturbed point
        differs (values left torch and came back as constants).
    UnsupportedOperatorError
        The graph has operators without an mpmath rule; the message names
        them.
    """
    gm = capture_graph(call, primals)
    table: dict[Any, Any] = {}
    bad = unsupported_operators(gm)
    for _ in range(4):  # decompositions may bring in further uncovered operators
        extra = _decompositions_for(gm, table)
        if not bad or not extra:
            break
        table.update(extra)
        gm = capture_graph(call, primals, table)
        bad = unsupported_operators(gm)
    if bad:
        raise UnsupportedOperatorError(
            "operators not covered by the mp interpreter: "
            + ", ".join(bad[:8])
            + (f" (+{len(bad) - 8} more)" if len(bad) > 8 else "")
        )
    try:
        gm2 = capture_graph(call, _perturbed(primals), table or None)
        same = _same_graph(gm, gm2)
    except GraphCaptureError:
        same = False
    if not same:
        raise GraphCaptureError(
            "the traced graph changes with the input values (a tensor value leaves torch, "
            "e.g. through .numpy() or .tolist(), and comes back as a constant), so one trace "
            "is not valid at other points"
        )
    shapes = [tuple(p.shape) for p in primals]
    program = GraphProgram(gm, shapes)
    sizes = [int(np.prod(s, dtype=np.int64)) for s in shapes]

    def evaluate_mp(x0: np.ndarray, dx: np.ndarray, dps: int) -> np.ndarray:
        E = _env(int(dps))
        mpf = E.mpf
        flat = np.empty(x0.size, dtype=object)
        flat[:] = [
            mpf(float(u)) + mpf(float(v)) for u, v in zip(x0.ravel(), dx.ravel(), strict=True)
        ]
        leaves, off = [], 0
        for shape, size in zip(shapes, sizes, strict=True):
            leaves.append(flat[off : off + size].copy().reshape(shape))
            off += size
        out = program.run(leaves, int(dps))
        return E.F(_arr(out)).reshape(-1)

    evaluate_mp.program = program  # type: ignore[attr-defined]
    evaluate_mp.scalar_ops = program.scalar_ops  # type: ignore[attr-defined]
    return evaluate_mp
