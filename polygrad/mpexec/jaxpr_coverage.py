"""Which jaxprs the mpmath interpreter covers: primitive names and a coverage check.

:func:`unsupported_primitives` walks a jaxpr (and its sub-jaxprs) before
anything is evaluated, so that a function with an uncovered primitive gets a
float64 reference and a report that names the primitive and its source line.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import UnsupportedPrimitiveError
from .jaxpr_rules import (
    _FLOAT_TERNARY,
    _INT_OPS,
    _aval_dtype,
    _float_binary,
    _float_unary,
    _is_float,
    _is_key,
)

__all__ = [
    "SYMMETRIC_INPUT_PRIMITIVES",
    "supported_primitives",
    "symmetric_reads",
    "unsupported_primitives",
]

SYMMETRIC_INPUT_PRIMITIVES = frozenset({"cholesky", "eigh", "tridiagonal"})
"""Primitives documented to read a symmetric (Hermitian) matrix (``lax.linalg``): each
reads one triangle of its operand."""

_CALLS = ("jit", "pjit", "closed_call", "core_call", "remat", "checkpoint", "remat2")
_CUSTOM = ("custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr", "custom_lin")
_IDENTITY = ("stop_gradient", "reduce_precision", "optimization_barrier", "copy", "copy_p")
_MOVES = (
    "broadcast_in_dim",
    "reshape",
    "squeeze",
    "expand_dims",
    "transpose",
    "rev",
    "concatenate",
    "pad",
    "slice",
    "dynamic_slice",
    "dynamic_update_slice",
    "gather",
    "scatter",
    "split",
    "stack",
    "tile",
)
_SCATTER_COMBINE = (
    "scatter-add",
    "scatter_add",
    "scatter-sub",
    "scatter_sub",
    "scatter-mul",
    "scatter_mul",
    "scatter-min",
    "scatter_min",
    "scatter-max",
    "scatter_max",
)
_REDUCE = ("reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "reduce_and", "reduce_or")
_CUMULATIVE = ("cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp")
_WINDOW = ("reduce_window_sum", "reduce_window_max", "reduce_window_min")
_OTHER = (
    "convert_element_type",
    "select_n",
    "clamp",
    "integer_pow",
    "round",
    "iota",
    "dot_general",
    "argmax",
    "argmin",
    "sort",
    "conv_general_dilated",
    "cond",
    "while",
    "scan",
)


def supported_primitives() -> frozenset[str]:
    """Names of the primitives with a rule (integer-only equations are covered besides)."""
    import mpmath

    ctx = mpmath.MPContext()
    names = set(_float_unary(ctx)) | set(_float_binary(ctx)) | set(_FLOAT_TERNARY)
    names |= set(_INT_OPS) | set(_CALLS) | set(_CUSTOM) | set(_IDENTITY) | set(_MOVES)
    names |= set(_SCATTER_COMBINE) | set(_REDUCE) | set(_CUMULATIVE) | set(_WINDOW)
    names |= set(_OTHER)
    return frozenset(names)


def _where(eqn: Any) -> str | None:
    try:
        from jax._src import source_info_util

        text = source_info_util.summarize(eqn.source_info)
    except Exception:  # noqa: BLE001 - source info is a courtesy
        return None
    return text if text and "unknown" not in text else None


def _sub_jaxprs(eqn: Any) -> list[Any]:
    from jax.extend.core import ClosedJaxpr, Jaxpr

    out = []
    for v in eqn.params.values():
        for e in v if isinstance(v, (tuple, list)) else (v,):
            if isinstance(e, (ClosedJaxpr, Jaxpr)):
                out.append(e)
    return out


def unsupported_primitives(closed: Any) -> list[UnsupportedPrimitiveError]:
    """The equations of ``closed`` (recursively) that :func:`.jaxpr.evaluate_jaxpr_mp` cannot run.

    Parameters
    ----------
    closed : jax.extend.core.ClosedJaxpr or Jaxpr

    Returns
    -------
    list of UnsupportedPrimitiveError
        One per distinct primitive name, in order of first appearance; empty
        when the whole function is covered.
    """
    known = supported_primitives()
    found: dict[str, UnsupportedPrimitiveError] = {}
    todo: list[tuple[Any, str | None]] = [(closed, None)]
    while todo:
        j, outer = todo.pop()
        jaxpr = j.jaxpr if hasattr(j, "consts") else j
        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            # equations inside library functions (jit-ed jnp.linalg...) carry no source
            # line: name the user's line of the enclosing call instead
            where = _where(eqn) or outer
            avals = [v.aval for v in list(eqn.invars) + list(eqn.outvars)]
            dts = [_aval_dtype(a) for a in avals]
            if any(d is not None and not _is_key(d) and np.dtype(d).kind == "c" for d in dts):
                why = "complex numbers are not covered"
                found.setdefault(name, UnsupportedPrimitiveError(name, where, why))
                continue
            int_only = all(d is not None and not _is_float(d) for d in dts)
            if not int_only and name == "reduce_window":
                why = "a custom reducer"
                found.setdefault(name, UnsupportedPrimitiveError(name, where, why))
            elif name == "conv_general_dilated" and eqn.params.get("batch_group_count", 1) != 1:
                why = "batch_group_count > 1"
                found.setdefault(name, UnsupportedPrimitiveError(name, where, why))
            elif name not in known and not int_only:
                found.setdefault(name, UnsupportedPrimitiveError(name, where))
            todo.extend((sub, where) for sub in _sub_jaxprs(eqn))
    return list(found.values())


def symmetric_reads(closed: Any) -> dict[int, tuple[str, ...]]:
    """Which inputs of a jaxpr reach a primitive that reads a symmetric matrix.

    Parameters
    ----------
    closed : jax.extend.core.ClosedJaxpr
        The function's jaxpr; its inputs are the checked leaves, in order.

    Returns
    -------
    dict of int to tuple of str
        Input position -> names of the :data:`SYMMETRIC_INPUT_PRIMITIVES` whose operand
        depends on it, looked for in sub-jaxprs too (``jit``, custom rules' primal
        functions, control flow); positions without one are absent.
    """
    jaxpr = getattr(closed, "jaxpr", closed)
    found: dict[int, list[str]] = {}
    _reads(jaxpr, [frozenset({i}) for i in range(len(jaxpr.invars))], found)
    return {i: tuple(dict.fromkeys(names)) for i, names in found.items()}


def _reads(jaxpr: Any, ins: list[frozenset[int]], found: dict[int, list[str]]) -> list[Any]:
    """The inputs each output of ``jaxpr`` depends on (``ins``: those of its inputs),
    recording in ``found`` the symmetric-input primitives each input reaches."""
    from jax.extend.core import Literal

    none: frozenset[int] = frozenset()
    env: dict[Any, frozenset[int]] = dict(zip(jaxpr.invars, ins, strict=True))

    def read(v: Any) -> frozenset[int]:
        return none if isinstance(v, Literal) else env.get(v, none)

    for eqn in jaxpr.eqns:
        srcs = [read(v) for v in eqn.invars]
        union = none.union(*srcs)
        if eqn.primitive.name in SYMMETRIC_INPUT_PRIMITIVES:
            for i in union:
                found.setdefault(i, []).append(eqn.primitive.name)
        outs = [union] * len(eqn.outvars)
        subs = [getattr(sub, "jaxpr", sub) for sub in _sub_jaxprs(eqn)]
        for sub in subs:  # one to one where the arities agree, else every input to all
            same = len(sub.invars) == len(srcs)
            sub_outs = _reads(sub, srcs if same else [union] * len(sub.invars), found)
            if same and len(subs) == 1 and len(sub_outs) == len(outs):
                outs = sub_outs
        env.update(zip(eqn.outvars, outs, strict=True))
    return [read(v) for v in jaxpr.outvars]
