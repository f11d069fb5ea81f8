"""The framework-free part of localization: one node's rule against its own differences.

A *node* is one operation of the captured program (a custom rule region, or a
primitive) with the values it saw in the forward pass. Its rule is checked alone:
``k`` random projections ``uᵀ J v`` of the node's Jacobian, the autodiff side from the
node's own VJP (``<vjp(u), v>``), the reference side from central differences of the
node's own forward along ``v`` with one Richardson step and an error bar (the change of
the last extrapolation plus the round-off of the differences). Nothing here imports a
framework: a node's forward and VJP take and give NumPy float64 arrays.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "Flow",
    "Node",
    "NodeCheck",
    "RecordedCall",
    "Site",
    "Step",
    "check_node",
    "check_nodes",
    "projected_error",
    "with_cotangents",
]

PROJECTIONS = 3
"""Random pairs ``(u, v)`` per node."""
C_ROUNDOFF = 64.0
"""Round-off allowed to the node's VJP, in units of its arithmetic's ``eps * scale``."""


@dataclass(frozen=True)
class Site:
    """Where a node is in the user's program.

    Attributes
    ----------
    op : str
        The operation, e.g. ``"torch.autograd.Function LinearFn"``.
    kind : str
        ``"custom rule"`` (a user's rule region) or ``"primitive"`` (the framework's).
    path : str
        The module or layer path (``"model.3 (BuggyLinear)"``), or ``""`` when unknown.
    source : str
        The Python source line that created the node (``"file.py:12 in forward"``), or ``""``.
    """

    op: str
    kind: str
    path: str = ""
    source: str = ""

    def where(self) -> str:
        """``op`` with its path and source line, on one line."""
        parts = [self.op]
        if self.path:
            parts.append(f"in {self.path}")
        if self.source:
            parts.append(f"at {self.source}")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, str]:
        """``op``, ``kind``, ``path`` and ``source`` as a JSON-ready mapping."""
        return {"op": self.op, "kind": self.kind, "path": self.path, "source": self.source}


@dataclass(frozen=True)
class RecordedCall:
    """One call recorded in the forward pass: the function, its arguments (tensors
    copied), where it ran, its position in the forward pass (``index``, -1 when not
    counted) and the positions of the recorded calls whose outputs it read (``reads``)."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    site: Site
    index: int = -1
    reads: tuple[int, ...] = ()


@dataclass(frozen=True)
class Step:
    """One recorded call of the forward pass: where it is, the positions of the recorded
    calls whose outputs it read, and whether its outputs carry derivatives (``floating``:
    a comparison's do not)."""

    site: Site
    reads: tuple[int, ...] = ()
    floating: bool = True


@dataclass
class Flow:
    """Which recorded call made each value of one forward pass, by identity.

    A recorder calls :meth:`reads` with a call's input values before recording it, and
    :meth:`made_by` with its outputs after; the values are kept alive until the
    recording ends, so an ``id`` is never reused meanwhile.
    """

    made: dict[int, tuple[int, Any]] = field(default_factory=dict)

    def reads(self, values: Iterable[Any]) -> tuple[int, ...]:
        """The positions of the calls that made any of ``values``, in first-read order."""
        out: list[int] = []
        for v in values:
            hit = self.made.get(id(v))
            if hit is not None and hit[1] is v and hit[0] not in out:
                out.append(hit[0])
        return tuple(out)

    def made_by(self, index: int, values: Iterable[Any]) -> None:
        """Record that the call at position ``index`` returned ``values``; a value an
        earlier call made stays that call's (an identity, such as an eval-mode dropout,
        returns its input: its cotangent is the maker's)."""
        for v in values:
            hit = self.made.get(id(v))
            if hit is None or hit[1] is not v:
                self.made[id(v)] = (index, v)

    def outputs(self) -> dict[int, list[Any]]:
        """``index -> values`` made by each call (``index >= 0``), in the order returned."""
        out: dict[int, list[Any]] = {}
        for index, v in self.made.values():
            if index >= 0:
                out.setdefault(index, []).append(v)
        return out


@dataclass(frozen=True)
class Node:
    """One operation with the inputs it saw in the forward pass.

    Attributes
    ----------
    site : Site
        Its name and place.
    inputs : tuple of numpy.ndarray
        The differentiable inputs it saw (float64 copies, any shapes).
    forward : callable
        ``forward(xs) -> numpy.ndarray``: the node alone at ``xs`` (same shapes as
        ``inputs``), its floating outputs flattened and concatenated, float64.
    vjp : callable
        ``vjp(xs, u) -> list of numpy.ndarray``: the framework's rule for the node at
        ``xs`` applied to the cotangent ``u`` (shape of ``forward``'s output), one array
        per input (zeros where the rule gives none).
    arithmetic : str
        The dtype the node runs in (``"float64"``, or the working dtype where it cannot
        be promoted).
    eps : float
        That dtype's machine epsilon.
    index : int
        Its position in the forward pass (custom rules and primitives counted together,
        as in :attr:`polygrad.localize.Recording.steps`), -1 when the recorder does not
        count.
    cotangent : numpy.ndarray or None
        The cotangent its outputs received in the program's own backward pass (flattened
        like ``forward``'s output), where the recorder ran one (the NONFINITE walk); None
        otherwise.
    """

    site: Site
    inputs: tuple[np.ndarray, ...]
    forward: Callable[[Sequence[np.ndarray]], np.ndarray]
    vjp: Callable[[Sequence[np.ndarray], np.ndarray], Sequence[np.ndarray]]
    arithmetic: str = "float64"
    eps: float = float(np.finfo(np.float64).eps)
    index: int = -1
    cotangent: np.ndarray | None = None

    @property
    def size(self) -> int:
        return int(sum(x.size for x in self.inputs))


@dataclass(frozen=True)
class NodeCheck:
    """One node's rule against its own reference: the worst of its projections.

    Attributes
    ----------
    site : Site
    autodiff, reference : float
        ``uᵀ J v`` from the node's VJP and from its central differences (after
        NONFINITE: from its VJP only, and ``reference`` is NaN).
    error : float
        ``|autodiff - reference|`` (after NONFINITE: Inf where the VJP is not finite,
        else 0).
    tolerance : float
        Twice the reference's error bar plus the VJP's round-off allowance (after
        NONFINITE: 0).
    arithmetic : str
        The dtype the node was evaluated in.
    compared : str
        What the two values are.
    nonfinite : str
        For a node found by the NONFINITE walk: the input entries at which its VJP is NaN
        or Inf (with finite inputs and a finite cotangent); ``""`` otherwise.
    feeds : Site or None
        The masking op (``where``, ``select``, ``masked_fill``) that reads the node's
        output, directly or through other nodes, where the NONFINITE walk found one.
    hint : str
        What to do about it (the NONFINITE walk's fix), or ``""``.
    at_kink : bool
        The node sits at a kink of its own along a projection (a ReLU at 0): its one-sided
        differences disagree by an amount that does not shrink with the step, and its
        central difference (the mean of the two sides) is no derivative, so it is not
        judged (:func:`at_a_kink`).
    index : int
        The node's position in the forward pass (:attr:`Node.index`).
    """

    site: Site
    autodiff: float
    reference: float
    error: float
    tolerance: float
    arithmetic: str
    compared: str = "uᵀJv from its VJP against central differences of the node alone"
    nonfinite: str = ""
    feeds: Site | None = None
    hint: str = ""
    at_kink: bool = False
    index: int = -1

    @property
    def wrong(self) -> bool:
        """Its rule is wrong (error over tolerance), or its VJP is non-finite; a node at a
        kink of its own is not judged (its differences read no derivative there)."""
        if self.at_kink:
            return False
        return bool(self.error > self.tolerance) or bool(self.nonfinite)

    def to_dict(self) -> dict[str, Any]:
        """The node, its numbers and (NONFINITE walk) what it feeds, as a mapping; NaN
        and Inf stay floats (:meth:`polygrad.Report.to_dict` makes them JSON-ready)."""
        d: dict[str, Any] = {
            **self.site.to_dict(),
            "wrong": self.wrong,
            "autodiff": self.autodiff,
            "reference": self.reference,
            "error": self.error,
            "tolerance": self.tolerance,
            "relative": self.relative,
            "arithmetic": self.arithmetic,
            "compared": self.compared,
        }
        if self.at_kink:
            d["at_kink"] = True
        if self.nonfinite:
            d["nonfinite"] = self.nonfinite
            d["feeds"] = None if self.feeds is None else self.feeds.to_dict()
            d["hint"] = self.hint
        return d

    @property
    def relative(self) -> float:
        """``error / |reference|`` (inf where the reference is 0 and the error not)."""
        if self.reference == 0.0:
            return 0.0 if self.error == 0.0 else float("inf")
        return self.error / abs(self.reference)


def with_cotangents(nodes: Sequence[Node], cts: dict[int, np.ndarray] | None) -> tuple[Node, ...]:
    """``nodes`` given the cotangents their outputs received in the program's backward pass
    (``cts``: by position), those it did not reach left out; ``cts`` None: as they are."""
    if cts is None:
        return tuple(nodes)
    return tuple(dataclasses.replace(n, cotangent=cts[n.index]) for n in nodes if n.index in cts)


def _difference(node: Node, v: list[np.ndarray], u: np.ndarray, h: float,
                sensitivity: float) -> tuple[float, float]:  # fmt: skip
    """Central difference of ``uᵀ f(x + t v)`` at ``t = 0`` with step ``h``; its round-off:
    that of the two outputs, and that of rounding the moved inputs ``x ± h v`` and of the
    arithmetic on them (``sensitivity``: ``Σ |∂(uᵀf)/∂x_i| |x_i|``, twice), each divided
    by ``2 h``. The second is what a sum whose terms cancel has: its output is small, its
    round-off is not."""
    plus = node.forward([x + h * d for x, d in zip(node.inputs, v, strict=True)])
    minus = node.forward([x - h * d for x, d in zip(node.inputs, v, strict=True)])
    outputs = float(np.abs(u).dot(np.abs(plus) + np.abs(minus)))
    roundoff = node.eps * (outputs + 2 * sensitivity) / (2 * h)
    return float(u.dot(plus - minus)) / (2 * h), roundoff


def _reference(node: Node, v: list[np.ndarray], u: np.ndarray,
               sensitivity: float = 0.0) -> tuple[float, float]:  # fmt: skip
    """``uᵀ J v`` by central differences at ``h, h/2, h/4`` and Richardson extrapolation;
    the error bar is the last extrapolation's change plus the round-off of the smallest step
    (``sensitivity``: as in :func:`_difference`)."""
    size = _size(node.inputs)
    h = 2.0**-10 * size if node.eps < 1e-10 else 2.0**-5 * size
    d = [_difference(node, v, u, h / 2**k, sensitivity) for k in range(3)]
    r1 = (4 * d[1][0] - d[0][0]) / 3
    r2 = (4 * d[2][0] - d[1][0]) / 3
    best = (16 * r2 - r1) / 15
    return best, abs(best - r2) + d[2][1]


def _size(inputs: Sequence[np.ndarray]) -> float:
    """The largest magnitude among ``inputs``, at least 1: what the step is relative to."""
    return max(1.0, max((float(np.max(np.abs(x))) for x in inputs if x.size), default=1.0))


def check_node(node: Node, rng: np.random.Generator) -> NodeCheck:
    """The node's VJP against central differences of its forward, along
    :data:`PROJECTIONS` random pairs ``(u, v)``; the worst pair (largest error over
    tolerance) is returned. Each input's part of ``v`` is scaled to that input's own size
    (a count of 5 beside sums of squares near 7,000 is moved by its own share)."""
    y = node.forward(list(node.inputs))
    size = _size(node.inputs)
    worst: NodeCheck | None = None
    for _ in range(PROJECTIONS):
        v = [rng.standard_normal(x.shape) * (_size((x,)) / size) for x in node.inputs]
        u = rng.standard_normal(y.shape)
        grads = node.vjp(list(node.inputs), u)
        gs = [np.asarray(g, dtype=np.float64) for g in grads]
        terms = [g * d for g, d in zip(gs, v, strict=True)]
        ad = float(sum(np.sum(t) for t in terms))
        scale = float(sum(np.sum(np.abs(t)) for t in terms))
        # the rule's own |∂(uᵀf)/∂x| sizes the differences' input round-off: a wrong rule
        # widens its tolerance by eps / h of its own size only, far below the errors sought
        sensitivity = _sensitivity(gs, node.inputs)
        ref, err = _reference(node, v, u, sensitivity)
        tol = 2 * err + C_ROUNDOFF * node.eps * (scale + abs(ref))
        if at_a_kink(node, v, u, y, sensitivity):
            return NodeCheck(node.site, ad, ref, abs(ad - ref), tol, node.arithmetic,
                             compared=KINK_COMPARED, at_kink=True, index=node.index)  # fmt: skip
        one = NodeCheck(node.site, ad, ref, abs(ad - ref), tol, node.arithmetic, index=node.index)
        if worst is None or _ratio(one) > _ratio(worst):
            worst = one
    assert worst is not None
    return worst


def projected_error(node: Node, u: np.ndarray, v: Sequence[np.ndarray]) -> float:
    """``uᵀ (J_rule - J) v`` of the node alone: its VJP of ``u`` dotted with ``v``, minus
    :func:`_reference`'s differences of ``uᵀ f`` along ``v`` (scaled to a largest entry of
    1, so that the step is relative to the inputs' size)."""
    grads = node.vjp(list(node.inputs), u)
    ad = float(sum(np.sum(np.asarray(g, dtype=np.float64) * d)
                   for g, d in zip(grads, v, strict=True)))  # fmt: skip
    scale = max((float(np.max(np.abs(d))) for d in v if d.size), default=0.0)
    if scale == 0.0:
        return ad
    ref, _ = _reference(node, [d / scale for d in v], u)
    return ad - ref * scale


KINK_COMPARED = "at a kink of its own: one-sided differences disagree, not judged"
KINK_PERSISTS = 0.75
""":func:`at_a_kink`: the gap between one-sided differences keeps at least this share of
itself when the step halves (a smooth node's halves)."""


def at_a_kink(node: Node, v: list[np.ndarray], u: np.ndarray, y: np.ndarray,
              sensitivity: float) -> bool:  # fmt: skip
    """Whether the node sits at a kink along ``v``: the gap between the right and left
    differences of ``uᵀf`` at the smallest step of :func:`_reference` and at half of it
    is far beyond their round-off, and does not halve with the step (a smooth node's
    gap is about ``h |uᵀf''|`` and does)."""
    h = (2.0**-10 if node.eps < 1e-10 else 2.0**-5) * _size(node.inputs) / 4
    y0 = float(u.dot(y))
    gaps, noise = [], 0.0
    for step in (h, h / 2):
        plus, minus = _projected(node, v, u, step), _projected(node, v, u, -step)
        gaps.append(abs((plus - y0) - (y0 - minus)) / step)
        noise = node.eps * (abs(plus) + abs(minus) + 2 * abs(y0) + 2 * sensitivity) / step
    return bool(gaps[1] > C_ROUNDOFF * noise and gaps[1] >= KINK_PERSISTS * gaps[0])


def _projected(node: Node, v: list[np.ndarray], u: np.ndarray, t: float) -> float:
    """``uᵀ f(x + t v)`` of the node alone."""
    return float(u.dot(node.forward([x + t * d for x, d in zip(node.inputs, v, strict=True)])))


def _sensitivity(grads: Sequence[np.ndarray], inputs: Sequence[np.ndarray]) -> float:
    """``Σ |g_i| |x_i|`` over the finite products: the size of the round-off that rounding
    the inputs makes in ``uᵀf`` (``g``: the rule's ``∂(uᵀf)/∂x``)."""
    with np.errstate(all="ignore"):
        prods = [np.abs(g).ravel() * np.abs(x).ravel() for g, x in zip(grads, inputs, strict=True)]
    return float(sum(np.sum(p[np.isfinite(p)]) for p in prods))


def _ratio(c: NodeCheck) -> float:
    if not np.isfinite(c.error):
        return float("inf")
    return c.error / c.tolerance if c.tolerance > 0 else (float("inf") if c.error else 0.0)


@dataclass(frozen=True)
class Walk:
    """The nodes checked, in order, and what was left out (budget, sizes, failures)."""

    checked: tuple[NodeCheck, ...]
    notes: tuple[str, ...]
    cut_short: bool = False
    stopped: int = -1
    """The position in the nodes given of the wrong node the walk stopped at (-1: none)."""


def check_nodes(
    nodes: Sequence[Node],
    budget: float,
    max_size: int,
    seed: int = 0,
    judge: Callable[[Node, np.random.Generator], NodeCheck | None] = check_node,
    at_least: int = 0,
) -> Walk:
    """Check ``nodes`` in order with ``judge`` until one is wrong, ``budget`` seconds
    have passed (after the first ``at_least`` nodes), or all are checked; a node with more
    than ``max_size`` input entries is skipped, and so is one whose evaluation raises (both
    noted), or for which ``judge`` gives None (it has nothing to judge there)."""
    rng = np.random.default_rng(seed)
    start, done, notes, skipped, cut, stopped = time.perf_counter(), [], [], 0, False, -1
    for i, node in enumerate(nodes):
        if i >= at_least and time.perf_counter() - start > budget:
            notes.append(f"cut short: the walk's budget ran out after {i} of {len(nodes)} "
                         f"{node.site.kind} nodes")  # fmt: skip
            cut = True
            break
        if node.size > max_size:
            skipped += 1
            continue
        try:
            with np.errstate(all="ignore"):  # a node's inputs may hold inf (a mask's -inf)
                one = judge(node, rng)
        except Exception as exc:  # noqa: BLE001 - this node cannot be run alone: say so
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            notes.append(f"{node.site.where()} not checked: {type(exc).__name__}: {first}")
            continue
        if one is None:
            continue
        done.append(one)
        if one.wrong:
            stopped = i
            break
    if skipped:
        notes.append(f"{skipped} node(s) with more than {max_size} input entries not checked")
    return Walk(tuple(done), tuple(notes), cut, stopped)
