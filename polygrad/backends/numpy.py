"""The NumPy backend: no autodiff, the derivative to check is supplied by the user.

The function is evaluated one point at a time (NumPy code is not assumed to
broadcast over a batch axis). Inputs are promoted to float64 by passing
float64 arrays, which is what NumPy code does naturally; the mpmath evaluator
(:mod:`polygrad.backends.mpmath`) runs the same code at high precision.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .._pytree import flatten
from ..errors import ShapeMismatchError
from ._common import PointFunction, as_float_output, check_not_mutated, output_layout
from .base import Backend, Supplied, Target, dtype_eps
from .mpmath import mp_evaluator

__all__ = ["NumpyBackend"]


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
    distribution = "numpy"
    label = "NumPy"
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
