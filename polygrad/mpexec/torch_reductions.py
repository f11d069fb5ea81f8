"""Reduction and linear-algebra rules of the PyTorch graph interpreter.

``sum mean prod amax amin max min argmax argmin logsumexp softmax
log_softmax cumsum cumprod var std linalg_vector_norm sort topk`` and the
matrix products (``mm bmm matmul mv dot addmm addmv baddbmm linear``). The
folds, cumulative operations and sorting are the ones the JAX interpreter
uses (:mod:`.reductions`).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from .reductions import cumulative, fold, sort_permutation
from .torch_env import RULES, Rule, _arr, _ax, _dims, _Env, _rule


def _fold_rule(int_fn: Callable[..., Any], op: Callable[[Any, Any], Any], identity: int) -> Rule:
    """``sum``/``prod``: NumPy on integer tensors, a :func:`.reductions.fold` on mp ones."""

    def rule(E: _Env, a: dict[str, Any]) -> Any:
        x = _arr(a["self"])
        axes = _dims(a.get("dim"), x.ndim)
        keep = bool(a.get("keepdim", False))
        if x.dtype != object:
            return int_fn(x.astype(np.int64), axis=axes, keepdims=keep)
        return E.O(fold(x, axes, op, E.scalar(identity), keepdims=keep))

    return rule


_sum_rule = _fold_rule(np.sum, operator.add, 0)
RULES["aten.sum.default"] = RULES["aten.sum.dim_IntList"] = _sum_rule
RULES["aten.prod.default"] = RULES["aten.prod.dim_int"] = _fold_rule(np.prod, operator.mul, 1)


@_rule("aten.mean.default", "aten.mean.dim")
def _mean(E: _Env, a: dict[str, Any]) -> Any:
    x = E.F(a["self"])
    axes = _dims(a.get("dim"), x.ndim)
    count = int(np.prod([x.shape[d] for d in axes], dtype=np.int64)) if x.ndim else 1
    return E.map(lambda s: E.fns["div"](s, E.mpf(count)), _sum_rule(E, {**a, "self": x}))


def _extreme(name: str) -> Rule:
    def rule(E: _Env, a: dict[str, Any]) -> Any:
        x = _arr(a["self"])
        axes = _dims(a.get("dim"), x.ndim)
        keep = bool(a.get("keepdim", False))
        if x.dtype != object or x.ndim == 0:
            return (np.max if name == "max" else np.min)(x, axis=axes, keepdims=keep)
        init = -E.inf if name == "max" else E.inf
        return E.O(fold(x, axes, E.fns[name], init, keepdims=keep))

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
    m = fold(x, axes, E.fns["max"], -E.inf, keepdims=True)
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


def _shifted(E: _Env, a: dict[str, Any]) -> tuple[np.ndarray, tuple[int]]:
    """``x - max(x)`` along the (soft)max dimension of a non-scalar input, and that dim."""
    x = E.F(a["self"])
    d = (_ax(a["dim"], x.ndim),)
    return E.O(x - _max_keep(E, x, d)), d


@_rule("aten._softmax.default", "aten.softmax.int")
def _softmax(E: _Env, a: dict[str, Any]) -> Any:
    if np.ndim(a["self"]) == 0:
        return E.filled(1)
    z, d = _shifted(E, a)
    e = E.map(E.ctx.exp, z)
    return E.O(e / np.sum(e, axis=d, keepdims=True))


@_rule("aten._log_softmax.default", "aten.log_softmax.int")
def _log_softmax(E: _Env, a: dict[str, Any]) -> Any:
    if np.ndim(a["self"]) == 0:
        return E.filled(0)
    z, d = _shifted(E, a)
    return E.O(z - E.map(E.fns["log"], np.sum(E.map(E.ctx.exp, z), axis=d, keepdims=True)))


def _cum(int_fn: Callable[..., Any], op: Callable[[Any, Any], Any]) -> Rule:
    def rule(E: _Env, a: dict[str, Any]) -> Any:
        x = _arr(a["self"])
        if x.ndim == 0:
            return x.copy()
        d = _ax(a["dim"], x.ndim)
        if x.dtype != object:
            return int_fn(x.astype(np.int64), axis=d)
        return cumulative(x, d, op)

    return rule


RULES["aten.cumsum.default"] = _cum(np.cumsum, operator.add)
RULES["aten.cumprod.default"] = _cum(np.cumprod, operator.mul)


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
    if key.dtype == object:
        idx = sort_permutation(E.ctx, [key], d)
    else:
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
