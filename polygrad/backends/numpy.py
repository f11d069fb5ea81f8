"""The NumPy backend: no autodiff, the derivative to check is supplied by the user.

The function is evaluated one point at a time (NumPy code is not assumed to
broadcast over a batch axis). Inputs are promoted to float64 by passing
float64 arrays, which is what NumPy code does naturally; the mpmath evaluator
(:mod:`polygrad.backends.mpmath`) runs the same code at high precision.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._names import argument_names, leaf_name
from .._pytree import flatten, unflatten
from ..errors import InputMutationError, InputTypeError, ShapeMismatchError
from .base import Backend, Layout, Supplied, Target, dtype_eps, validate_float_array
from .mpmath import mp_evaluator

__all__ = ["NumpyBackend", "PointFunction", "as_float_output", "check_not_mutated", "output_layout"]


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
        self.working_dtype = np.result_type(*self.leaf_dtypes) if self.leaf_dtypes else np.float64

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


def _outer(g: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    return lambda U: U[:, :1] * g[None, :]


def _left(J: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    return lambda U: U @ J


def _right(J: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    return lambda V: V @ J.T


class NumpyBackend(Backend):
    """NumPy arrays and Python floats; the derivative comes from ``grad=``, ``jac=``, ``vjp=``
    or ``jvp=``."""

    name = "numpy"
    module = ""
    extra = ""
    supports_autodiff = False
    supports_float64 = True
    supports_vmap = False
    arbitrary_precision = False

    @classmethod
    def owns(cls, x: Any) -> bool:
        return isinstance(x, (np.ndarray, np.generic, float, int))

    def to_numpy(self, x: Any) -> np.ndarray:
        return np.array(x, copy=True)

    def make_target(
        self,
        f: Callable[..., Any],
        args: tuple[Any, ...],
        argnums: tuple[int, ...],
        supplied: Supplied,
        batch_size: int,
        wrt: str = "inputs",
    ) -> Target:
        if wrt != "inputs":
            raise ValueError("NumPy functions have no parameters to check; use wrt='inputs'")
        given = supplied.given()
        if not given:
            raise TypeError(
                "NumPy functions have no autodiff: pass the derivative to check as grad= "
                "(scalar functions), jac=, vjp= or jvp=."
            )
        if len(given) > 1:
            raise TypeError(f"pass only one of grad=, jac=, vjp=, jvp= (got {', '.join(given)}).")
        pf = PointFunction(f, args, argnums)
        wd = np.dtype(pf.working_dtype)
        leaves0 = pf.leaves_at(pf.x0, "working")
        out0 = f(*pf.args_with(leaves0))
        y0, out_leaves = as_float_output(out0)
        check_not_mutated(leaves0, pf.layout.split(pf.x0))
        m = y0.size
        notes: list[str] = []

        def evaluate(X: np.ndarray) -> np.ndarray:
            return np.stack([as_float_output(pf.call(row, "working"))[0] for row in X])

        # float64 promotion: pass float64 inputs; if the function returns a narrower
        # float, it computes in that precision internally and the reference says so.
        evaluate64: Callable[[np.ndarray], np.ndarray] | None = None
        if wd != np.float64:
            _, leaves64 = as_float_output(pf.call(pf.x0, "float64"))
            out_dtypes = {a.dtype for a in leaves64 if a.dtype.kind == "f"}
            if out_dtypes and all(np.dtype(d).itemsize >= 8 for d in out_dtypes):

                def evaluate64(X: np.ndarray) -> np.ndarray:
                    return np.stack([as_float_output(pf.call(row, "float64"))[0] for row in X])
            else:
                notes.append(
                    "the function returns "
                    + ", ".join(sorted(str(d) for d in out_dtypes))
                    + " for float64 input, so it cannot be promoted; the reference is "
                    "computed in the working dtype"
                )
        else:
            evaluate64 = evaluate

        out_layout = output_layout(out_leaves, flatten(out0)[1])

        def flat_derivative(value: Any, what: str, expect: str) -> np.ndarray:
            """Flatten a supplied derivative shaped like the checked inputs."""
            parts = value if len(argnums) > 1 else (value,)
            if len(argnums) > 1 and (
                not isinstance(value, (tuple, list)) or len(value) != len(argnums)
            ):
                raise ShapeMismatchError(
                    f"{what} must return a tuple of {len(argnums)} arrays (one per checked "
                    f"argument), got {type(value).__name__}"
                )
            flat_parts = []
            leaves_iter = iter(pf.layout.leaves)
            for part, i in zip(parts, argnums, strict=True):
                leaves, _, _ = flatten(part)
                for leaf in leaves:
                    spec = next(leaves_iter)
                    arr = np.asarray(leaf)
                    if arr.shape != spec.shape:
                        raise ShapeMismatchError(
                            f"{what} returned shape {arr.shape} for {spec.name}, whose shape is "
                            f"{spec.shape}; {expect}"
                        )
                    flat_parts.append(arr.astype(np.float64).ravel())
                del i
            return np.concatenate(flat_parts)

        def check_dtype(arr_leaves: list[np.ndarray], dtype: str) -> bool:
            return (
                all(np.asarray(a).dtype == np.float64 for a in arr_leaves)
                if dtype == "float64"
                else True
            )

        vjp_fns: dict[str, Callable[[np.ndarray], np.ndarray] | None] = {}
        jvp_fns: dict[str, Callable[[np.ndarray], np.ndarray] | None] = {}
        for dtype in ("working", "float64"):
            args_d = pf.args_with(pf.leaves_at(pf.x0, dtype))
            if supplied.grad is not None:
                if m != 1:
                    raise ShapeMismatchError(
                        f"grad= needs a scalar function, but f returns {m} values; pass jac=, "
                        "vjp= or jvp= instead"
                    )
                raw = supplied.grad(*args_d)
                g = flat_derivative(raw, "grad", "a gradient has the shape of its input")
                precise = check_dtype(flatten(raw)[0], dtype)
                vjp_fns[dtype] = _outer(g) if precise else None
                jvp_fns[dtype] = None
            elif supplied.jac is not None:
                raw = supplied.jac(*args_d)
                parts = raw if len(argnums) > 1 else (raw,)
                cols = []
                for part, leaf in zip(parts, pf.layout.leaves, strict=False):
                    arr = np.asarray(part)
                    want = tuple(out_layout.leaves[0].shape) + leaf.shape
                    if arr.size != m * leaf.size:
                        raise ShapeMismatchError(
                            f"jac returned shape {arr.shape} for {leaf.name}; expected "
                            f"output shape + input shape = {want}"
                        )
                    cols.append(arr.astype(np.float64).reshape(m, leaf.size))
                J = np.concatenate(cols, axis=1)
                precise = check_dtype([np.asarray(p) for p in parts], dtype)
                vjp_fns[dtype] = _left(J) if precise else None
                jvp_fns[dtype] = _right(J) if precise else None
            elif supplied.vjp is not None:
                vjp_user = supplied.vjp

                def vjp_rows(
                    U: np.ndarray, dtype: str = dtype, args_d: tuple = args_d
                ) -> np.ndarray:
                    rows = []
                    for u in U:
                        cot = u.reshape(out_layout.leaves[0].shape).astype(
                            np.float64 if dtype == "float64" else wd
                        )
                        rows.append(
                            flat_derivative(
                                vjp_user(cot, *args_d),  # noqa: B023 - the same callable on every pass
                                "vjp",
                                "a VJP has the shape of the input",
                            )
                        )
                    return np.stack(rows)

                vjp_fns[dtype] = vjp_rows
                jvp_fns[dtype] = None
            else:
                jvp_user = supplied.jvp
                assert jvp_user is not None

                def jvp_rows(
                    V: np.ndarray, dtype: str = dtype, args_d: tuple = args_d
                ) -> np.ndarray:
                    rows = []
                    for v in V:
                        tangents = tuple(
                            t.astype(np.float64 if dtype == "float64" else dt)
                            for t, dt in zip(pf.layout.split(v), pf.leaf_dtypes, strict=True)
                        )
                        out = jvp_user(tangents, *args_d)  # noqa: B023 - the same callable every pass
                        out = np.asarray(out, dtype=np.float64).ravel()
                        if out.size != m:
                            raise ShapeMismatchError(
                                f"jvp returned {out.size} values; the function has {m} outputs"
                            )
                        rows.append(out)
                    return np.stack(rows)

                jvp_fns[dtype] = jvp_rows
                vjp_fns[dtype] = None

        if wd == np.float64:
            vjp_fns["float64"] = vjp_fns["working"]
            jvp_fns["float64"] = jvp_fns["working"]
        elif vjp_fns.get("float64") is None and jvp_fns.get("float64") is None:
            notes.append(
                "the supplied derivative does not return float64 for float64 input, so a "
                "wrong rule cannot be told apart from an unstable one"
            )

        evaluate_mp = None
        mp_reason = None
        try:
            evaluate_mp = mp_evaluator(
                lambda leaves: f(*pf.args_with(leaves)), [l.shape for l in pf.layout.leaves]
            )
            y_mp = evaluate_mp(pf.x0, np.zeros_like(pf.x0), 30)
            if y_mp.size != m:
                raise TypeError("the output size changed on mpmath input")
        except Exception as exc:  # noqa: BLE001 - any failure means: no mp reference
            evaluate_mp = None
            mp_reason = f"{type(exc).__name__}: {exc}"

        return Target(
            x0=pf.x0,
            y0=y0,
            working_dtype=wd.name,
            eps=dtype_eps(wd),
            evaluate=evaluate,
            evaluate64=evaluate64,
            vjp=vjp_fns["working"],
            vjp64=vjp_fns.get("float64"),
            jvp=jvp_fns["working"],
            jvp64=jvp_fns.get("float64"),
            evaluate_mp=evaluate_mp,
            input_layout=pf.layout,
            output_layout=out_layout,
            backend=self.name,
            notes=notes,
            mp_unavailable_reason=mp_reason,
        )
