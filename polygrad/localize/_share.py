"""How much of the function's error the located node explains.

The function's error is ``ΔJ = J_autodiff - J_reference`` from the check's own entries.
Along the sum of the outputs (cotangent ``1``) it is the vector ``e = 1ᵀ ΔJ`` over the
checked inputs, and along its own direction ``v = e / |e|`` it is ``|e|``. To first order,
a node ``N`` whose rule is off by ``ΔJ_N`` adds ``ḡᵀ ΔJ_N ṫ`` to it, where ``ḡ`` is the
cotangent ``N``'s outputs receive in the program's backward pass from ``1`` (recorded as
the program runs) and ``ṫ`` the tangent its inputs get when the function's inputs move
along ``v`` (central differences of the inputs ``N`` saw in two more recordings, at
``x ± h v``). ``ḡᵀ ΔJ_N ṫ`` is the node's VJP applied to ``ḡ``, dotted with ``ṫ``, minus
central differences of ``ḡᵀ N`` along ``ṫ`` (:func:`polygrad.localize._core.projected_error`).
The share is ``ḡᵀ ΔJ_N ṫ / |e|``: near 1 where the node is the whole bug; the rest, where
it is less, comes from elsewhere (a second wrong rule). It is measured at two steps ``h``
and ``h / 2`` and given only where the two agree (a kink of an intermediate along ``v``
would make ``ṫ`` no tangent).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from .._pytree import flatten, unflatten
from ._core import Node, projected_error

if TYPE_CHECKING:  # pragma: no cover
    from ..backends.base import Backend
    from ..report import Report
    from . import CheckedCall, Recording

__all__ = ["WHOLE", "Probe", "Share", "probe"]

WHOLE = 0.1
"""A share within this of 1 is the whole error."""

AGREE = 0.02
"""The shares at the steps ``h`` and ``h / 2`` agree within this (absolute), else none is
given."""


@dataclass(frozen=True)
class Share:
    """The located node's part of the function's error.

    Attributes
    ----------
    node : float
        ``ḡᵀ ΔJ_N ṫ``: the node's rule error carried through the program, along the sum of
        the outputs and the direction of the function's error.
    function : float
        ``|1ᵀ ΔJ|``: the function's error along the same pair (from the check's entries).
    tolerance : float
        The check's tolerance along that pair (``Σ_j |v_j| Σ_i tolerance_ij``).
    same_op : float
        The part of every call of the same op (the node's other call sites of one custom
        rule, a layer used several times) together, the node's own included.
    calls : int
        How many calls of that op the program made (1: the node alone).
    """

    node: float
    function: float
    tolerance: float
    same_op: float = float("nan")
    calls: int = 1

    @property
    def fraction(self) -> float:
        """``node / function``: 1 where the node explains the whole error."""
        return self.node / self.function

    @property
    def same_op_fraction(self) -> float:
        """``same_op / function``: the share of every call of the op together."""
        return self.same_op / self.function

    def to_dict(self) -> dict[str, float]:
        """``node``, ``function``, ``tolerance``, ``fraction``, ``same_op``,
        ``same_op_fraction`` and ``calls`` as a mapping."""
        return {"node": self.node, "function": self.function, "tolerance": self.tolerance,
                "fraction": self.fraction, "same_op": self.same_op,
                "same_op_fraction": self.same_op_fraction, "calls": self.calls}  # fmt: skip


Recorder = Callable[..., "Recording"]


@dataclass(frozen=True)
class Probe:
    """What every node's share is measured from: the function's error along the sum of
    its outputs and its own direction ``v``, and the program recorded three more times:
    as run (each node's cotangent) and at ``x ± h v`` for two steps ``h`` (each node's
    tangent)."""

    function: float
    tolerance: float
    walked: Recording
    as_run: Recording
    moved: tuple[tuple[float, Recording, Recording], ...]

    def part(self, node: Node) -> float | str:
        """``ḡᵀ ΔJ_N ṫ`` of ``node`` (a node of :attr:`walked`), or why it is not measured."""
        g = _cotangent(self, node)
        if isinstance(g, str):
            return g
        parts = []
        for h, plus, minus in self.moved:
            seen = [_same_node(rec, node, self.walked) for rec in (plus, minus)]
            if seen[0] is None or seen[1] is None:
                return "the program records other nodes at moved inputs"
            t = [(a - b) / (2 * h) for a, b in zip(seen[0].inputs, seen[1].inputs, strict=True)]
            parts.append(projected_error(node, g, t))
        if abs(parts[0] - parts[1]) > AGREE * self.function:
            return ("its measurements at two steps disagree (shares "
                    f"{parts[0] / self.function:.3g} and {parts[1] / self.function:.3g}): the "
                    "node's inputs do not move smoothly along the direction of the error (an "
                    "intermediate at a kink), or the program's working dtype rounds their "
                    "moves")  # fmt: skip
        return parts[1]

    def share(self, node: Node) -> Share | str:
        """``node``'s :class:`Share`, with every call of its op together."""
        own = self.part(node)
        if isinstance(own, str):
            return own
        same = [n for n in _in_order(self.walked) if n.site.op == node.site.op]
        parts = [own if n is node else self.part(n) for n in same]
        total = sum(p for p in parts if not isinstance(p, str))
        return Share(own, self.function, self.tolerance, total, len(same))


def probe(call: CheckedCall, report: Report, walked: Recording, record: Recorder,
          backend: Backend) -> Probe | str:  # fmt: skip
    """The :class:`Probe` of a failed check, or why no share can be measured (a string).

    Parameters
    ----------
    call : CheckedCall
        The checked call; its checked arguments are moved (copies), never the user's.
    report : Report
        Its report: the function's error and tolerance come from its entries.
    walked : Recording
        The wrong-rule walk's recording, whose nodes the shares are of.
    record : callable
        The framework's recorder (``record(call, report, as_run=...)``).
    backend : Backend
        The framework's backend: its ``to_numpy`` and ``from_numpy`` make the moved
        copies of the checked arguments.
    """
    checked = _checked(call, backend)
    if isinstance(checked, str):
        return checked
    error = _function_error(report, checked)
    if isinstance(error, str):
        return error
    e, tol = error
    model = float(np.linalg.norm(e))
    v = e / model
    bound = float(np.abs(v).dot(tol))
    if not model > bound:
        return ("the entries' errors cancel in the sum of the outputs (along it, the error "
                f"{model:.2e} is within the tolerance {bound:.2e})")  # fmt: skip
    moved = tuple((h, record(_moved_call(call, backend, h * v), report),
                   record(_moved_call(call, backend, -h * v), report))
                  for h in _steps(checked, report))  # fmt: skip
    return Probe(model, bound, walked, record(call, report, as_run=True), moved)


def _function_error(report: Report,
                    checked: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray] | str:  # fmt: skip
    """``1ᵀ ΔJ`` over the checked inputs and the summed tolerances, from a full check's
    entries (column by column: the outputs of one input are consecutive)."""
    d = report.details
    ent = report.entries
    m, n = d.outputs, d.inputs
    if d.strategy != "full" or len(ent.names) != m * n:
        return "measured on a full check only (this one checked projections)"
    if sum(a.size for a in checked) != n or any(np.iscomplexobj(a) for a in checked):
        return (
            "measured where the checked inputs are real arrays passed to the function (here: "
            'wrt="parameters", or complex values)'
        )
    diff = (ent.autodiff - ent.reference).reshape(n, m)
    if not np.all(np.isfinite(diff)) or np.iscomplexobj(diff):
        return "the function's error is not finite at every entry"
    return diff.sum(axis=1), ent.tolerance.reshape(n, m).sum(axis=1)


def _cotangent(p: Probe, node: Node) -> np.ndarray | str:
    """The cotangent ``node``'s outputs received in the program's backward pass from ones
    on its outputs (the recorder's ``as_run`` pass), as float64."""
    same = _same_node(p.as_run, node, p.walked)
    if same is None or same.cotangent is None:
        return "the node's cotangent could not be recorded"
    g = np.asarray(same.cotangent, dtype=np.float64)
    if g.size != node.forward(list(node.inputs)).size or not np.all(np.isfinite(g)):
        return "the node's cotangent does not match its outputs"
    return g


def _same_node(rec: Recording, node: Node, within: Recording) -> Node | None:
    """The node of ``rec`` that is ``node`` of ``within``: the same op at the same place,
    on inputs of the same shapes, the same number of times before it (positions differ
    where one recording runs in other dtypes: JAX's float64 trace adds casts)."""
    key = _key(node)
    ordinal = sum(_key(n) == key for n in _in_order(within) if n.index < node.index)
    same = [n for n in _in_order(rec) if _key(n) == key]
    return same[ordinal] if ordinal < len(same) else None


def _key(n: Node) -> tuple[Any, ...]:
    return (n.site, tuple(x.shape for x in n.inputs))


def _in_order(rec: Recording) -> list[Node]:
    return sorted((*rec.custom, *rec.primitives), key=lambda n: n.index)


def _moved_call(call: CheckedCall, backend: Backend, delta: np.ndarray) -> CheckedCall:
    """``call`` with new arrays for its checked arguments, moved by ``delta`` (flattened
    over their leaves, in the check's order) and rounded to their dtypes."""
    args = list(call.args)
    start = 0
    for i in call.argnums:
        leaves, _, tree = flatten(args[i])
        new = []
        for leaf in leaves:
            a = backend.to_numpy(leaf)
            step = delta[start : start + a.size].reshape(a.shape)
            new.append(backend.from_numpy((a.astype(np.float64) + step).astype(a.dtype)))
            start += a.size
        args[i] = unflatten(tree, new)
    return replace(call, args=tuple(args))


def _steps(checked: list[np.ndarray], report: Report) -> Sequence[float]:
    """``h`` and ``h / 2``: the cube root of the working dtype's eps (the step of least
    error of a central difference) times the size of the checked inputs."""
    from ..backends.base import dtype_eps

    eps = dtype_eps(report.details.working_dtype)
    size = max([1.0] + [float(np.max(np.abs(a))) for a in checked if a.size])
    h = eps ** (1 / 3) * size
    return (h, h / 2)


def _checked(call: CheckedCall, backend: Backend) -> list[np.ndarray] | str:
    """The leaves of the checked arguments as NumPy arrays, in the check's order, or why
    they are not the framework's arrays."""
    leaves = [leaf for i in call.argnums for leaf in flatten(call.args[i])[0]]
    if not all(backend.owns(leaf) and hasattr(leaf, "dtype") for leaf in leaves):
        return (
            "measured where the checked inputs are real arrays passed to the function (here: "
            'wrt="parameters", or another kind of argument)'
        )
    return [backend.to_numpy(leaf) for leaf in leaves]
