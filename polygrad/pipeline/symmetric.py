"""Symmetric matrix arguments: which leaves are symmetric, and which the user declares so.

The measurements the symmetric-subspace frame (:mod:`polygrad.pipeline.subspace`) rests
on, and the validation of ``symmetric=`` that :func:`polygrad.pipeline.prepare.prepare`
runs before anything is computed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .._names import argument_names, leaf_name
from ..backends.base import Leaf, Target
from ..errors import InputValueError

if TYPE_CHECKING:
    from .prepare import Options, Prepared

__all__ = [
    "NEAR_SYMMETRIC",
    "argument_leaves",
    "argument_of",
    "asymmetry",
    "declared_leaves",
    "is_square",
    "matrix_leaves",
]


NEAR_SYMMETRIC = 2.0**-17
"""Relative asymmetry (of the largest entry) below which a matrix argument counts as
symmetric, or ``4 eps`` of the working dtype if larger: a matrix built as ``M @ M.T`` in
float32 and cast to float64 is symmetric to a few float32 ulps only (matrix products
sum ``(i, j)`` and ``(j, i)`` in different orders), and the operators that read one
triangle treat it as symmetric all the same."""


def is_square(leaf: Leaf) -> bool:
    shape = leaf.shape
    return not leaf.pair and len(shape) >= 2 and shape[-1] == shape[-2] and shape[-1] >= 2


def asymmetry(target: Target, leaf: Leaf) -> tuple[float, float]:
    """``max |X - Xᵀ|`` of a square-matrix leaf and what counts as symmetric for it."""
    X = np.asarray(target.x0[leaf.offset : leaf.offset + leaf.size]).reshape(leaf.shape)
    size = float(np.max(np.abs(X))) if X.size else 0.0
    return float(np.max(np.abs(X - np.swapaxes(X, -1, -2)))), max(
        4 * target.eps, NEAR_SYMMETRIC
    ) * size


def matrix_leaves(target: Target) -> list[Leaf]:
    """Real leaves whose last two axes are equal (``n >= 2``) and whose value is symmetric
    (to :data:`NEAR_SYMMETRIC`)."""
    leaves = [lf for lf in target.input_layout.leaves if is_square(lf)]
    return [lf for lf in leaves if asymmetry(target, lf)[0] <= asymmetry(target, lf)[1]]


def argument_leaves(prep: Prepared, i: int) -> list[Leaf]:
    """The checked leaves of argument ``i`` (its array, or the arrays of its pytree)."""
    leaves = prep.target.input_layout.leaves
    if len(prep.argnums) == 1:
        return list(leaves) if i == prep.argnums[0] else []
    base = leaf_name(argument_names(prep.f, len(prep.args)), i, "", prep.argnums)
    return [lf for lf in leaves if lf.name == base or lf.name.startswith((base + "[", base + "."))]


def argument_of(prep: Prepared, leaf: Leaf) -> int | None:
    """The position of the argument ``leaf`` belongs to."""
    return next((i for i in prep.argnums if leaf in argument_leaves(prep, i)), None)


def declared_leaves(prep: Prepared, opts: Options) -> dict[str, int]:
    """The leaves of the arguments declared symmetric (``symmetric=``), by name -> position.

    Raises
    ------
    ValueError
        A declared position is out of range or not a checked argument, the check is
        with respect to parameters, or a declared leaf is not a real square matrix.
    InputValueError
        A declared matrix is not symmetric at the point.
    """
    if not opts.symmetric:
        return {}
    nargs = len(prep.args)
    if opts.wrt != "inputs":
        raise ValueError("symmetric= declares arguments symmetric; it needs wrt='inputs'")
    out: dict[str, int] = {}
    for given in opts.symmetric:
        i = int(given) % nargs if -nargs <= int(given) < nargs else None
        if i is None or i not in prep.argnums:
            raise ValueError(
                f"symmetric={given}: not a checked argument (argnums={prep.argnums}); name the "
                "positions of checked arguments whose matrices f takes as symmetric"
            )
        for leaf in argument_leaves(prep, i):
            _check_declared(prep.target, leaf, given)
            out[leaf.name] = i
    return out


def _check_declared(target: Target, leaf: Leaf, given: int) -> None:
    if not is_square(leaf):
        raise ValueError(
            f"symmetric={given}: {leaf.name} has shape {leaf.shape}; the symmetric convention "
            "is for real square matrices (last two axes equal, at least 2)"
        )
    gap, allowed = asymmetry(target, leaf)
    if gap > allowed:
        raise InputValueError(
            f"symmetric={given} declares {leaf.name} symmetric, but it is not at the point "
            f"(largest |X - Xᵀ| = {gap:.3g}, allowed {allowed:.3g}); pass a symmetric matrix"
        )
