"""What the three quad interpreters share (:mod:`.jaxpr_quad`, :mod:`.torch_quad`,
:mod:`.tf_quad`): the error they raise, the functions composed from quad loops, matrix
products that avoid numpy-quaddtype 1.0's ``matmul`` bugs, and the split of a batch of
points into input leaves."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import PolygradError

__all__ = ["NoQuadRuleError", "logsumexp", "matmul_each", "point_leaves", "rsqrt", "sigmoid"]


class NoQuadRuleError(PolygradError, NotImplementedError):
    """A captured program holds an operation the quad interpreter has no rule for (the
    message names it); the check's reference goes on to mpmath."""


def rsqrt(x: Any) -> Any:
    """``1 / sqrt(x)`` elementwise (numpy-quaddtype has no ``rsqrt`` loop)."""
    return 1 / np.sqrt(x)


def sigmoid(x: Any) -> Any:
    """``1 / (1 + exp(-x))`` elementwise: 0 where ``exp(-x)`` overflows, as the logistic
    function's limit."""
    return 1 / (1 + np.exp(-x))


def logsumexp(x: Any, axis: int) -> Any:
    """``log(sum(exp(x)))`` along ``axis``, kept as an axis of length 1, shifted by the
    maximum (left at 0 where it is not finite)."""
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0 * m)
    return m + np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))


def matmul_each(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """``A[k] @ B[k]`` for every ``k`` (``(K, M, L)`` and ``(K, L, N)`` to ``(K, M, N)``),
    one product of contiguous 2-D matrices each: numpy-quaddtype 1.0's ``matmul``
    ignores the strides of a transposed operand and fills only the first matrix of a
    stack (the others come back 0 or inf)."""
    return np.stack([np.matmul(np.ascontiguousarray(a), np.ascontiguousarray(b))
                     for a, b in zip(A, B, strict=True)])  # fmt: skip


def point_leaves(X: np.ndarray, shapes: Sequence[tuple[int, ...]]) -> list[np.ndarray]:
    """The input leaves of a batch of points: ``X`` ``(B, n)`` to arrays ``(B, *shape)``,
    one per shape, in the order of the flat input vector."""
    cuts = np.cumsum([int(np.prod(s, dtype=np.int64)) for s in shapes])[:-1]
    cols = np.split(X, cuts, axis=1)
    return [c.reshape((X.shape[0], *s)) for c, s in zip(cols, shapes, strict=True)]
