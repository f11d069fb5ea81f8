"""After NONFINITE: the first node whose backward makes NaN or Inf out of finite values.

A check is NONFINITE when autodiff gives NaN or Inf where the reference derivative is
finite. The program is recorded as the user ran it (in its own dtypes: a float32
overflow is an overflow), with one backward pass of it from cotangents of ones on its
outputs, which gives each node the cotangent its outputs received. Each node that the
program's outputs depend on is then evaluated alone at the inputs it saw, in the order
the forward pass ran them: its VJP (the framework's rule, on that node only) applied to
that cotangent (a random finite one where the recorder has none). The first node whose
inputs and cotangent are finite and whose VJP is not is reported, with the input
entries where it is NaN or Inf. Nodes that received a NaN or Inf cotangent are not
evaluated: their NaN comes from a node after them.

The classic cause is a masked branch, ``where(x > 0, sqrt(x), 0)``: the ``where`` picks 0
where ``x <= 0``, but autodiff still runs the backward of ``sqrt`` there, with cotangent
0 and derivative NaN (``x < 0``) or Inf (``x = 0``), and ``0 × NaN`` and ``0 × Inf`` are
NaN. The report names the masking op (``where``, ``select``, ``masked_fill``) that reads
the node's output, directly or through other nodes, and the fix, the "double where":
make the input safe first, ``where(x > 0, sqrt(where(x > 0, x, 1)), 0)``. (With the
cotangent the node really received, a rule that returns 0 for a zero cotangent, as
TensorFlow's ``Sqrt`` gradient does, is not blamed.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from ._core import Node, NodeCheck, Site, Step, Walk, check_nodes

__all__ = ["finite_check", "fix_hint", "masking_consumer", "walk_nonfinite"]

_MASKING = ("where", "select", "masked_fill")
"""Words naming a masking op, matched in the lower-cased op name."""
_SHOWN = 3
"""Input entries named in a located node's description."""


def finite_check(node: Node, rng: np.random.Generator) -> NodeCheck | None:
    """The node's VJP at its forward-pass inputs, for the cotangent it received in the
    program's backward pass (``node.cotangent``; a random one where that is unknown).

    Parameters
    ----------
    node : Node
        The node, with the inputs it saw in the forward pass.
    rng : numpy.random.Generator
        Draws the direction ``v`` of the reported ``uᵀJv`` (and ``u`` where unknown).

    Returns
    -------
    NodeCheck or None
        None where an input or the cotangent is not finite (the NaN or Inf comes from
        another node); else the check, whose ``nonfinite`` names the input entries where
        the VJP is NaN or Inf (``""``: finite everywhere). ``reference`` is NaN: nothing
        is compared.
    """
    if not all(np.all(np.isfinite(x)) for x in node.inputs):
        return None
    y = node.forward(list(node.inputs))
    known = node.cotangent is not None and node.cotangent.size == y.size
    u = np.asarray(node.cotangent).reshape(y.shape) if known else rng.standard_normal(y.shape)
    if not np.all(np.isfinite(u)):
        return None
    v = [rng.standard_normal(x.shape) for x in node.inputs]
    with np.errstate(all="ignore"):
        raw = node.vjp(list(node.inputs), u)
        grads = [np.asarray(g, np.float64).reshape(x.shape)
                 for g, x in zip(raw, node.inputs, strict=True)]  # fmt: skip
        ad = float(sum(np.sum(g * d) for g, d in zip(grads, v, strict=True)))
    bad = _entries(node.inputs, grads)
    source = "the cotangent it received in the backward pass" if known else "a random cotangent"
    what = f"uᵀJv from its VJP at its finite inputs and {source}; is it finite"
    error = float("inf") if bad else 0.0
    return NodeCheck(node.site, ad, float("nan"), error, 0.0, node.arithmetic, what, bad)


def _entries(inputs: Sequence[np.ndarray], grads: Sequence[np.ndarray]) -> str:
    """``"input[1] = -0.5: NaN; input[3] = 0: Inf"``: the first entries whose VJP is not
    finite, with their input values (``input 1[...]`` where the node has several)."""
    parts: list[str] = []
    count = 0
    for k, (x, g) in enumerate(zip(inputs, grads, strict=True)):
        bad = np.flatnonzero(~np.isfinite(g))
        count += bad.size
        for i in bad[: max(_SHOWN - len(parts), 0)]:
            idx = np.unravel_index(int(i), x.shape) if x.ndim else ()
            name = f"input {k}" if len(inputs) > 1 else "input"
            name += f"[{', '.join(str(int(j)) for j in idx)}]" if idx else ""
            gi = float(g.flat[i])
            kind = "NaN" if np.isnan(gi) else ("Inf" if gi > 0 else "-Inf")
            parts.append(f"{name} = {float(x.flat[i]):.6g}: {kind}")
    more = f" (and {count - len(parts)} more)" if count > len(parts) else ""
    return "; ".join(parts) + more


def masking_consumer(steps: Sequence[Step], index: int) -> Site | None:
    """The first masking op, in forward order, that reads the output of step ``index``
    directly or through other steps; None where there is none (or no steps)."""
    if not 0 <= index < len(steps):
        return None
    reached = {index}
    for j in range(index + 1, len(steps)):
        if any(r in reached for r in steps[j].reads):
            if any(w in steps[j].site.op.lower() for w in _MASKING):
                return steps[j].site
            reached.add(j)
    return None


def fix_hint(site: Site, feeds: Site | None) -> str:
    """The usual fix for a node whose VJP is NaN or Inf, given the masking op it feeds."""
    name = site.op.split(" (in ")[0].rsplit(".", 1)[-1].strip("_")
    if feeds is None:
        return (f"no where or select reads its output: the composed function can be "
                f"differentiable where {name} is not (sqrt(x**2), a norm at 0); give "
                "the composition a rule that is finite there (a custom rule) or rewrite "
                "it")  # fmt: skip
    low = name.lower()
    if "div" in low or low in ("reciprocal", "inv"):
        safe = "1 / where(c, x, s)"
    elif "pow" in low:
        safe = "where(c, x, s) ** p"
    else:
        safe = f"{name}(where(c, x, s))"
    return (f"the {feeds.op} discards this output where its condition is false, but "
            f"autodiff still runs this node's backward there (cotangent 0, and 0 × NaN "
            f"and 0 × Inf are NaN); apply the where to the input first, the \"double "
            f"where\": where(c, {safe}, other) with the same condition c and a safe value "
            f"s (one where {name} and its derivative are finite), e.g. "
            "where(x > 0, sqrt(where(x > 0, x, 1)), 0)")  # fmt: skip


def _live(steps: Sequence[Step], outputs: Sequence[int]) -> set[int] | None:
    """The positions of the steps the program's outputs depend on differentiably; None
    when unknown."""
    if not outputs or not steps:
        return None
    seen: set[int] = set()
    todo = list(outputs)
    while todo:
        i = todo.pop()
        if i in seen or not 0 <= i < len(steps):
            continue
        seen.add(i)
        if steps[i].floating:  # a comparison's output carries no derivative back
            todo.extend(steps[i].reads)
    return seen


def walk_nonfinite(nodes: Sequence[Node], steps: Sequence[Step], outputs: Sequence[int],
                   budget: float, max_size: int) -> Walk:  # fmt: skip
    """Evaluate the VJP of each node the outputs depend on, in forward order, until one is
    NaN or Inf at finite inputs; that one is given its masking op and fix.

    Parameters
    ----------
    nodes : sequence of Node
        Custom rules and primitives together (ordered here by ``index``).
    steps, outputs
        The program's data flow and the positions of the calls that made its outputs
        (:class:`polygrad.localize.Recording`); empty when the recorder has none.
    budget, max_size
        As in :func:`polygrad.localize.localize`.

    Returns
    -------
    Walk
        The nodes evaluated (the last one non-finite where one was found) and notes.
    """
    live = _live(steps, outputs)
    ordered = sorted(nodes, key=lambda n: n.index)
    kept = [n for n in ordered if live is None or n.index < 0 or n.index in live]
    walk = check_nodes(kept, budget, max_size, judge=finite_check)
    if not walk.checked or not walk.checked[-1].nonfinite:
        return walk
    last = walk.checked[-1]
    index = next(n.index for n in kept if n.site is last.site)
    feeds = masking_consumer(steps, index)
    last = dataclasses.replace(last, feeds=feeds, hint=fix_hint(last.site, feeds))
    return Walk((*walk.checked[:-1], last), walk.notes, walk.cut_short)
