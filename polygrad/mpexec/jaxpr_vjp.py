"""A JAX function's own VJP program, re-executed on mpmath numbers.

``jax.vjp`` builds a program for ``U @ J``: the forward pass, and the transposed
linear map of its derivative rules (custom ``custom_jvp``/``custom_vjp`` rules
included, as the code defines them). :func:`build_vjp_mp` traces that program
once, with the cotangent as an input, to a jaxpr, and runs it on mpmath numbers
with :func:`polygrad.mpexec.jaxpr.build_evaluate_mp`: the rule the code
computes, in exact arithmetic. Beside a reference derivative it tells a rule
that is right but rounds badly in float64 (``1 - p`` with ``p`` within 1e-9 of
1 in a log-softmax whose largest logit dominates) from a rule that is wrong.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .jaxpr import build_evaluate_mp
from .values import vjp_rows

__all__ = ["build_vjp_mp"]


def _float_outputs(fn: Callable[..., Sequence[Any]], like: Any) -> Callable[..., list[Any]]:
    """``fn`` with integer outputs cast to ``like``'s dtype, so every output has a cotangent."""
    import jax.numpy as jnp

    def floats(*a: Any) -> list[Any]:
        outs = [jnp.asarray(o) for o in fn(*a)]
        return [o if jnp.issubdtype(o.dtype, jnp.inexact) else o.astype(like) for o in outs]

    return floats


def build_vjp_mp(
    fn: Callable[..., Sequence[Any]],
    leaves: Sequence[Any],
    dtypes: Sequence[Any],
    x64: bool = True,
) -> Callable[[np.ndarray, np.ndarray, int], np.ndarray] | None:
    """``fn``'s VJP on mpmath numbers, or None where its jaxpr does not run on them.

    Parameters
    ----------
    fn : callable
        ``fn(*leaves) -> list of arrays``, as for :func:`build_evaluate_mp`.
    leaves : sequence of arrays
        The checked leaves; only their shapes are used.
    dtypes : sequence of dtype
        The dtypes the leaves are traced in.
    x64 : bool
        Trace under ``jax.enable_x64`` (see :func:`build_evaluate_mp`).

    Returns
    -------
    callable or None
        ``(x0: ndarray (n,), U: ndarray (k, m), dps: int) -> object ndarray (k, n)``:
        the rows ``U @ J`` as ``fn``'s VJP computes them at ``x0``, on mpmath numbers
        at ``dps`` digits (the inputs and cotangents enter exactly). None where the
        VJP cannot be traced or uses a primitive with no mpmath rule (the names are
        those of :func:`polygrad.mpexec.jaxpr.unsupported_primitives`).
    """
    import jax

    shapes = [tuple(np.shape(a)) for a in leaves]
    floats = _float_outputs(fn, dtypes[0] if dtypes else np.float64)
    try:
        with jax.enable_x64(True) if x64 else contextlib.nullcontext():
            avals = [jax.ShapeDtypeStruct(s, d) for s, d in zip(shapes, dtypes, strict=True)]
            outs = jax.eval_shape(floats, *avals)
    except Exception:  # noqa: BLE001 - untraceable: no mp evaluation of the rule
        return None
    k = len(shapes)

    def rule(*a: Any) -> list[Any]:
        _, pull = jax.vjp(floats, *a[:k])
        return list(pull(list(a[k:])))

    cots = [np.zeros(o.shape) for o in outs]
    every = [np.zeros(s) for s in shapes] + cots
    ev, _ = build_evaluate_mp(rule, every, [*dtypes, *(o.dtype for o in outs)], x64=x64)
    if ev is None:
        return None

    return vjp_rows(ev)
