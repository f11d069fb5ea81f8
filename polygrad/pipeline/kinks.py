"""Kinks that no coordinate direction sees: a full check's MISMATCH tested for differentiability.

At ``x = (1, 1)``, ``clip(max(x1, x2), -2, 1)`` is flat along each axis (moving one
entry of a tie up leaves the max clipped, moving it down leaves the other entry
as the max), so both partial derivatives exist and are 0; along the diagonal it
falls with slope 1 on one side and is flat on the other. ``f`` is not
differentiable there, and autodiff returns an element of its generalized
(Clarke) derivative, ``(0.25, 0.25)`` say, which is no gradient error although
it differs from the partials.

The mechanism
-------------
After the verdict rule of a full check, for each output whose entries include
a MISMATCH, the reference is computed along one more direction: the sum of the
scaled coordinate directions of those entries, each signed like autodiff minus
the reference (the direction along which the two disagree); where other inputs
hold exactly the same value as one of them (a tie), also along that direction
plus and minus the tied inputs' directions. A differentiable
``f`` has equal left and right derivatives along it; where they differ beyond
their error bars, ``f`` has a kink at ``x`` that the coordinate directions
hide. Where autodiff's own derivative along that direction lies between the
two one-sided derivatives (as a conservative gradient's does), those MISMATCH
entries are NONSMOOTH (not within their one-sided derivatives, which are the
partials), with a note that gives the directional one-sided derivatives. A
wrong rule at a smooth point finds no kink, and one that the direction merely
crosses a kink near, without autodiff between its sides, stays MISMATCH.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..report import SEVERITY, Entries, Verdict
from .assess import Assessment, judge_modes
from .autodiff import kinks_at_the_point
from .judge import split_entries
from .plan import Plan
from .prepare import Options, Prepared
from .reference import compute_reference

__all__ = ["along_w", "disagreement_directions", "hidden_kinks", "kinks_of_intermediates"]

_MISMATCH = SEVERITY[Verdict.MISMATCH]


def disagreement_directions(
    entries: Entries, x0: np.ndarray, s: np.ndarray, m: int
) -> tuple[np.ndarray, list[int], list[np.ndarray]]:
    """Per output with MISMATCH entries, the directions along which a hidden kink may lie.

    Parameters
    ----------
    entries : Entries
        A full check's entries: one block of ``n * m`` per mode, entry ``j * m + i``
        of a block is input ``j``, output ``i``.
    x0 : ndarray, shape (n,)
        The point.
    s : ndarray, shape (n,)
        The scales of the coordinate directions.
    m : int
        Number of outputs.

    Returns
    -------
    W : ndarray, shape (k, n)
        For each output concerned, ``w = sum_j sign(autodiff - reference) s_j e_j`` over
        its MISMATCH inputs, and where other inputs are tied with them (equal values:
        a max, min, sort or clip of ties has kinks that no axis shows) ``w`` plus and
        minus the tied inputs' ``s_j e_j``.
    outputs : list of int
        The output of each row.
    members : list of ndarray of int
        The flat entry indices (all modes) each row stands for.
    """
    n = s.size
    per = n * m
    bad = entries.status == _MISMATCH
    sign = np.sign(entries.autodiff - entries.reference)
    rows, outputs, members = [], [], []
    for i in _worst_outputs(entries, n, m):
        hit = [b * per + j * m + i for b in range(bad.size // per) for j in range(n)]
        hit = [k for k in hit if bad[k]]
        if not hit:
            continue
        w = np.zeros(n)
        for k in hit:
            j = (k % per) // m
            w[j] = (sign[k] if sign[k] != 0 else 1.0) * s[j]
        tied = np.isin(x0, x0[w != 0]) & (w == 0)
        # a single coordinate direction was measured already: only ties add one
        first = [0.0] if np.count_nonzero(w) > 1 else []
        for extra in first + ([1.0, -1.0] if np.any(tied) else []):
            rows.append(np.where(tied, extra * s, w))
            outputs.append(i)
            members.append(np.asarray(hit))
    return np.asarray(rows).reshape(len(rows), n), outputs, members


MOST_OUTPUTS = 32
"""Outputs examined for a hidden kink, worst MISMATCH first: a wrong rule in every entry
of a large Jacobian must not double the cost of its check (the rest stay MISMATCH)."""


def _worst_outputs(entries: Entries, n: int, m: int) -> list[int]:
    """Up to :data:`MOST_OUTPUTS` outputs with a MISMATCH entry, worst first."""
    bad = (entries.status == _MISMATCH).reshape(-1, n, m)
    worst = np.where(bad, entries.badness.reshape(-1, n, m), -np.inf).max(axis=(0, 1))
    order = [int(i) for i in np.argsort(-worst, kind="stable") if np.isfinite(worst[i])]
    return order[:MOST_OUTPUTS]


def _kink(left: float, le: float, right: float, re: float, opts: Options, eps: float) -> bool:
    """Left and right derivatives that differ beyond their error bars and round-off."""
    p = opts.policy
    if not all(np.isfinite([left, le, right, re])):
        return False
    slack = p.c_ad * eps * (abs(left) + abs(right))
    return abs(left - right) > p.tolerance_factor * (le + re) + slack


def along_w(e: Entries, w: np.ndarray, i: int, m: int) -> np.ndarray:
    """Autodiff's derivative of output ``i`` along ``w``, ``sum_j w_j J_ij``, per mode block."""
    n = w.size
    blocks = e.autodiff.reshape(-1, n, m)[:, :, i]  # (modes, n)
    nz = w != 0
    return np.asarray(blocks[:, nz] @ w[nz])


def _between(
    a: np.ndarray, left: float, le: float, right: float, re: float, opts: Options, eps: float
) -> bool:
    """Every value of ``a`` between the one-sided derivatives (within their error bars).

    A conservative gradient at a kink gives a directional derivative between them; a
    wrong rule near a kink that the direction happens to cross need not.
    """
    k = opts.policy.tolerance_factor
    lo, hi = min(left, right) - k * (le + re), max(left, right) + k * (le + re)
    slack = opts.policy.c_ad * eps * (abs(left) + abs(right))
    return bool(np.all((a >= lo - slack) & (a <= hi + slack)))


def hidden_kinks(
    prep: Prepared, plan: Plan, judged: Assessment, opts: Options,
    ref_prep: Prepared | None = None,
) -> Assessment | None:  # fmt: skip
    """``judged`` with the MISMATCH entries at a kink hidden from the axes made NONSMOOTH.

    ``prep`` is the implementation judged; the reference along the new directions
    comes from ``ref_prep`` (default ``prep``), as in :func:`polygrad.compare`.
    None when the check is not full, has no MISMATCH, or no kink is found.
    """
    e = judged.entries
    target = prep.target
    source = prep if ref_prep is None else ref_prep
    if not plan.full or not np.any(e.status == _MISMATCH) or e.status.size % target.n:
        return None
    W, outputs, members = disagreement_directions(e, target.x0, plan.s, target.m)
    if W.shape[0] == 0:
        return None
    # where mp decided the entries in doubt, it also decides along the new directions
    method = "mp" if judged.escalation is not None else plan.method
    plan2 = replace(plan, full=False, W=W, cached=None, cache_slot=None, method=method)
    dd = compute_reference(source.target, plan2, opts, source).dd
    status, within = e.status.copy(), e.within_one_sided.copy()
    found = []
    for r, (i, hit) in enumerate(zip(outputs, members, strict=True)):
        if np.all(status[hit] == SEVERITY[Verdict.NONSMOOTH]):
            continue  # another direction of the same output found the kink
        lv, le = dd.left.value[r, i], dd.left.error[r, i]
        rv, rerr = dd.right.value[r, i], dd.right.error[r, i]
        kink = bool(dd.jump_left[r, i] or dd.jump_right[r, i])
        kink = kink or _kink(lv, le, rv, rerr, opts, plan.ref_eps)
        if kink and _between(along_w(e, W[r], i, target.m), lv, le, rv, rerr, opts, target.eps):
            status[hit] = SEVERITY[Verdict.NONSMOOTH]
            within[hit] = False
            found.append(_note(e, hit, lv, rv))
    if not found:
        return None
    entries = replace(e, status=status, within_one_sided=within)
    return replace(judged, entries=entries, notes=(*judged.notes, *found))


def _listed(names: list[str]) -> str:
    """The first four ``names``, and how many more."""
    return ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")


def _note(e: Entries, hit: np.ndarray, left: float, right: float) -> str:
    names = [e.names[k] for k in hit]
    shown = _listed(names)
    return (
        f"f has a kink here that no single input shows: along the direction that moves "
        f"{shown} together (each signed like autodiff minus the reference) its left "
        f"derivative is {left:.6g} and its right derivative {right:.6g}, although each "
        f"partial derivative exists; autodiff returns an element of the generalized "
        f"(Clarke) derivative there, not the partials, so these entries are NONSMOOTH"
    )


def kinks_of_intermediates(prep: Prepared, judged: Assessment, opts: Options) -> Assessment | None:
    """``judged`` with the MISMATCH entries that only the point itself shows made NONSMOOTH.

    After :func:`hidden_kinks` (a kink of ``f`` itself is named as such first): where
    an intermediate of ``f`` sits exactly at a kink at the point and the composition is
    differentiable, autodiff's value is not the derivative at the point but is a few
    ulps away (see :func:`polygrad.pipeline.autodiff.kinks_at_the_point`). None when
    nothing changes.
    """
    e = judged.entries
    if opts.wrt != "inputs" or opts.order != 1 or prep.complex_any:
        return None
    if not np.any(e.status == _MISMATCH):
        return None
    blocks = split_entries(e, len(prep.modes))
    st = judged.setting
    found = kinks_at_the_point(
        prep.backend, (*prep.batch_call, opts.batch_size), opts.seed, blocks,  # type: ignore[arg-type]
        lambda t: judge_modes(t, st, prep.modes, opts), prep.target, opts.policy,
    )  # fmt: skip
    if found is None or not any(fl.any() for fl in found):
        return None
    hit = np.concatenate(found)
    seen = prep.target.intermediates_at_a_kink()
    if seen is False:
        return replace(judged, notes=(*judged.notes, _no_kink_note(e, hit)))
    entries = replace(
        e, status=np.where(hit, SEVERITY[Verdict.NONSMOOTH], e.status),
        within_one_sided=e.within_one_sided & ~hit,
    )  # fmt: skip
    names = [e.names[i] for i in np.flatnonzero(hit)]
    shown = _listed(names)
    head = (
        f"{shown}: autodiff differs from the reference at this point, but at inputs moved "
        f"by a few ulps the same rule all but agrees with it, while f itself is "
        f"differentiable along every axis: the rule is discontinuous at this exact input. "
    )
    conservative = (
        "the framework takes one side of it and returns an element of a conservative "
        "gradient, not the derivative (Bolte & Pauwels, 2020), so these entries are NONSMOOTH"
    )
    if seen:  # f was looked into, operation by operation
        note = head + (
            "f, run on mpmath numbers at the point operation by operation, has an "
            f"operation exactly at its kink here (a tie, a ReLU or abs at 0): {conservative}"
        )
    else:
        note = head + (
            f"Where an intermediate of f sits exactly at a kink (a tie, a ReLU at 0) "
            f"{conservative}; a rule that special-cases this input (a branch on x == 0) "
            f"looks the same from outside and is a bug: if no intermediate is at a kink "
            f"here, read these entries as wrong (nonsmooth='within' fails them)"
        )
    return replace(judged, entries=entries, notes=(*judged.notes, note))


def _no_kink_note(e: Entries, hit: np.ndarray) -> str:
    """Why entries that only the point shows stay MISMATCH: no operation of f is at a kink."""
    names = [e.names[i] for i in np.flatnonzero(hit)]
    shown = _listed(names)
    return (
        f"{shown}: autodiff differs from the reference at this point but agrees with it "
        f"at inputs moved by a few ulps; f, run on mpmath numbers at the point operation "
        f"by operation, has no operation at its kink here (no tie, no ReLU or abs at 0), "
        f"so this is not a side of a kink: the rule takes another value at this exact "
        f"input (a branch on x == 0?), and is wrong here"
    )
