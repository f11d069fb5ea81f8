"""Convolution and windowed (pooling) operations on object arrays of mpf.

Shared by the JAX interpreter (``conv_general_dilated``, ``reduce_window_*``)
and the PyTorch one (``aten.convolution``, ``max_pool2d``, ``avg_pool2d``).
Layouts are channels-first: an input is ``(N, C, *spatial)``, a kernel
``(O, I, *taps)``; the interpreters transpose to it. Padding, input (base)
dilation and kernel (window) dilation follow XLA's definitions, of which
PyTorch's symmetric padding is a special case.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

__all__ = ["convolve", "dilate_pad", "reduce_windows", "window_views"]


def dilate_pad(x: np.ndarray, dil: Sequence[int], pads: Sequence[Any], fill: Any) -> np.ndarray:
    """Insert ``dil - 1`` fill values between elements, then pad (negative pads crop).

    Parameters
    ----------
    x : numpy.ndarray
        Object array; the last ``len(dil)`` axes are dilated and padded.
    dil : sequence of int
        Dilation per trailing axis (1: none).
    pads : sequence
        ``(low, high)`` or ``(low, high, interior)`` per trailing axis (the
        interior entry is ignored).
    fill : mpf
        The value of inserted and padded elements.

    Returns
    -------
    numpy.ndarray
        Object array with the dilated and padded trailing axes.
    """
    nd = x.ndim
    off = nd - len(dil)
    for j, d in enumerate(dil):
        ax = off + j
        if d > 1 and x.shape[ax] > 0:
            n = x.shape[ax]
            shape = list(x.shape)
            shape[ax] = (n - 1) * d + 1
            y = np.full(shape, fill, dtype=object)
            idx = [slice(None)] * nd
            idx[ax] = slice(None, None, d)
            y[tuple(idx)] = x
            x = y
    for j, pad in enumerate(pads):
        ax = off + j
        lo, hi = int(pad[0]), int(pad[1])
        if lo > 0 or hi > 0:
            shape = list(x.shape)
            shape[ax] += max(lo, 0) + max(hi, 0)
            y = np.full(shape, fill, dtype=object)
            idx = [slice(None)] * nd
            idx[ax] = slice(max(lo, 0), max(lo, 0) + x.shape[ax])
            y[tuple(idx)] = x
            x = y
        if lo < 0 or hi < 0:
            idx = [slice(None)] * nd
            idx[ax] = slice(max(-lo, 0), x.shape[ax] - max(-hi, 0))
            x = x[tuple(idx)]
    return x


def window_views(
    x: np.ndarray,
    window: Sequence[int],
    strides: Sequence[int],
    dilation: Sequence[int],
    out_shape: Sequence[int],
) -> Iterator[tuple[tuple[int, ...], np.ndarray]]:
    """For every tap of a window, the strided view of the (padded) input it reads.

    Parameters
    ----------
    x : numpy.ndarray
        Padded input; the window slides over its last ``len(window)`` axes.
    window, strides, dilation : sequence of int
        Window size, stride and window dilation per sliding axis.
    out_shape : sequence of int
        Number of window positions per sliding axis.

    Yields
    ------
    (tap, view)
        ``tap`` the index inside the window (row-major order); ``view`` the
        elements that tap reads at every window position, shaped
        ``x.shape[:-len(window)] + out_shape``.
    """
    lead = (slice(None),) * (x.ndim - len(window))
    for tap in itertools.product(*[range(int(k)) for k in window]):
        sl = tuple(
            slice(k * d, k * d + (o - 1) * s + 1, s)
            for k, d, o, s in zip(tap, dilation, out_shape, strides, strict=True)
        )
        yield tap, x[lead + sl]


def reduce_windows(
    x: np.ndarray,
    window: Sequence[int],
    strides: Sequence[int],
    dilation: Sequence[int],
    out_shape: Sequence[int],
    op: Callable[[Any, Any], Any],
) -> np.ndarray:
    """Combine the elements of every window with ``op``, taps in row-major order.

    Parameters
    ----------
    x, window, strides, dilation, out_shape
        As for :func:`window_views` (``x`` already padded with the identity
        of ``op``).
    op : callable
        Binary scalar function (``a + b``, a NaN-propagating ``max``...).

    Returns
    -------
    numpy.ndarray
        Object array ``x.shape[:-len(window)] + out_shape``.
    """
    uf = np.frompyfunc(op, 2, 1)
    out: np.ndarray | None = None
    for _, part in window_views(x, window, strides, dilation, out_shape):
        out = part.copy() if out is None else uf(out, part)
    assert out is not None, "a window has at least one tap"
    return np.asarray(out, dtype=object)


def convolve(
    x: np.ndarray,
    w: np.ndarray,
    strides: Sequence[int],
    padding: Sequence[Any],
    lhs_dilation: Sequence[int],
    rhs_dilation: Sequence[int],
    groups: int,
    out_spatial: Sequence[int],
    zero: Any,
) -> np.ndarray:
    """Grouped, strided, dilated N-D convolution (cross-correlation, as in both frameworks).

    Parameters
    ----------
    x : numpy.ndarray
        Object array of mpf, ``(N, C, *S)``.
    w : numpy.ndarray
        Object array of mpf, ``(O, C // groups, *K)``.
    strides, lhs_dilation, rhs_dilation : sequence of int
        Per spatial axis: window stride, input dilation, kernel dilation.
    padding : sequence
        ``(low, high)`` per spatial axis (negative values crop).
    groups : int
        Feature groups; ``C`` and ``O`` are multiples of it.
    out_spatial : sequence of int
        The output's spatial shape (as the framework computed it).
    zero : mpf
        The context's zero.

    Returns
    -------
    numpy.ndarray
        Object array ``(N, O, *out_spatial)``.
    """
    x = dilate_pad(x, lhs_dilation, padding, zero)
    cg, og = x.shape[1] // groups, w.shape[0] // groups
    out = np.full((x.shape[0], w.shape[0], *out_spatial), zero, dtype=object)
    for tap, patch in window_views(x, w.shape[2:], strides, rhs_dilation, out_spatial):
        for g in range(groups):
            xs = patch[:, g * cg : (g + 1) * cg]  # N Cg *Sout
            ws = w[(slice(g * og, (g + 1) * og), slice(None)) + tuple(tap)]  # Og Cg
            contrib = np.tensordot(xs, ws, axes=([1], [1]))  # N *Sout Og
            out[:, g * og : (g + 1) * og] += np.moveaxis(contrib, -1, 1)
    return out
