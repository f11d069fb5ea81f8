"""A polygrad backend for MLX, registered through the ``polygrad.backends`` entry point.

MLX (``mlx.core``) is imported when a backend instance is created, never when
this module is imported: polygrad imports it to read the class's ``module``
and to ask :meth:`MlxBackend.owns` whether an argument is an ``mx.array``,
which it answers from ``sys.modules`` alone.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from polygrad._pytree import flatten
from polygrad.backends._common import (
    PointFunction,
    as_float_output,
    check_not_mutated,
    output_layout,
)
from polygrad.backends.base import Backend, Supplied, Target, chunked, dtype_eps
from polygrad.errors import InputTypeError

from ._batched import FlatFunction, Rows, narrow_constants, to_mx

__all__ = ["MlxBackend"]

_NARROW_INSIDE = (
    "MLX computes this function in less than float64 precision even for float64 input (its "
    "float64 output does not follow a move of 2^-36 relative that its JVP predicts; MLX's "
    "CPU float64 sin, cos, exp, erf... run in float32): no float64 reference or float64 rule is "
    "available, the reference is computed in the working dtype, and round-off is allowed as "
    "for float32 arithmetic"
)


class MlxBackend(Backend):
    """MLX arrays (``mx.array``); gradients by ``mx.vjp``/``mx.jvp``, batched by ``mx.vmap``.

    Selected automatically when the checked arguments hold ``mx.array`` values.
    Float64 work (the promoted reference, the float64 VJPs) runs on MLX's CPU
    stream, the only device on which MLX has float64.
    """

    name = "mlx"
    module = "mlx"
    distribution = "mlx"
    label = "MLX"
    extra = ""
    supports_autodiff = True
    supports_float64 = True
    supports_vmap = True
    arbitrary_precision = False

    def __init__(self) -> None:
        super().__init__()
        import mlx.core as mx

        self.mx = mx

    @classmethod
    def owns(cls, x: Any) -> bool:
        core = sys.modules.get("mlx.core")
        return core is not None and isinstance(x, core.array)

    def version(self) -> str:
        return importlib.metadata.version("mlx")

    def to_numpy(self, x: Any) -> np.ndarray:
        """A host copy of ``x`` in its own dtype (``mx.array`` exposes its buffer)."""
        return np.array(x, copy=True)

    def from_numpy(self, a: np.ndarray) -> Any:
        """An ``mx.array`` of ``a``'s dtype (float64 kept).

        Raises
        ------
        InputTypeError
            ``a`` is complex128: MLX has complex64 only.
        """
        if np.asarray(a).dtype == np.complex128:
            raise InputTypeError("MLX has no dtype complex128 (its complex dtype is complex64)")
        return to_mx(self.mx, np.array(a, copy=True))

    def namespace(self) -> Any:
        return self.mx

    def stack_pair(self, re: Any, im: Any) -> Any:
        return self.mx.stack([re, im], axis=-1)

    def make_complex(self, re: Any, im: Any) -> Any:
        return re + 1j * im

    def _pullback(
        self, g: Callable[..., Any], primals: list[Any], cotangent: np.ndarray
    ) -> list[np.ndarray | None]:
        mx = self.mx
        with self._stream(primals):
            out = g(*primals)
            cot = to_mx(mx, np.asarray(cotangent)).astype(out.dtype).reshape(out.shape)
            grads = mx.vjp(lambda *p: g(*p), list(primals), [cot])[1]
            return [np.array(v) for v in grads]

    def _stream(self, arrays: list[Any]) -> contextlib.AbstractContextManager[Any]:
        """MLX's CPU stream when any array is float64 (MLX has float64 on the CPU only)."""
        mx = self.mx
        wide = any(getattr(a, "dtype", None) == mx.float64 for a in arrays)
        return mx.stream(mx.cpu) if wide else contextlib.nullcontext()

    def make_target(
        self,
        f: Callable[..., Any],
        args: tuple[Any, ...],
        argnums: tuple[int, ...],
        supplied: Supplied,
        batch_size: int,
        wrt: str = "inputs",
    ) -> Target:
        """Build the :class:`~polygrad.backends.base.Target` of an MLX function.

        Parameters
        ----------
        f : callable
            A function of ``args`` written with ``mlx.core`` (may be
            ``mx.compile``-d; may use ``mx.custom_function`` rules).
        args : tuple
            Its arguments: pytrees of ``mx.array`` (NumPy arrays are converted)
            and any non-array values.
        argnums : tuple of int
            The checked arguments; their leaves are the flat inputs.
        supplied : Supplied
            Must be empty: MLX differentiates ``f`` itself.
        batch_size : int
            Most rows per vmapped call.
        wrt : {"inputs"}
            MLX functions are checked with respect to their arguments.

        Returns
        -------
        Target
            Callables on float64 NumPy arrays (shapes in
            :mod:`polygrad.backends.base`). ``evaluate64`` passes float64 inputs;
            arrays the function closes over keep their dtype (a note says so).

        Raises
        ------
        TypeError
            A derivative was supplied.
        ValueError
            ``wrt="parameters"``.
        InputTypeError, InputValueError, InputMutationError
            A checked leaf is integer, bool or non-finite; ``f`` changed its input.
        """
        if supplied.given():
            raise TypeError("the mlx backend checks MLX's own derivative; pass no grad=")
        if wrt != "inputs":
            raise ValueError("MLX functions have no parameters to check; use wrt='inputs'")
        pf = PointFunction(f, args, argnums)
        flat = FlatFunction(self.mx, pf)
        leaves0 = flat.leaves_at(pf.x0[None, :], "working")
        host_before = pf.layout.split(pf.x0)
        out0 = f(*pf.args_with([leaf[0] for leaf in leaves0]))
        y0, out_leaves = as_float_output(out0)
        check_not_mutated([np.array(leaf[0]) for leaf in leaves0], host_before)
        wd = np.dtype(pf.working_dtype)
        eps = dtype_eps(wd)
        calls = {
            mode: self._calls(flat, pf.x0, mode, batch_size) for mode in ("working", "float64")
        }
        notes: list[str] = []
        if wd != np.float64 and not flat.computes_in_float64(pf.x0):
            notes.append(
                "the function returns a narrower float than float64 for float64 input, so "
                "it cannot be promoted; the reference is computed in the working dtype"
            )
            calls["float64"] = (None, None, None)
        elif not flat.resolves_float64(pf.x0):
            notes.append(_NARROW_INSIDE)
            calls["float64"] = (None, None, None)
            eps = max(eps, dtype_eps(np.float32))
        elif wd != np.float64 and (names := narrow_constants(self.mx, f)):
            notes.append(
                f"the function closes over narrower MLX arrays ({', '.join(names)}); they keep "
                "their values in the float64 reference, where only the checked inputs are "
                "promoted"
            )
        return Target(
            x0=pf.x0,
            y0=y0,
            working_dtype=wd.name,
            eps=eps,
            evaluate=calls["working"][0],  # type: ignore[arg-type]
            evaluate64=calls["float64"][0],
            vjp=calls["working"][1],
            vjp64=calls["float64"][1],
            jvp=calls["working"][2],
            jvp64=calls["float64"][2],
            input_layout=pf.layout,
            output_layout=output_layout(out_leaves, flatten(out0)[1]),
            backend=self.name,
            notes=notes,
            mp_unavailable_reason="MLX code cannot run on mpmath numbers",
        )

    def _calls(
        self, flat: FlatFunction, x0: np.ndarray, mode: str, batch_size: int
    ) -> tuple[Callable[[np.ndarray], np.ndarray] | None, ...]:
        """``(evaluate, vjp, jvp)`` in ``mode`` ("working" or "float64"), chunked and batched."""
        rows = [Rows(method, x0, mode) for method in (flat.evaluate, flat.vjp, flat.jvp)]
        return tuple(_chunks(r, batch_size) for r in rows)


def _chunks(rows: Rows, batch_size: int) -> Callable[[np.ndarray], np.ndarray]:
    """``rows`` applied to at most ``batch_size`` rows at a time."""
    return lambda X: chunked(rows, X, max(1, batch_size))
