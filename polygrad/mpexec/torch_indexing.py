"""Conversion, creation, shape and indexing rules of the PyTorch graph interpreter.

Copies and casts (a floating cast is the identity on mpmath numbers),
``zeros``/``full``/``arange``..., views (``view permute transpose expand
squeeze slice select``...), which stay NumPy views so that in-place writes
alias as in PyTorch, and indexing (``index gather scatter index_put pad
embedding tril``...).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .torch_env import RULES, Rule, _arr, _ax, _dims, _Env, _rule


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
