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
from ..policy import DEFAULT_POLICY
from ._common import PointFunction, as_float_output, check_not_mutated, output_layout
from ._mp_ufuncs import mp_array_type, recording_kinks
from ._quad_eval import defer_quad, quad_evaluator
from ._supplied_mp import supplied_vjp_mp
from .base import Backend, Supplied, Target, computed_in_note, dtype_eps
from .mpmath import _shared_context, mp_evaluator

__all__ = ["NumpyBackend"]


def _outer(g: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    return lambda U: U[:, :1] * g[None, :]


def _left(J: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    return lambda U: U @ J


def _right(J: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    return lambda V: V @ J.T


def _narrowest_output(out: Any) -> np.dtype | None:
    """The least precise floating dtype among ``f``'s output leaves (NumPy arrays and
    scalars; a complex one counts as its real part's), or None when none is floating."""
    found: np.dtype | None = None
    for leaf in flatten(out)[0]:
        dt = getattr(leaf, "dtype", None)
        if dt is None or np.dtype(dt).kind not in "fc":
            continue
        real = np.dtype(np.finfo(dt).dtype)  # a complex dtype's parts
        if found is None or dtype_eps(real) > dtype_eps(found):
            found = real
    return found


def _shape_message(what: str, part: Any, arr: np.ndarray, spec: Any, expect: str) -> str:
    """The error for a supplied derivative leaf of the wrong shape: a list or tuple of
    numbers given for an array argument is named as such, not by its first number."""
    if isinstance(part, (list, tuple)) and spec.shape != () and arr.shape == ():
        return (
            f"{what} returned a {type(part).__name__} of {len(part)} numbers for {spec.name}, "
            f"an array of shape {spec.shape}; return an array of that shape "
            f"(np.asarray(...)): {expect}"
        )
    return (
        f"{what} returned shape {arr.shape} for {spec.name}, whose shape is {spec.shape}; {expect}"
    )


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
        _check_supplied(supplied, wrt)
        pf = PointFunction(f, args, argnums)
        wd = np.dtype(pf.working_dtype)
        leaves0 = pf.leaves_at(pf.x0, "working")
        out0 = f(*pf.args_with(leaves0))
        y0, out_leaves = as_float_output(out0)
        check_not_mutated(leaves0, pf.layout.split(pf.x0))
        m = y0.size
        notes: list[str] = list(pf.notes)  # inputs of several dtypes
        narrow = _narrowest_output(out0)
        if narrow is not None and dtype_eps(narrow) > dtype_eps(wd):
            # NumPy code has no captured program: a narrower output is what shows a cast
            notes.append(computed_in_note(wd.name, narrow.name, "the value it returns"))
            wd = narrow
        evaluate, evaluate64 = _evaluators(pf, wd, notes)
        out_layout = output_layout(out_leaves, flatten(out0)[1])
        rules = _Rules(pf, argnums, supplied, m, out_layout.leaves[0].shape, wd)
        vjp_fns: dict[str, Rule] = {}
        jvp_fns: dict[str, Rule] = {}
        for dtype in ("working", "float64"):
            vjp_fns[dtype], jvp_fns[dtype] = rules.at(dtype)
        if wd == np.float64:
            vjp_fns["float64"] = vjp_fns["working"]
            jvp_fns["float64"] = jvp_fns["working"]
        elif vjp_fns["float64"] is None and jvp_fns["float64"] is None:
            notes.append(
                "the supplied derivative does not return float64 for float64 input, so a "
                "wrong rule cannot be told apart from an unstable one"
            )
        out_shape = out_layout.leaves[0].shape

        def build_mp(target: Target) -> None:
            target.evaluate_mp, target.mp_unavailable_reason = _mp_evaluator(f, pf, m)
            if target.evaluate_mp is not None:
                target.vjp_mp = supplied_vjp_mp(pf, supplied, len(argnums), out_shape)

        target = Target(
            x0=pf.x0,
            y0=y0,
            working_dtype=wd.name,
            eps=dtype_eps(wd),
            evaluate=evaluate,
            evaluate64=evaluate64,
            vjp=vjp_fns["working"],
            vjp64=vjp_fns["float64"],
            jvp=jvp_fns["working"],
            jvp64=jvp_fns["float64"],
            input_layout=pf.layout,
            output_layout=out_layout,
            backend=self.name,
            notes=notes,
        )
        target.intermediate_kinks = lambda: _intermediates_at_a_kink(f, pf)
        # f on quad arrays, tried when a check asks for it
        defer_quad(target, lambda _: quad_evaluator(f, pf))
        # f runs once on mpmath numbers to show that it can: a large input, whose check
        # considers mp only to re-examine entries in doubt, pays that when it does
        if pf.x0.size > EAGER_MP_PROBE_INPUTS:
            target.deferred["mp"] = build_mp
        else:
            build_mp(target)
        return target


def _intermediates_at_a_kink(f: Callable[..., Any], pf: PointFunction) -> bool | None:
    """Whether ``f``, run once at the point on mpmath numbers (the array subclass that
    sees every ufunc and array function), has an operation exactly at its kink (see
    :mod:`polygrad.backends._mp_kinks`); None where it does not run there."""
    dps = 30
    cls = mp_array_type(_shared_context(dps))
    leaves = [leaf.shape for leaf in pf.layout.leaves]
    try:
        evaluate = mp_evaluator(lambda ls: f(*pf.args_with(ls)), leaves, ufuncs=True)
        with recording_kinks(cls) as found:
            evaluate(pf.x0, np.zeros_like(pf.x0), dps)
    except Exception:  # noqa: BLE001 - f does not run there: no answer
        return None
    return bool(found)


EAGER_MP_PROBE_INPUTS = DEFAULT_POLICY.mp_auto_size
"""Inputs up to which f's run on mpmath numbers is tried when the target is made; a larger
input tries it when a check first asks for mp (see :meth:`Target.mp_mode`)."""

Rule = Callable[[np.ndarray], np.ndarray] | None
"""A VJP ``(k, m) -> (k, n)`` or JVP ``(k, n) -> (k, m)`` on rows, or None."""


def _check_supplied(supplied: Supplied, wrt: str) -> None:
    """Exactly one supplied derivative, with respect to the inputs.

    Raises
    ------
    ValueError
        ``wrt`` is not ``"inputs"``.
    TypeError
        No derivative, or more than one, was supplied.
    """
    if wrt != "inputs":
        raise ValueError("NumPy functions have no parameters to check; use wrt='inputs'")
    given = supplied.given()
    if not given:
        raise TypeError(
            "NumPy functions have no autodiff: pass the derivative to check as grad= "
            "(scalar functions), jac=, vjp= or jvp=. If f is written with JAX, PyTorch or "
            "TensorFlow operations, pass its arguments as that framework's arrays (for "
            "example jnp.asarray(x)) or name it with backend='jax', 'torch' or 'tensorflow'."
        )
    if len(given) > 1:
        raise TypeError(f"pass only one of grad=, jac=, vjp=, jvp= (got {', '.join(given)}).")


def _evaluators(
    pf: PointFunction, wd: np.dtype, notes: list[str]
) -> tuple[Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray] | None]:
    """f on rows ``(k, n) -> (k, m)`` in the working dtype, and promoted to float64.

    Promotion passes float64 inputs; a function that then returns a narrower float
    computes in that precision internally: no float64 evaluator, and a note says so.
    """

    def evaluate(X: np.ndarray) -> np.ndarray:
        return np.stack([as_float_output(pf.call(row, "working"))[0] for row in X])

    if wd == np.float64:
        return evaluate, evaluate
    _, leaves64 = as_float_output(pf.call(pf.x0, "float64"))
    out_dtypes = {a.dtype for a in leaves64 if a.dtype.kind == "f"}
    if out_dtypes and all(np.dtype(d).itemsize >= 8 for d in out_dtypes):

        def evaluate64(X: np.ndarray) -> np.ndarray:
            return np.stack([as_float_output(pf.call(row, "float64"))[0] for row in X])

        return evaluate, evaluate64
    notes.append(
        "the function returns "
        + ", ".join(sorted(str(d) for d in out_dtypes))
        + " for float64 input, so it cannot be promoted; the reference is "
        "computed in the working dtype"
    )
    return evaluate, None


def _precise(arr_leaves: list[Any], dtype: str) -> bool:
    """Whether a derivative evaluated at float64 inputs came back in float64."""
    return (
        all(np.asarray(a).dtype == np.float64 for a in arr_leaves) if dtype == "float64" else True
    )


class _Rules:
    """The supplied derivative (``grad``/``jac``/``vjp``/``jvp``) as row-wise VJP and JVP."""

    def __init__(
        self,
        pf: PointFunction,
        argnums: tuple[int, ...],
        supplied: Supplied,
        m: int,
        out_shape: tuple[int, ...],
        wd: np.dtype,
    ) -> None:
        self.pf, self.argnums, self.supplied = pf, argnums, supplied
        self.m, self.out_shape, self.wd = m, tuple(out_shape), wd

    def at(self, dtype: str) -> tuple[Rule, Rule]:
        """``(vjp, jvp)`` at the point's inputs in ``dtype`` (``"working"`` or ``"float64"``)."""
        args_d = self.pf.args_with(self.pf.leaves_at(self.pf.x0, dtype))
        if self.supplied.grad is not None:
            return self._grad(args_d, dtype), None
        if self.supplied.jac is not None:
            return self._jac(args_d, dtype)
        if self.supplied.vjp is not None:
            return self._vjp(args_d, dtype), None
        return None, self._jvp(args_d, dtype)

    def flat(self, value: Any, what: str, expect: str) -> np.ndarray:
        """Flatten a supplied derivative shaped like the checked inputs.

        Raises
        ------
        ShapeMismatchError
            Not one array per checked argument, or a leaf of the wrong shape.
        """
        n_args = len(self.argnums)
        parts = value if n_args > 1 else (value,)
        if n_args > 1 and (not isinstance(value, (tuple, list)) or len(value) != n_args):
            raise ShapeMismatchError(
                f"{what} must return a tuple of {n_args} arrays (one per checked "
                f"argument), got {type(value).__name__}"
            )
        flat_parts = []
        leaves_iter = iter(self.pf.layout.leaves)
        for part, _ in zip(parts, self.argnums, strict=True):
            for leaf in flatten(part)[0]:
                spec = next(leaves_iter)
                arr = np.asarray(leaf)
                if arr.shape != spec.shape:
                    raise ShapeMismatchError(_shape_message(what, part, arr, spec, expect))
                flat_parts.append(arr.astype(np.float64).ravel())
        return np.concatenate(flat_parts)

    def _grad(self, args_d: tuple[Any, ...], dtype: str) -> Rule:
        if self.m != 1:
            raise ShapeMismatchError(
                f"grad= needs a scalar function, but f returns {self.m} values; pass jac=, "
                "vjp= or jvp= instead"
            )
        assert self.supplied.grad is not None
        raw = self.supplied.grad(*args_d)
        g = self.flat(raw, "grad", "a gradient has the shape of its input")
        return _outer(g) if _precise(flatten(raw)[0], dtype) else None

    def _jac(self, args_d: tuple[Any, ...], dtype: str) -> tuple[Rule, Rule]:
        assert self.supplied.jac is not None
        raw = self.supplied.jac(*args_d)
        parts = raw if len(self.argnums) > 1 else (raw,)
        cols = []
        for part, leaf in zip(parts, self.pf.layout.leaves, strict=False):
            arr = np.asarray(part)
            if arr.size != self.m * leaf.size:
                raise ShapeMismatchError(
                    f"jac returned shape {arr.shape} for {leaf.name}; expected "
                    f"output shape + input shape = {self.out_shape + leaf.shape}"
                )
            cols.append(arr.astype(np.float64).reshape(self.m, leaf.size))
        J = np.concatenate(cols, axis=1)
        if not _precise([np.asarray(p) for p in parts], dtype):
            return None, None
        return _left(J), _right(J)

    def _vjp(self, args_d: tuple[Any, ...], dtype: str) -> Rule:
        vjp_user = self.supplied.vjp
        assert vjp_user is not None
        cot_dtype = np.float64 if dtype == "float64" else self.wd

        def vjp_rows(U: np.ndarray) -> np.ndarray:
            rows = []
            for u in U:
                cot = u.reshape(self.out_shape).astype(cot_dtype)
                rows.append(
                    self.flat(vjp_user(cot, *args_d), "vjp", "a VJP has the shape of the input")
                )
            return np.stack(rows)

        return vjp_rows

    def _jvp(self, args_d: tuple[Any, ...], dtype: str) -> Rule:
        jvp_user, pf, m = self.supplied.jvp, self.pf, self.m
        assert jvp_user is not None

        def jvp_rows(V: np.ndarray) -> np.ndarray:
            rows = []
            for v in V:
                tangents = tuple(
                    t.astype(np.float64 if dtype == "float64" else dt)
                    for t, dt in zip(pf.layout.split(v), pf.leaf_dtypes, strict=True)
                )
                out = np.asarray(jvp_user(tangents, *args_d), dtype=np.float64).ravel()
                if out.size != m:
                    raise ShapeMismatchError(
                        f"jvp returned {out.size} values; the function has {m} outputs"
                    )
                rows.append(out)
            return np.stack(rows)

        return jvp_rows


def _mp_evaluator(
    f: Callable[..., Any], pf: PointFunction, m: int
) -> tuple[Callable[..., np.ndarray] | None, str | None]:
    """f on mpmath numbers (``evaluate_mp``), or None and the reason it does not run.

    Plain object arrays first; where they fail, the array subclass on which the ufuncs
    without an object loop run too (``np.logaddexp``, ``np.isfinite``...; see
    :mod:`polygrad.backends._mp_ufuncs`). The reason given is the subclass's failure.
    """
    reason = None
    for ufuncs in (False, True):
        try:
            evaluate_mp = mp_evaluator(
                lambda leaves: f(*pf.args_with(leaves)),
                [l.shape for l in pf.layout.leaves],
                ufuncs=ufuncs,
            )
            y_mp = evaluate_mp(pf.x0, np.zeros_like(pf.x0), 30)
            if y_mp.size != m:
                raise TypeError("the output size changed on mpmath input")
            return evaluate_mp, None
        except Exception as exc:  # noqa: BLE001 - any failure means: no mp reference
            reason = f"{type(exc).__name__}: {exc}"  # the subclass's, which got further
    return None, reason
