"""An MLX function seen as flat float64 NumPy callables, batched by ``mx.vmap``.

Shapes follow :mod:`polygrad.backends.base`: ``n`` checked input scalars,
``m`` output scalars, ``B``/``k`` rows.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from polygrad._pytree import flatten
from polygrad.backends._common import PointFunction

__all__ = ["FlatFunction", "Rows", "narrow_constants", "to_mx"]


def to_mx(mx: Any, a: np.ndarray) -> Any:
    """An ``mx.array`` copy of ``a`` in the same dtype.

    ``mx.array`` alone turns float64 NumPy arrays into float32; the dtype is named.
    """
    a = np.ascontiguousarray(a)
    name = "bool_" if a.dtype == np.bool_ else a.dtype.name
    return mx.array(a, dtype=getattr(mx, name))


class FlatFunction:
    """``f`` as a function of its checked leaves (``mx.array``) returning a flat output.

    Parameters
    ----------
    mx : module
        ``mlx.core``.
    pf : PointFunction
        ``f`` with its arguments, checked leaves and their layout.
    """

    def __init__(self, mx: Any, pf: PointFunction) -> None:
        self.mx = mx
        self.pf = pf

    def __call__(self, *leaves: Any) -> Any:
        """The outputs of ``f`` at ``leaves``, raveled and concatenated: shape ``(m,)``."""
        mx = self.mx
        out = self.pf.f(*self.pf.args_with(list(leaves)))
        parts = [mx.reshape(mx.array(leaf), (-1,)) for leaf in flatten(out)[0]]
        return parts[0] if len(parts) == 1 else mx.concatenate(parts)

    def leaves_at(self, X: np.ndarray, mode: str) -> list[Any]:
        """The checked leaves at the rows of ``X`` ``(B, n)``, each ``(B,) + shape``.

        ``mode`` is ``"working"`` (each leaf's own dtype) or ``"float64"``.
        """
        B = X.shape[0]
        out = []
        for a, leaf, dt in zip(
            self.pf.layout.split(X), self.pf.layout.leaves, self.pf.leaf_dtypes, strict=True
        ):
            a = a.reshape((B, *leaf.shape)).astype(dt if mode == "working" else np.float64)
            out.append(to_mx(self.mx, a))
        return out

    def stream(self, mode: str) -> contextlib.AbstractContextManager[Any]:
        """MLX's CPU stream for float64 work (MLX has float64 on the CPU only)."""
        mx = self.mx
        return mx.stream(mx.cpu) if mode == "float64" else contextlib.nullcontext()

    def primals(self, x0: np.ndarray, mode: str) -> list[Any]:
        return [leaf[0] for leaf in self.leaves_at(x0[None, :], mode)]

    def computes_in_float64(self, x0: np.ndarray) -> bool:
        """Whether ``f`` returns float64 for float64 inputs."""
        with self.stream("float64"):
            return bool(self(*self.primals(x0, "float64")).dtype == self.mx.float64)

    def resolves_float64(self, x0: np.ndarray) -> bool:
        """Whether ``f`` in float64 resolves a move of ``2^-36`` relative, as float64 does.

        MLX's float64 ``sin``, ``cos``, ``exp``, ``erf``... run in float32 on the CPU: the
        output then does not move at all (or jumps by a float32 ULP) where its
        float64 JVP predicts a change of thousands of float64 ULPs.

        Returns
        -------
        bool
            False when some output's change differs from the JVP's prediction by
            more than 1% of it (outputs predicted to move by at least ``2^-40`` of
            the largest output, 4096 float64 ULPs, so that float64 rounding stays
            below 0.05% of the move); True when it agrees, or when no output is
            predicted to move (or the JVP fails) and nothing can be told.
        """
        signs = np.random.default_rng(0).choice([-1.0, 1.0], x0.shape)
        d = 2.0**-36 * (1.0 + np.abs(x0)) * signs
        try:
            y = self.evaluate(np.stack([x0, x0 + d]), x0, "float64", False)
            pred = self.jvp(d[None, :], x0, "float64", False)[0]
        except Exception:  # noqa: BLE001 - no JVP: nothing to compare with
            return True
        seen = np.abs(pred) > 2.0**-40 * max(float(np.max(np.abs(y[0]), initial=0.0)), 1e-300)
        change = (y[1] - y[0])[seen]
        return bool(np.all(np.abs(change - pred[seen]) <= 0.01 * np.abs(pred[seen])))

    def _map(self, fn: Callable[..., Any], args: Sequence[Any], vmap: bool) -> Any:
        """``fn`` over the leading axis of ``args``: one ``mx.vmap`` call, or a loop."""
        mx = self.mx
        if vmap:
            return mx.vmap(fn)(*args)
        return mx.stack([fn(*(a[i] for a in args)) for i in range(args[0].shape[0])])

    def _host(self, out: Any) -> np.ndarray:
        if out.dtype == self.mx.bfloat16:
            out = out.astype(self.mx.float32)
        return np.array(out).astype(np.float64)

    def evaluate(self, X: np.ndarray, x0: np.ndarray, mode: str, vmap: bool) -> np.ndarray:
        """``(B, n) -> (B, m)``: ``f`` at each row."""
        with self.stream(mode):
            return self._host(self._map(self, self.leaves_at(X, mode), vmap))

    def vjp(self, U: np.ndarray, x0: np.ndarray, mode: str, vmap: bool) -> np.ndarray:
        """``(k, m) -> (k, n)``: ``U @ J`` at ``x0``."""
        mx = self.mx
        with self.stream(mode):
            primals = self.primals(x0, mode)
            cots = to_mx(mx, U).astype(self(*primals).dtype)

            def one(u: Any) -> Any:
                grads = mx.vjp(self, primals, [u])[1]
                return mx.concatenate([mx.reshape(g, (-1,)) for g in grads])

            return self._host(self._map(one, [cots], vmap))

    def jvp(self, V: np.ndarray, x0: np.ndarray, mode: str, vmap: bool) -> np.ndarray:
        """``(k, n) -> (k, m)``: ``V @ J.T`` at ``x0``."""
        mx = self.mx
        with self.stream(mode):
            primals = self.primals(x0, mode)

            def one(*tangents: Any) -> Any:
                return mx.jvp(self, primals, list(tangents))[1][0]

            return self._host(self._map(one, self.leaves_at(V, mode), vmap))


class Rows:
    """One of :class:`FlatFunction`'s batch methods: ``mx.vmap`` first, one call per row
    when vmap fails (a primitive without a batching rule).

    Parameters
    ----------
    method : callable
        ``method(A, x0, mode, vmap) -> ndarray``.
    x0 : ndarray, shape (n,)
        The point.
    mode : str
        ``"working"`` or ``"float64"``.
    """

    def __init__(
        self,
        method: Callable[[np.ndarray, np.ndarray, str, bool], np.ndarray],
        x0: np.ndarray,
        mode: str,
    ) -> None:
        self.method, self.x0, self.mode = method, x0, mode
        self.vmap_works: bool | None = None

    def __call__(self, A: np.ndarray) -> np.ndarray:
        if self.vmap_works is not False:
            try:
                out = self.method(A, self.x0, self.mode, True)
            except Exception:  # noqa: BLE001 - no batching rule: fall back to rows
                if self.vmap_works:
                    raise
                self.vmap_works = False
            else:
                self.vmap_works = True
                return out
        return self.method(A, self.x0, self.mode, False)


def narrow_constants(mx: Any, f: Callable[..., Any]) -> list[str]:
    """Names of narrower-than-float64 ``mx.array`` values ``f`` closes over.

    Looked for in its closure cells, its default arguments, the globals its
    code names and, for a bound method, its object's attributes.
    """
    found: dict[str, Any] = {}
    code = getattr(f, "__code__", None)
    if code is not None:
        for name, cell in zip(
            code.co_freevars, getattr(f, "__closure__", None) or (), strict=False
        ):
            with contextlib.suppress(ValueError):
                found[name] = cell.cell_contents
        for name in code.co_names:
            if name in getattr(f, "__globals__", {}):
                found[name] = f.__globals__[name]
        for i, v in enumerate(getattr(f, "__defaults__", None) or ()):
            found[f"default {i}"] = v
    owner = getattr(f, "__self__", None)
    if owner is not None and hasattr(owner, "__dict__"):
        found.update({f"self.{k}": v for k, v in vars(owner).items()})
    narrow = (mx.float32, mx.float16, mx.bfloat16)
    return sorted(k for k, v in found.items() if isinstance(v, mx.array) and v.dtype in narrow)
