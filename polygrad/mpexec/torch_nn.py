"""Neural-network layer, loss and in-place rules of the PyTorch graph interpreter.

Convolution (and its backward, for second-derivative checks), pooling,
layer/batch/group normalisation, the losses, CPU scaled dot-product attention,
and the in-place writes ``copy_ fill_ zero_``. Convolution and pooling use the
same window code as the JAX interpreter (:mod:`.linalg_conv`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import UnsupportedOperatorError
from .linalg_conv import convolve, dilate_pad, window_views
from .torch_env import RULES, _arr, _ax, _Env, _rule, _tup
from .torch_reductions import _logsumexp, _softmax


@_rule("aten.convolution.default", "aten._convolution.default")
def _convolution(E: _Env, a: dict[str, Any]) -> Any:
    if a.get("transposed", False):
        raise UnsupportedOperatorError("aten.convolution.default with transposed=True")
    x, w = E.F(a["input"]), E.F(a["weight"])
    nd = w.ndim - 2
    stride, pad, dil = (_tup(a[k], nd) for k in ("stride", "padding", "dilation"))
    out = convolve(
        x,
        w,
        strides=stride,
        padding=[(q, q) for q in pad],
        lhs_dilation=(1,) * nd,
        rhs_dilation=dil,
        groups=int(a.get("groups", 1)),
        out_spatial=tuple(int(s) for s in E.val.shape[2:]),
        zero=E.zero,
    )
    if a.get("bias") is not None:
        out = out + E.F(a["bias"]).reshape((w.shape[0],) + (1,) * nd)
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
    reads = window_views(xp, w.shape[2:], stride, dil, out_sp)
    writes = window_views(gxp, w.shape[2:], stride, dil, out_sp)  # views: += writes into gxp
    for (k, xwin), (_, gxwin) in zip(reads, writes, strict=True):
        for grp in range(groups):
            o_sl, c_sl = slice(grp * Og, (grp + 1) * Og), slice(grp * Cg, (grp + 1) * Cg)
            gg = np.moveaxis(g[:, o_sl], 1, -1)  # (N, *out, Og)
            xg = np.moveaxis(xwin[:, c_sl], 1, -1)  # (N, *out, Cg)
            taps: tuple[Any, ...] = (o_sl, slice(None), *k)
            gw[taps] += np.matmul(gg.reshape(-1, Og).T, xg.reshape(-1, Cg))
            gxwin[:, c_sl] += np.moveaxis(np.matmul(gg, w[taps]), -1, 1)
    mask = list(a.get("output_mask", [True, True, True]))
    grad_bias = E.O(np.sum(g, axis=(0, *range(2, g.ndim))))
    return (
        E.O(gxp[inner]) if mask[0] else None,
        E.O(gw) if mask[1] else None,
        grad_bias if mask[2] else None,
    )


def _pool_windows(
    E: _Env,
    x: np.ndarray,
    k: tuple[int, ...],
    s: tuple[int, ...],
    p: tuple[int, ...],
    d: tuple[int, ...],
    out_sp: tuple[int, ...],
    fill: Any,
) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Stack of the 2-D pooling windows ``(..., oh, ow, kh*kw)`` of a padded input.

    The input is padded with ``fill`` by ``p`` on both sides, and further at the
    end where ``ceil_mode`` windows reach beyond it; the offsets are each tap's
    position relative to the unpadded input.
    """
    pads = [
        (p[i], max(x.shape[-2 + i] + 2 * p[i], (out_sp[i] - 1) * s[i] + d[i] * (k[i] - 1) + 1)
         - x.shape[-2 + i] - p[i])
        for i in range(2)
    ]  # fmt: skip
    xp = dilate_pad(x, (1, 1), pads, fill)
    wins, offs = [], []
    for (i, j), view in window_views(xp, k, s, d, out_sp):
        wins.append(view)
        offs.append((i * d[0] - p[0], j * d[1] - p[1]))
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
