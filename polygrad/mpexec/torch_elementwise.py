"""Elementwise and activation rules of the PyTorch graph interpreter.

Arithmetic (``add sub mul div pow``...), comparisons, logical and bitwise
operators, ``where``/``masked_fill``/``clamp`` and the activations (``gelu``,
``softplus``, ``elu``...). Floating operands run on mpmath numbers with the
scalar functions of :mod:`.torch_env`; integer and bool operands stay exact
NumPy integers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .torch_env import RULES, Rule, _arr, _Env, _rule

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
