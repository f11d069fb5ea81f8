"""Compiled batched callables shared by every function with the same jaxpr.

A test suite checks the same code again and again with new function objects (a
pytest parametrization builds its lambda anew in each test, a loop over points
makes a new closure per point), and ``jax.jit`` compiles each new function object
again: for a small function, XLA's compilation is most of a check. The jaxpr of
such a function is the same each time, up to the values of the arrays it closes
over, which it takes as constants. This module compiles the batched evaluation,
VJP and JVP of a jaxpr once, with its constants as arguments, and hands them to
every later function whose jaxpr prints the same, with constants of the same
shapes and dtypes.

Only a jaxpr whose every parameter is plain data (numbers, strings, dtypes,
JAX's own objects such as shardings, meshes and dimension numbers, nested jaxprs
without constants of their own) is shared, keyed by its printed form and every
parameter (a jaxpr does not print its default parameters). A custom derivative
rule (``jax.custom_jvp``/``custom_vjp``, which ``jax.nn.relu`` and
``jax.nn.softplus`` use too), a host callback or anything else that carries
Python code could differ between two functions whose jaxprs print the same: such
a function stays with its own function object
(:data:`polygrad.backends._capture_cache.CAPTURES`) and compiles anew.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np

from ._capture_cache import CaptureCache

__all__ = ["Compiled", "compiled_for", "structure_key"]

MAX_PROGRAMS = 64
"""Most compiled programs kept; the least recently used is dropped first."""

_PLAIN = (type(None), bool, int, float, complex, str, bytes, np.dtype, np.generic, enum.Enum)

Compiled = tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]]
"""Batched evaluation ``(*leaves)``, VJP ``(primals, cotangents)`` and JVP
``(primals, tangents)``, as :class:`polygrad.backends.jax._Derivatives` calls them."""


class _NotPlain(Exception):
    """A parameter that could differ between two jaxprs that print the same."""


_JAX_OBJECTS = {"Mesh", "AbstractMesh"}  # JAX's own callable parameters that are plain data
_RULES = {"WrappedFun"}  # JAX's wrapper of Python code (custom rules), not callable itself


def _param(v: Any, core: Any) -> Any:
    """A printable stand-in for one parameter (nested jaxprs by their own key)."""
    if isinstance(v, _PLAIN):
        return v
    if isinstance(v, (tuple, list, frozenset)):
        return (type(v).__name__, tuple(_param(x, core) for x in v))
    if isinstance(v, dict):
        return ("dict", tuple((_param(k, core), _param(x, core)) for k, x in v.items()))
    if isinstance(v, core.ClosedJaxpr):
        if v.consts:  # their values do not print
            raise _NotPlain("a nested jaxpr with constants")
        return ("closed", _jaxpr_params(v.jaxpr, core))
    if isinstance(v, core.Jaxpr):
        return ("open", _jaxpr_params(v, core))
    module, name = type(v).__module__ or "", type(v).__name__
    if name in _RULES:
        raise _NotPlain(name)
    if module.split(".")[0] in ("jax", "jaxlib") and (not callable(v) or name in _JAX_OBJECTS):
        return repr(v)  # shardings, layouts, dimension numbers, precision, meshes
    # a custom derivative rule, a host callback: Python code the jaxpr does not show
    raise _NotPlain(type(v).__qualname__)


def _jaxpr_params(jaxpr: Any, core: Any) -> tuple[Any, ...]:
    """Every parameter of every equation, printed or not (defaults are not printed)."""
    if jaxpr.effects:
        raise _NotPlain("effects")
    return tuple(
        (eqn.primitive.name, tuple((k, _param(v, core)) for k, v in sorted(eqn.params.items())))
        for eqn in jaxpr.eqns
    )


def structure_key(closed: Any) -> str | None:
    """The printed jaxpr, all its parameters and its constants' types, or None.

    Parameters
    ----------
    closed : jax.core.ClosedJaxpr
        A function's jaxpr, as ``jax.make_jaxpr`` returns it.

    Returns
    -------
    str or None
        Equal for two jaxprs that compute the same function of (constants,
        inputs), the constants typed as the jaxpr types them; None where a
        parameter is Python code (a custom derivative rule,
        a callback: see the module docstring).
    """
    from jax.extend import core

    try:
        params = _jaxpr_params(closed.jaxpr, core)
    except _NotPlain:
        return None
    consts = tuple(str(v.aval) for v in closed.jaxpr.constvars)
    return f"{closed.jaxpr}\n{params!r}\n{consts}"


def _build(jaxpr: Any, n_leaves: int, cast: Any) -> Compiled:
    """The three jitted callables of ``jaxpr``, each taking its constants first."""
    import jax
    import jax.numpy as jnp

    def run(consts: list[Any], *leaves: Any) -> list[Any]:
        return list(jax.core.eval_jaxpr(jaxpr, consts, *leaves))

    def run_float(consts: list[Any], *leaves: Any) -> list[Any]:
        return [o if jnp.issubdtype(o.dtype, jnp.inexact) else o.astype(cast)
                for o in run(consts, *leaves)]  # fmt: skip

    def vjp(consts: list[Any], primals: list[Any], cots: list[Any]) -> Any:
        _, pull = jax.vjp(lambda *p: run_float(consts, *p), *primals)
        return jax.vmap(pull)(cots)

    def jvp(consts: list[Any], primals: list[Any], tangents: list[Any]) -> Any:
        def one(*t: Any) -> list[Any]:
            return jax.jvp(lambda *p: run_float(consts, *p), tuple(primals), tuple(t))[1]

        return jax.vmap(one)(*tangents)

    in_axes = (None,) + (0,) * n_leaves
    return jax.jit(jax.vmap(run, in_axes=in_axes)), jax.jit(vjp), jax.jit(jvp)


PROGRAMS = CaptureCache(MAX_PROGRAMS)
"""The process-wide map from a structure key to its compiled callables (kind
``"jax.program"``; nothing beyond the key is frozen, so no state is compared)."""


def compiled_for(
    g: Callable[..., list[Any]], primals: list[Any], cast: Any, context: Hashable
) -> Compiled | None:
    """Batched callables of ``g`` at leaves shaped like ``primals``, shared by structure.

    Parameters
    ----------
    g : callable
        ``(*leaves) -> list of arrays``; traced once here with ``jax.make_jaxpr``
        (call this under the precision context it runs in).
    primals : list of jax.Array
        One unbatched leaf per input, for tracing.
    cast : dtype
        The float dtype integer outputs are cast to (they need a cotangent).
    context : hashable
        Everything else that selects the program: what it computes (working dtype
        or float64, and how promoted), the leaves' shapes, dtypes and device.

    Returns
    -------
    (evaluate, vjp, jvp) or None
        Callables with the signatures of :data:`Compiled`, bound to ``g``'s own
        constants; None where ``g`` cannot be traced or its jaxpr cannot be shared.
    """
    import jax
    import jax.numpy as jnp

    try:
        closed = jax.make_jaxpr(g)(*primals)
    except Exception:  # noqa: BLE001 - an untraceable g keeps its own (row by row) path
        return None
    key = structure_key(closed)
    if key is None:
        return None
    ev, vjp, jvp = PROGRAMS.get(
        "jax.program",
        (context, str(np.dtype(cast)), key),
        (),
        lambda: _build(closed.jaxpr, len(primals), cast),
    )
    # each constant as the jaxpr types it (a NumPy float64 array closed over with x64 off
    # is float32 there): JAX itself is never handed the user's NumPy object
    consts = [jnp.asarray(c, dtype=v.aval.dtype)
              for c, v in zip(closed.consts, closed.jaxpr.constvars, strict=True)]  # fmt: skip
    return (
        lambda *leaves: ev(consts, *leaves),
        lambda primals, cots: vjp(consts, primals, cots),
        lambda primals, tangents: jvp(consts, primals, tangents),
    )
