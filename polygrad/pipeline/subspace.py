"""Gradients defined on the symmetric subspace: a convention detected, named and checked.

Some operators of a symmetric matrix ``X`` (a Cholesky factor, ``logdet`` through
it, an eigen-decomposition) read one triangle of their input, while the
framework's gradient is the one of the symmetric problem: the Jacobian is
symmetrized (``(G + Gᵀ)/2``), or the input is symmetrized inside the function.
Perturbing one entry ``X_ij`` alone leaves the symmetric matrices, so the
full-space Jacobian (the reference) and the gradient disagree off the
diagonal, although both give the same derivative along every symmetric
direction. Like the complex-gradient convention (:mod:`polygrad.complex`),
this is a convention to check in its own terms, not a bug.

The mechanism
-------------
After the verdict rule, when some entries fail (MISMATCH or UNSTABLE) and
every failing input entry belongs to a square-matrix argument (last two axes
equal, ``n >= 2``) whose value is symmetric to working precision (in a
projections check: when some argument is such a matrix), the check is run
again on the symmetric subspace of those arguments: along the directions
``E_ii`` and ``E_ij + E_ji`` (``i < j``), each scaled like the entry (in a
projections check: the random directions made symmetric in those arguments), the
reference's directional derivative (the reference stage, with these
directions) is compared with autodiff's ``G_ii`` and ``G_ij + G_ji`` (VJPs of
every output, or JVPs along the same directions), per output, by the same
verdict rule and tolerances; the other arguments keep their coordinate
directions. The result replaces the full-space one when the convention
explains the failures: the subspace check passes, or its worst entry is far
closer (``policy.subspace_explains``) than the full-space worst (a rule that
is also wrong on the subspace, by less than the convention's difference, is
then MISMATCH on the subspace). ``details["convention"]`` is then
``"symmetric-subspace"``, ``details["subspace"]`` names the arguments and what
was measured, and the first note says which space was checked.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..backends.base import Leaf, Target
from ..details import Escalation
from ..report import SEVERITY, Entries, Verdict
from .assess import Assessment
from .autodiff import Setting, function_scale, jacobian_scale
from .judge import JudgeInput, concat_entries, judge
from .plan import Plan
from .prepare import Options, Prepared
from .reference import Reference, compute_reference, escalate, name_deciders
from .symmetric import argument_of, declared_leaves, matrix_leaves

__all__ = [
    "SYMMETRIC_SUBSPACE",
    "Rechecked",
    "Subspace",
    "declared_leaves",
    "recheck_on_subspace",
]

SYMMETRIC_SUBSPACE = "symmetric-subspace"
"""``details["convention"]`` of a check judged on the symmetric subspace."""

_FAIL = (SEVERITY[Verdict.MISMATCH], SEVERITY[Verdict.UNSTABLE])


@dataclass(frozen=True)
class Subspace:
    """The directions a check is run along on the symmetric subspace.

    Attributes
    ----------
    leaves : tuple of Leaf
        The symmetric square-matrix arguments checked on their subspace.
    W : ndarray, shape (k, n)
        Directions: ``s·E_ii`` and ``s·(E_ij + E_ji)`` (``i < j``) for those
        leaves, ``s_j·e_j`` for every other input entry; or random projection
        directions symmetric in those leaves.
    scales : ndarray, shape (k,)
        The power of two ``s`` of each direction (entries are divided by it; 1
        for projections).
    names : list of str
        Each direction's name: ``x[0, 0]``, ``x[0, 1] + x[1, 0]``... (``Jw[k]``
        for projections).
    """

    leaves: tuple[Leaf, ...]
    W: np.ndarray
    scales: np.ndarray
    names: list[str]


@dataclass(frozen=True)
class Rechecked:
    """A check run again on the symmetric subspace, ready for the report.

    Attributes
    ----------
    plan : Plan
        The plan with the subspace directions (``full`` False, ``W`` set).
    ref : Reference
        The reference along them.
    judged : Assessment
        The judged entries; ``details`` holds ``convention``, ``subspace`` and
        ``quantity``, and the note on the space checked.
    """

    plan: Plan
    ref: Reference
    judged: Assessment


def _failing_inputs(entries: Entries, n: int, m: int, full: bool) -> np.ndarray | None:
    """Flat input indices of failing entries (None in a projections check)."""
    failing = np.isin(entries.status, _FAIL)
    if not full:
        return None
    return np.unique(np.flatnonzero(failing) % (n * m) // m)


def _chosen_leaves(target: Target, entries: Entries, full: bool) -> list[Leaf]:
    """The symmetric matrix arguments whose subspace would explain the failures, or []."""
    if not np.any(np.isin(entries.status, _FAIL)):
        return []
    leaves = matrix_leaves(target)
    rows = _failing_inputs(entries, target.n, target.m, full)
    if rows is None:
        return leaves
    held = [lf for lf in leaves if np.any((rows >= lf.offset) & (rows < lf.offset + lf.size))]
    covered = sum(int(np.sum((rows >= lf.offset) & (rows < lf.offset + lf.size))) for lf in held)
    return held if covered == rows.size else []


def _leaf_directions(
    leaf: Leaf, s: np.ndarray, n_all: int
) -> tuple[list[np.ndarray], list[float], list[str]]:
    """The subspace directions of one leaf: ``E_ii`` and ``E_ij + E_ji``, per matrix of a batch."""
    k = leaf.shape[-1]
    index = np.arange(leaf.size).reshape(leaf.shape) + leaf.offset
    rows, scales, names = [], [], []
    for batch in np.ndindex(*leaf.shape[:-2]):
        block = index[batch]
        pre = "".join(f"{b}, " for b in batch)
        for i in range(k):
            for j in range(i, k):
                a, b = int(block[i, j]), int(block[j, i])
                sc = float(max(s[a], s[b]))
                w = np.zeros(n_all)
                w[a] = w[b] = sc
                rows.append(w)
                scales.append(sc)
                one = f"{leaf.name}[{pre}{i}, {j}]"
                names.append(one if i == j else f"{one} + {leaf.name}[{pre}{j}, {i}]")
    return rows, scales, names


def subspace_directions(target: Target, s: np.ndarray, leaves: list[Leaf]) -> Subspace:
    """The directions of a check on the symmetric subspace of ``leaves`` (see :class:`Subspace`)."""
    n = target.n
    inside = np.zeros(n, dtype=bool)
    rows: list[np.ndarray] = []
    scales: list[float] = []
    names: list[str] = []
    for leaf in leaves:
        inside[leaf.offset : leaf.offset + leaf.size] = True
        r, sc, nm = _leaf_directions(leaf, s, n)
        rows, scales, names = rows + r, scales + sc, names + nm
    for j in np.flatnonzero(~inside):
        w = np.zeros(n)
        w[j] = s[j]
        rows.append(w)
        scales.append(float(s[j]))
        names.append(target.input_layout.name_of(int(j)))
    return Subspace(tuple(leaves), np.array(rows), np.array(scales), names)


def symmetric_projections(target: Target, W: np.ndarray, leaves: list[Leaf]) -> Subspace:
    """The projection directions ``W`` (``(k, n)``) made symmetric in ``leaves``.

    Each entry below the diagonal takes its mirror image's value (a power of two
    times ±1), so autodiff along a row is ``Σ G_ii w_ii + Σ_{i<j} (G_ij + G_ji) w_ij``:
    the gradient's action on the symmetric subspace, for the cost of a projections check.
    """
    V = np.array(W, dtype=np.float64, copy=True)
    for leaf in leaves:
        up, low = _pairs(leaf)
        V[:, low] = V[:, up]
    names = [f"Jw[{k}]" for k in range(V.shape[0])]
    return Subspace(tuple(leaves), V, np.ones(V.shape[0]), names)


def _autodiff(target: Target, W: np.ndarray, md: str, wide: bool) -> np.ndarray | None:
    """Autodiff along the rows of ``W`` (``(k, n)``), per output: ``(k, m)``."""
    if md == "rev":
        fn = target.vjp64 if wide else target.vjp
        if fn is None:
            return None
        A = np.asarray(fn(np.eye(target.m)), dtype=np.float64)  # (m, n): one row per output
        return np.asarray(W @ A.T)  # powers of two times G_ij, two terms: rounded once
    fn = target.jvp64 if wide else target.jvp
    return None if fn is None else np.asarray(fn(W), dtype=np.float64)


def _gather(target: Target, st: Setting, sub: Subspace, md: str, opts: Options) -> JudgeInput:
    """One mode's entries along the subspace directions, per output, in input units."""
    ad = _autodiff(target, sub.W, md, wide=False)
    assert ad is not None
    ad64 = _autodiff(target, sub.W, md, wide=True)
    sc = sub.scales[:, None]
    dd = st.dd
    with np.errstate(over="ignore"):
        q = {
            "ref": dd.central.value / sc, "ref_err": dd.central.error / sc,
            "right": dd.right.value / sc, "right_err": dd.right.error / sc,
            "left": dd.left.value / sc, "left_err": dd.left.error / sc,
        }  # fmt: skip
        fscale = function_scale(target.y0)[None, :] / sc
        ad, ad64 = ad / sc, (ad64 / sc if ad64 is not None else None)
    scale = jacobian_scale(q["ref"], q["ref_err"])
    scale = np.where(scale > 0, scale, jacobian_scale(ad64 if ad64 is not None else ad))
    m = target.m
    out = target.output_layout.names()
    names = [(f"{out[i]} / " if m > 1 else "") + nm for nm in sub.names for i in range(m)]
    flat = {k: np.ravel(v) for k, v in q.items() if k != "right_err"}
    return JudgeInput(
        names=names, ad=np.ravel(ad),
        ad64=np.ravel(ad64) if ad64 is not None else np.full(ad.size, np.nan),
        have64=ad64 is not None, right_err=np.ravel(q["right_err"]),
        jumps=np.ravel(dd.jump_left | dd.jump_right), scale=np.ravel(scale),
        fscale=np.where(np.isfinite(np.ravel(fscale)), np.ravel(fscale), 0.0),
        eps_w=target.eps, ref_eps=st.ref_eps, vouched=st.vouched,
        allowance_w=None, allowance_64=None, policy=opts.policy, expected=opts.expected, **flat,
    )  # fmt: skip


def _judge_subspace(
    prep: Prepared, st: Setting, sub: Subspace, method: str, opts: Options
) -> tuple[list[Entries], Setting, dict[str, Any]]:
    """Judged blocks (one per mode) on the subspace, entries in doubt re-examined by mp."""
    details: dict[str, Any] = {"notes": []}
    blocks = [judge(_gather(prep.target, st, sub, md, opts)) for md in prep.modes]
    if opts.reference == "auto" and method != "mp":
        W = sub.W
        merged = escalate(prep.target, st.dd, blocks, (W.shape[0], lambda i: W[i]), opts, details)
        if merged is not None:
            st = replace(st, dd=merged)
            blocks = [judge(_gather(prep.target, st, sub, md, opts)) for md in prep.modes]
            name_deciders(blocks, details, method, prep.modes)
    return blocks, st, details


def _worst(entries: Entries) -> float:
    """The largest ``|autodiff - reference| / tolerance`` over the failing entries (0 if none)."""
    failing = np.isin(entries.status, _FAIL)
    if not failing.any():
        return 0.0
    with np.errstate(all="ignore"):
        b = entries.difference[failing] / entries.tolerance[failing]
    return float(np.max(np.where(np.isfinite(b), b, np.inf)))


def _full_block(entries: Entries, n: int, m: int) -> dict[str, np.ndarray]:
    """The first mode's full-space entries as ``(n, m)`` arrays (rows are inputs)."""
    k = n * m
    return {
        "G": entries.autodiff[:k].reshape(n, m),
        "R": entries.reference[:k].reshape(n, m),
        "E": entries.reference_error[:k].reshape(n, m),
        "T": entries.tolerance[:k].reshape(n, m),
    }


def _pairs(leaf: Leaf) -> tuple[np.ndarray, np.ndarray]:
    """Flat indices of the entries above the diagonal and of their mirror images."""
    k = leaf.shape[-1]
    index = np.arange(leaf.size).reshape(leaf.shape) + leaf.offset
    i, j = np.triu_indices(k, 1)
    return np.ravel(index[..., i, j]), np.ravel(index[..., j, i])


def _measured(leaf: Leaf, block: dict[str, np.ndarray]) -> dict[str, Any]:
    """What the full-space check measured about ``leaf``: which triangles ``f`` reads, and
    whether the gradient is symmetric."""
    up, low = _pairs(leaf)
    R, E, G, T = block["R"], block["E"], block["G"], block["T"]
    with np.errstate(invalid="ignore"):
        reads_upper = bool(np.any(np.abs(R[up]) > 2 * E[up]))
        reads_lower = bool(np.any(np.abs(R[low]) > 2 * E[low]))
        symmetric = bool(np.all(np.abs(G[up] - G[low]) <= T[up] + T[low]))
    return {"reads_upper": reads_upper, "reads_lower": reads_lower,
            "gradient_symmetric": symmetric}  # fmt: skip


def _reads_text(name: str, info: dict[str, Any]) -> str:
    if info["reads_upper"] and info["reads_lower"]:
        return f"f depends on both triangles of {name}"
    side, other = ("lower", "above") if info["reads_lower"] else ("upper", "below")
    return (
        f"f reads only the {side} triangle of {name} (its derivative along each entry "
        f"{other} the diagonal is 0 within the reference's error bar)"
    )


def _leaf_text(leaf: Leaf, info: dict[str, Any] | None) -> str:
    name = leaf.name
    if info is None:
        return (
            f"the gradient of {name} is checked along symmetric directions only (the check ran "
            "in projections: which triangles f reads was not measured)"
        )
    grad = (
        f"the gradient of {name} assumes a symmetric input (its Jacobian is symmetrized)"
        if info["gradient_symmetric"]
        else f"the gradient of {name} differs from the full-space Jacobian off the diagonal"
    )
    return f"{grad}; {_reads_text(name, info)}"


def _note(
    sub: Subspace, infos: list[dict[str, Any] | None], passed: bool, full: bool, why: dict[str, str]
) -> str:
    names = ", ".join(leaf.name for leaf in sub.leaves)
    parts = "; ".join(_leaf_text(lf, i) for lf, i in zip(sub.leaves, infos, strict=True))
    verdict = (
        "right on the subspace, so the full-space differences are the convention, not an error"
        if passed
        else "wrong on the subspace as well: an error in the gradient, not only the convention"
    )
    how = (
        "directions E_ii and E_ij + E_ji, compared with G_ii and G_ij + G_ji"
        if full
        else f"{sub.W.shape[0]} random directions symmetric in {names}"
    )
    return (
        f"checked on the symmetric subspace of {names} ({how}), because "
        f"{'; '.join(why[lf.name] for lf in sub.leaves)}: {parts}; {verdict}"
    )


def _preconditions(prep: Prepared, leaves: list[Leaf], opts: Options) -> dict[str, str]:
    """Leaf name -> what makes ``f`` a function of symmetric matrices there: the argument
    is declared symmetric, or ``f`` applies an operation defined on symmetric matrices to
    a value computed from it. Leaves with neither are absent."""
    declared = declared_leaves(prep, opts)
    out = {lf.name: f"{lf.name} is declared symmetric (symmetric={declared[lf.name]})"
           for lf in leaves if lf.name in declared}  # fmt: skip
    if len(out) < len(leaves):
        ops = prep.target.symmetric_input_operations() or {}
        for lf in leaves:
            if lf.name not in out and lf.name in ops:
                out[lf.name] = (
                    f"f applies {', '.join(ops[lf.name])} to a value computed from {lf.name} "
                    "(an operation defined on symmetric matrices, which reads one triangle)"
                )
    return out


def _unexcused_note(prep: Prepared, leaves: list[Leaf], why: dict[str, str], passed: bool) -> str:
    """Why a full-space MISMATCH on symmetric matrices stands, and how to declare them."""
    missing = [lf for lf in leaves if lf.name not in why]
    names = ", ".join(lf.name for lf in missing)
    captured = prep.target.symmetric_input_operations() is not None
    unknown = (
        f"no operation of f defined on symmetric matrices (Cholesky, eigh...) reads {names}"
        if captured
        else "f's program could not be captured, so no operation of f defined on symmetric "
        "matrices is known"
    )
    found = (
        f"autodiff agrees with the reference along every symmetric direction of {names} "
        "(the rule is right for symmetric inputs only)"
        if passed
        else f"checked on the symmetric subspace of {names}, the gradient is wrong on the "
        "subspace as well"
    )
    where = sorted({i for i in (argument_of(prep, lf) for lf in missing) if i is not None})
    decl = ", ".join(map(str, where)) if len(where) != 1 else str(where[0])
    return (
        f"{found}; {unknown} and {names} is not declared symmetric, so the full-space "
        f"differences stand. If f is meant for symmetric {names} only, declare it: "
        f"symmetric={decl if len(where) == 1 else '(' + decl + ')'}"
    )


def _explains(on_sub: Entries, full: Entries, opts: Options) -> bool:
    """The convention explains the full-space failures: the subspace passes, or is far closer."""
    worst = _worst(on_sub)
    return worst == 0.0 or worst <= opts.policy.subspace_explains * _worst(full)


def _on_subspace(
    prep: Prepared, plan: Plan, leaves: list[Leaf], opts: Options, ref_prep: Prepared | None
) -> tuple[Plan, Reference, Subspace, Entries, Setting, dict[str, Any]]:
    """The check run again along the symmetric directions of ``leaves``."""
    target = prep.target
    if plan.full:
        sub = subspace_directions(target, plan.s, leaves)
    else:
        assert plan.W is not None
        sub = symmetric_projections(target, np.asarray(plan.W), leaves)
    plan2 = replace(plan, full=False, W=sub.W, cached=None, cache_slot=None)
    source = prep if ref_prep is None else ref_prep  # compare(): the reference's implementation
    ref2 = compute_reference(source.target, plan2, opts, source)
    st = Setting(ref2.dd, False, plan.s, sub.W, plan.rng_state, plan.ref_eps, ref2.vouched,
                 plan.f0)  # fmt: skip
    blocks, st, details = _judge_subspace(prep, st, sub, ref2.method, opts)
    return plan2, ref2, sub, concat_entries(blocks, prep.modes), st, details


def recheck_on_subspace(
    prep: Prepared, plan: Plan, ref: Reference, judged: Assessment, opts: Options,
    ref_prep: Prepared | None = None,
) -> Rechecked | None:  # fmt: skip
    """The check on the symmetric subspace, where that convention applies and explains its
    failures.

    The convention applies to a symmetric square-matrix argument only on a precondition:
    the argument is declared symmetric (``opts.symmetric``), or ``f`` applies an
    operation defined on symmetric matrices to a value computed from it
    (:meth:`~polygrad.backends.base.Target.symmetric_input_operations`). Without one, the
    subspace check runs for the report only: its note says whether the rule is right
    along symmetric directions and how to declare the convention.

    Parameters
    ----------
    prep, plan, ref : Prepared, Plan, Reference
        The check as run on the full space.
    judged : Assessment
        Its judged entries.
    opts : Options
        The options (tolerances in ``opts.policy``, declared arguments in
        ``opts.symmetric``).
    ref_prep : Prepared, optional
        The implementation the reference comes from (default ``prep``), as in
        :func:`polygrad.compare`.

    Returns
    -------
    Rechecked or None
        None when no failing entry lies in a symmetric square-matrix argument;
        the full-space check with a note when the convention has no precondition
        or does not explain the failures; otherwise the subspace check, whose
        verdict is the check's (``details["subspace"]["precondition"]`` says why).
    """
    leaves = _chosen_leaves(prep.target, judged.entries, plan.full)
    if not leaves:
        return None
    why = _preconditions(prep, leaves, opts)
    plan2, ref2, sub, entries, st, details = _on_subspace(prep, plan, leaves, opts, ref_prep)
    passed = not np.any(np.isin(entries.status, _FAIL))
    if len(why) < len(leaves):  # not a function of symmetric matrices: the full space stands
        note = _unexcused_note(prep, leaves, why, passed)
        return Rechecked(plan, ref, replace(judged, notes=(*judged.notes, note)))
    n, m = prep.target.n, prep.target.m
    block = _full_block(judged.entries, n, m) if plan.full else None
    infos = [None if block is None else _measured(lf, block) for lf in leaves]
    note = _note(sub, infos, passed, plan.full, why)
    if not _explains(entries, judged.entries, opts):
        return Rechecked(plan, ref, replace(judged, notes=(*judged.notes, note)))
    esc = details.get("escalation")
    return Rechecked(plan2, ref2, Assessment(
        entries, st, (note, *details["notes"]),
        None if esc is None else Escalation.from_dict(esc),
        convention=SYMMETRIC_SUBSPACE,
        subspace={"arguments": [lf.name for lf in leaves],
                  "directions": sub.names if plan.full else sub.W,
                  "measured": {lf.name: i for lf, i in zip(leaves, infos, strict=True)},
                  "precondition": {lf.name: why[lf.name] for lf in leaves}},
        quantity="derivatives along symmetric directions (per output)",
    ))  # fmt: skip


def symmetric_direction(target: Target, names: list[str], seed: int) -> np.ndarray:
    """A random direction ``(n,)`` that is symmetric in the leaves called ``names``.

    Signs ±1 times the power of two nearest each ``|x_j|``, each entry below the
    diagonal of those leaves a copy of its mirror image: the direction of the
    supporting Taylor test of a check run on the symmetric subspace.
    """
    from ..reference.steps import pow2_scales

    rng = np.random.default_rng(seed)
    v = rng.choice(np.array([-1.0, 1.0]), size=target.n) * pow2_scales(target.x0)
    for leaf in target.input_layout.leaves:
        if leaf.name in names:
            up, low = _pairs(leaf)
            v[low] = v[up]
    return np.asarray(v)
