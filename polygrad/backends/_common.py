"""Helpers shared by the backends: output layouts, flat point functions, input checks.

Framework-neutral: NumPy arrays and Python pytrees only. The NumPy backend
and the framework backends (torch, JAX, TensorFlow, and backends of other
packages) build their :class:`~polygrad.backends.base.Target` with these.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._names import argument_names, leaf_name
from .._pytree import flatten, unflatten
from ..errors import InputMutationError, InputTypeError
from .base import Layout, narrowest_input_dtype, validate_float_array

__all__ = ["PointFunction", "as_float_output", "check_not_mutated", "output_layout"]


def output_layout(
    out_leaves: list[Any],
    paths: Sequence[str] | None = None,
    pairs: Sequence[bool] | None = None,
) -> Layout:
    """Layout of a function's output leaves.

    Parameters
    ----------
    out_leaves : list of arrays
        The output's leaves (anything with a ``shape``), in pytree order.
    paths : sequence of str, optional
        Each leaf's path in the output pytree (``"['loss']"``, ``"[1]"``), as
        :func:`polygrad._pytree.flatten` or ``jax.tree_util.keystr`` write them.
    pairs : sequence of bool, optional
        Leaves that a backend has already turned into real pairs ``(Re, Im)``
        (see :mod:`polygrad.complex`). A complex leaf of shape ``S`` is laid out
        as such pairs, of shape ``S + (2,)``.

    Returns
    -------
    Layout
        One output is ``f``; several are ``f`` followed by their paths
        (``f['loss']``, ``f['logits']`` for a dict, ``f[0]``, ``f[1]`` for a
        tuple, and for several leaves given without paths).
    """
    flags = [
        np.iscomplexobj(a) or bool(pairs is not None and pairs[i]) for i, a in enumerate(out_leaves)
    ]
    shapes = [tuple(a.shape) + (2,) if np.iscomplexobj(a) else tuple(a.shape) for a in out_leaves]
    if len(out_leaves) == 1:
        return Layout.from_shapes(["f"], shapes, flags)
    if paths is None or len(paths) != len(out_leaves):
        paths = [f"[{i}]" for i in range(len(out_leaves))]
    return Layout.from_shapes([f"f{p}" for p in paths], shapes, flags)


def check_not_mutated(after: list[np.ndarray], before: list[np.ndarray]) -> None:
    """Raise :class:`InputMutationError` if a checked input changed during a call."""
    for a, b in zip(after, before, strict=True):
        a64 = np.asarray(a, dtype=np.float64).ravel()
        b64 = np.asarray(b, dtype=np.float64).ravel()
        if not np.array_equal(a64, b64, equal_nan=True):
            i = int(np.flatnonzero(a64 != b64)[0])
            raise InputMutationError(
                f"the function modified its input in place (flat element {i} changed from "
                f"{float(b64[i])!r} to {float(a64[i])!r}); a gradient check needs a function "
                "that leaves its inputs unchanged. Copy the input inside the function "
                "(x = x.copy() in NumPy and JAX, x = x.clone() in PyTorch, or write the "
                "result to a new tensor)."
            )


def as_float_output(out: Any, what: str = "the function") -> tuple[np.ndarray, list[np.ndarray]]:
    """Flatten a function output (array, scalar or pytree) to a float64 vector.

    Returns the vector and the list of output leaves (as NumPy arrays).

    Raises
    ------
    InputTypeError
        The output is not numeric (or is complex).
    """
    leaves, _, _ = flatten(out)
    arrays = []
    for leaf in leaves:
        arr = np.asarray(leaf)
        if arr.dtype.kind not in "fiub" and arr.dtype.name != "bfloat16":
            raise InputTypeError(f"{what} returned a value of dtype {arr.dtype}; expected floats.")
        arrays.append(arr)
    vec = np.concatenate([a.astype(np.float64).ravel() for a in arrays]) if arrays else np.empty(0)
    return vec, arrays


class PointFunction:
    """``f`` seen as a function of the flat vector of its checked inputs.

    Parameters
    ----------
    f : callable
        The user's function.
    args : tuple
        Its arguments (pytrees of NumPy arrays and Python numbers).
    argnums : tuple of int
        Which arguments are checked.
    """

    def __init__(self, f: Callable[..., Any], args: tuple[Any, ...], argnums: tuple[int, ...]):
        self.f = f
        self.args = args
        self.argnums = argnums
        self.treedefs = {}
        leaves_all: list[np.ndarray] = []
        names: list[str] = []
        self.leaf_dtypes: list[np.dtype] = []
        arg_names = argument_names(f, len(args))
        for i in argnums:
            leaves, paths, td = flatten(args[i])
            self.treedefs[i] = td
            for leaf, path in zip(leaves, paths, strict=True):
                arr = np.asarray(leaf)
                name = leaf_name(arg_names, i, path, argnums)
                validate_float_array(arr, name)
                leaves_all.append(arr)
                names.append(name)
                self.leaf_dtypes.append(arr.dtype)
        self.layout = Layout.from_shapes(names, [a.shape for a in leaves_all])
        self.x0 = (
            np.concatenate([a.astype(np.float64).ravel() for a in leaves_all])
            if leaves_all
            else np.empty(0)
        )
        self.notes: list[str] = []
        self.working_dtype = (
            narrowest_input_dtype(self.leaf_dtypes, self.notes) if self.leaf_dtypes else np.float64
        )

    def leaves_at(self, x: np.ndarray, dtype: str) -> list[Any]:
        """Checked leaves at flat point ``x``: ``dtype`` is 'working' or 'float64'."""
        out = []
        for arr, leaf, dt in zip(
            self.layout.split(x), self.layout.leaves, self.leaf_dtypes, strict=True
        ):
            if dtype == "working":
                arr = arr.astype(dt)
            elif dtype == "float64":
                arr = arr.astype(np.float64)
            out.append(arr.reshape(leaf.shape).copy())
        return out

    def args_with(self, leaves: list[Any]) -> tuple[Any, ...]:
        """The full argument tuple with the checked leaves replaced."""
        new = list(self.args)
        off = 0
        for i in self.argnums:
            td = self.treedefs[i]
            k = td.num_leaves
            new[i] = unflatten(td, leaves[off : off + k])
            off += k
        return tuple(new)

    def call(self, x: np.ndarray, dtype: str) -> Any:
        return self.f(*self.args_with(self.leaves_at(x, dtype)))
