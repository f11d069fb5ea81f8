"""Judge one implementation against a reference: autodiff, round-off allowance, escalation.

The same :func:`assess` serves :func:`polygrad.check` (the implementation is
the function the reference came from) and :func:`polygrad.compare` (every
implementation against the one reference).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .._timing import probe_seconds
from ..backends.base import Target
from ..details import Escalation, HiddenCancellation
from ..reference.mp import mp_seconds_at_least
from ..reference.steps import F64_EPS
from ..report import SEVERITY, Entries, Verdict
from .autodiff import (
    Setting,
    autodiff_roundoff,
    digits_lost,
    f64_accuracy,
    f_accuracy,
    gather,
)
from .judge import concat_entries, judge, leaning
from .prepare import Options, Prepared
from .reference import directions_in_doubt, escalate, name_deciders
from .sides import FINE_LEVELS, FINE_STEP, sharpen_sides

__all__ = ["Assessment", "assess", "judge_modes", "mismatch_along"]


@dataclass(frozen=True)
class Assessment:
    """The judged entries of one implementation.

    Attributes
    ----------
    entries : Entries
        Every mode's entries (names prefixed VJP/JVP when several).
    setting : Setting
        The reference they were judged against (after any mp escalation).
    notes : tuple of str
        What was done beyond the plain comparison (round-off allowance, mp).
    escalation : Escalation or None
        Entries in doubt re-examined with mp.
    convention : str or None
        ``"symmetric-subspace"`` when judged on that subspace (see
        :mod:`polygrad.pipeline.subspace`).
    subspace : dict or None
        The subspace's arguments, directions and what was measured of them.
    quantity : str or None
        What the entries are, where not Jacobian entries or projections.
    hidden : HiddenCancellation or None
        What ``f`` itself lost to hidden cancellation in the working dtype.
    """

    entries: Entries
    setting: Setting
    notes: tuple[str, ...]
    escalation: Escalation | None = None
    convention: str | None = None
    subspace: dict[str, Any] | None = None
    quantity: str | None = None
    hidden: HiddenCancellation | None = None


def judge_modes(
    target: Target,
    st: Setting,
    modes: list[str],
    opts: Options,
    allowances: list[tuple[np.ndarray, np.ndarray]] | None = None,
    mp_entries: np.ndarray | None = None,
) -> list[Entries]:
    """One judged block per mode, each with cotangents from ``st.rng_state``; the
    reverse-mode ``mp_entries`` also with their rule on mpmath numbers."""
    blocks = []
    for j, md in enumerate(modes):
        rng = np.random.default_rng()
        rng.bit_generator.state = st.rng_state
        allowance = None if allowances is None else allowances[j]
        blocks.append(judge(gather(
            target, st, md, rng, allowance, opts.policy, mp_entries, opts.dps, opts.expected
        )))  # fmt: skip
    return blocks


FIRST_STAGE = 4
"""Directions mp re-examines first in a failing check: those of its worst MISMATCH entries.
Where mp confirms a MISMATCH along one of them, the check is decided (MISMATCH) and the
other directions in doubt keep the first reference's verdicts, which a note names."""


def _worst_directions(blocks: list[Entries], d: int, doubt: list[int]) -> list[int] | None:
    """The directions (of ``d``) of the :data:`FIRST_STAGE` worst MISMATCH entries (by
    ``|autodiff - reference| / tolerance``), or None where no stage is worth it (no
    MISMATCH entry, or no more directions in ``doubt`` than that)."""
    if len(doubt) <= FIRST_STAGE:
        return None
    worst: dict[int, float] = {}
    for b in blocks:
        per = b.status.size // d
        for i in np.flatnonzero(b.status == SEVERITY[Verdict.MISMATCH]):
            k = int(i) // per
            worst[k] = max(worst.get(k, 0.0), float(np.nan_to_num(b.badness[i], nan=np.inf)))
    if not worst:
        return None
    return sorted(sorted(worst, key=lambda k: -worst[k])[:FIRST_STAGE])


def mismatch_along(blocks: list[Entries], d: int, dirs: Sequence[int]) -> bool:
    """Whether some entry along the directions ``dirs`` (of ``d``) is MISMATCH, in the
    per-mode ``blocks`` (each grouped by direction)."""
    for b in blocks:
        along = np.isin(np.arange(b.status.size) // (b.status.size // d), dirs)
        if np.any(along & (b.status == SEVERITY[Verdict.MISMATCH])):
            return True
    return False


def _escalated(
    source: Target, prep: Prepared, st: Setting, blocks: list[Entries], opts: Options,
    allowances: Any, details: dict[str, Any], kinks: bool, only: list[int] | None,
    done: list[int] | None = None,
) -> tuple[Setting, list[Entries], Any] | None:  # fmt: skip
    """The blocks judged again on mp along ``only`` (every direction in doubt when None),
    with the directions ``done`` before recorded beside them; None where mp did not run."""
    merged = escalate(source, st.dd, blocks, _directions(st), opts, details, kinks, only)
    if merged is None:
        return None
    if done:
        esc = details["escalation"]
        esc["directions"] = sorted({*esc["directions"], *done})
    # f at the point on mpmath numbers (the escalation's probe) measures the digits f
    # itself lost more exactly than its float64 value
    f0_mp = _floats_or_none(details.pop("f0_mp", None))
    st = replace(st, dd=merged, f0_mp=f0_mp if f0_mp is not None else st.f0_mp)
    blocks = judge_modes(prep.target, st, prep.modes, opts, allowances)
    if allowances is None:  # entries undecided before can fail on mp
        blocks, allowances = _with_roundoff(prep, st, opts, blocks, details["notes"])
    return st, blocks, allowances


def _dither_note(opts: Options) -> str:
    p = opts.policy
    return (
        f"some entries exceeded the plain tolerance: their autodiff values were evaluated again at "
        f"{p.dithers} inputs moved by up to {p.dither_ulps} ulps (further where a value did not "
        f"move, or, in float64, still failed), and each entry is allowed "
        f"{p.dither_allowance:g} times the largest move (the round-off of evaluating the rule; "
        "a wrong rule is wrong by the same amount there)"
    )


def _with_roundoff(
    prep: Prepared, st: Setting, opts: Options, blocks: list[Entries], notes: list[str]
) -> tuple[list[Entries], Any]:
    """Blocks judged again with the measured autodiff round-off, where entries fail."""
    bad = [SEVERITY[Verdict.MISMATCH], SEVERITY[Verdict.UNSTABLE]]
    # (and entries that pass only by an inherited round-off: their own is measured here)
    failing = [np.isin(b.status, bad) | leaning(b) for b in blocks]
    if opts.wrt != "inputs" or opts.order != 1 or prep.complex_any:
        return blocks, None
    if not any(fl.any() for fl in failing):
        return blocks, None
    call = (*prep.batch_call, opts.batch_size)
    allowances = autodiff_roundoff(
        prep.backend, call, opts.seed, blocks, failing,  # type: ignore[arg-type]
        lambda t: judge_modes(t, st, prep.modes, opts), prep.target, opts.policy,
    )  # fmt: skip
    if allowances is None:
        return blocks, None
    notes.append(_dither_note(opts))
    return judge_modes(prep.target, st, prep.modes, opts, allowances), allowances


def _with_f_in_mp(
    source: Target, prep: Prepared, st: Setting, blocks: list[Entries], opts: Options,
    allowances: Any,
) -> tuple[Setting, list[Entries]]:  # fmt: skip
    """Where a narrow check's float64 rule is MISMATCH and ``f`` at the point on mpmath
    numbers is not known yet (an mp reference from the start), ``f`` evaluated there
    once and the blocks judged again: the digits ``f`` keeps in float64 set the float64
    rule's resolution (see :func:`polygrad.pipeline.autodiff.f64_accuracy`)."""
    code = SEVERITY[Verdict.MISMATCH]
    narrow = prep.target.eps > F64_EPS
    if st.f0_mp is not None or not narrow or not any(np.any(b.status == code) for b in blocks):
        return st, blocks
    if source.evaluate_mp is None:
        return st, blocks
    try:
        st = replace(st, f0_mp=_f_at_x0_mp(source, opts.dps))
    except Exception:  # noqa: BLE001 - optional evidence: keep the verdicts
        return st, blocks
    return st, judge_modes(prep.target, st, prep.modes, opts, allowances)


def _f_at_x0_mp(target: Target, dps: int) -> np.ndarray | None:
    """``f`` at the point on mpmath numbers at ``dps`` digits, as float64 (None where not
    real); raises what ``evaluate_mp`` raises."""
    assert target.evaluate_mp is not None
    return _floats_or_none(target.evaluate_mp(target.x0, np.zeros_like(target.x0), dps))


RULE_MP_ROWS = 16
"""Most VJP rows whose rule :func:`_with_rule_in_mp` evaluates on mpmath numbers (those of
the worst MISMATCH entries first)."""


def _rows_in_doubt(target: Target, e: Entries, full: bool) -> np.ndarray:
    """The MISMATCH entries of a reverse-mode block, worst first, and those undecided
    because the rule passes only by an inherited round-off not measured (see
    :func:`polygrad.pipeline.judge.leaning`), within :data:`RULE_MP_ROWS` VJP rows."""
    failing = np.flatnonzero((e.status == SEVERITY[Verdict.MISMATCH]) | leaning(e))
    with np.errstate(all="ignore"):
        ratio = np.abs(e.autodiff - e.reference)[failing] / e.tolerance[failing]
    failing = failing[np.argsort(-np.nan_to_num(ratio, nan=np.inf))]
    rows = failing % max(target.m, 1) if full else failing
    kept = list(dict.fromkeys(rows.tolist()))[:RULE_MP_ROWS]
    return failing[np.isin(rows, kept)]


def _with_rule_in_mp(
    prep: Prepared, st: Setting, blocks: list[Entries], opts: Options, allowances: Any,
    notes: list[str],
) -> tuple[Setting, list[Entries]]:  # fmt: skip
    """Reverse-mode entries still MISMATCH, judged again beside the rule re-executed on
    mpmath numbers (``Target.vjp_mp``), where the backend can.

    No wider evaluation of a float64 rule exists (float64 code's own, or a narrower
    check's stand-in), and from outside, a right rule that rounds badly (``1 - p`` at
    ``p = 1 - 2e-9``) looks like a wrong one: the same rule in exact arithmetic decides
    (see :meth:`polygrad.pipeline.judge._Rule.exact`). ``f`` on mpmath numbers at the
    point measures what ``f`` itself lost.
    """
    target = prep.target
    if "rev" not in prep.modes or prep.complex_any:
        return st, blocks
    if opts.wrt != "inputs" or opts.order != 1:
        return st, blocks
    j = prep.modes.index("rev")
    doubt = _rows_in_doubt(target, blocks[j], st.full)
    if doubt.size == 0:
        return st, blocks
    budget = opts.policy.mp_auto_seconds
    evaluations = RULE_MP_EVALUATIONS * doubt.size + 1
    at_least = mp_seconds_at_least(target.n, evaluations)
    if at_least > budget:  # a wide input: not even one evaluation is timed
        notes.append(_rule_mp_skipped_note(doubt.size, at_least, "at least "))
        return st, blocks
    if not target.rule_mp_mode():
        return st, blocks
    try:
        if st.f0_mp is None and target.mp_mode():
            at_x0: list[np.ndarray | None] = []
            once = probe_seconds(lambda: at_x0.append(_f_at_x0_mp(target, opts.dps)))
            st = replace(st, f0_mp=at_x0[0])
            if once * (evaluations - 1) > budget:
                notes.append(_rule_mp_skipped_note(doubt.size, once * (evaluations - 1)))
                return st, blocks
        judged = judge_modes(target, st, prep.modes, opts, allowances, doubt)
    except Exception:  # noqa: BLE001 - optional evidence: keep the verdicts
        return st, blocks
    # cleared: neither MISMATCH nor still leaning on round-off it was not measured to have
    after = (judged[j].status == SEVERITY[Verdict.MISMATCH]) | leaning(judged[j])
    lost = None if st.f0_mp is None else digits_lost(target.y0, st.f0_mp)
    notes.append(_rule_mp_note(doubt.size, int(np.sum(~after[doubt])), opts, target, lost))
    return st, judged


def leaning_note(blocks: list[Entries], opts: Options, notes: list[str]) -> None:
    """Where entries stay undecided because the rule passes only by an inherited round-off
    that was not measured, a note that says so and what would measure it."""
    k = sum(int(np.sum(leaning(b))) for b in blocks)
    if not k:
        return
    notes.append(
        f"{k} entr{'y' if k == 1 else 'ies'} INCONCLUSIVE: the rule is off by more than "
        f"{opts.policy.c_lost:g} ulps of |f| per input scale, the round-off a right rule "
        "computed from terms of the size of f has as a matter of course, but within the "
        f"{opts.policy.c_ad:g} it can have (1 - tanh(u)^2 at a saturated u); that it loses "
        "so much is measured only by re-executing the rule on mpmath numbers, which could "
        "not run here (NumPy "
        "ufuncs and the captured JAX, PyTorch and TensorFlow programs can; math.*, "
        "np.vectorize and other code outside them cannot)"
    )


RULE_MP_EVALUATIONS = 3
"""What the rule of one VJP row costs on mpmath numbers, in evaluations of ``f`` (its
forward pass and its backward pass, about twice the forward)."""


def _rule_mp_skipped_note(rows: int, seconds: float, bound: str = "") -> str:
    return (
        f"the rule was not re-executed on mpmath numbers for the {rows} VJP row(s) beyond "
        f"the tolerances: it would take {bound}about {seconds:.0f} s, beyond "
        "policy.mp_auto_seconds"
    )


def _rule_mp_note(
    examined: int, cleared: int, opts: Options, target: Target, lost: np.ndarray | None
) -> str:
    """What the rule on mpmath numbers said of the MISMATCH entries it examined."""
    one = examined == 1
    head = (
        f"{examined} entr{'y' if one else 'ies'} beyond the tolerances above (or within "
        "them only by the round-off a rule computed from terms of the size of f can lose) had "
        f"{'its' if one else 'their'} rule (the code's own VJP, or the derivative supplied) "
        f"re-executed at the point on mpmath numbers at {opts.dps} digits"
    )
    wrong = (
        "the rule is wrong, or a primitive's own value is (the mp evaluation computes each "
        "primitive exactly: a wrong kernel shows only in the comparison above)"
    )
    if not cleared:
        return f"{head}; it does not explain {'it' if one else 'them'} as round-off: {wrong}"
    own = ""
    if target.eps <= F64_EPS:
        c = opts.policy.c_lost
        change = (
            "the rule's change when evaluated again on mpmath numbers rounded to 53 bits, as "
            "float64 rounds, and to 50 (kernels a few ulps from correctly rounded)"
        )
        own = f"; each such entry is allowed {c:g} times {change}"
        if lost is not None and lost.size:
            own = (
                f"; f itself is computed here with a relative error of "
                f"{float(np.max(lost)):.2g} against mp, and each such entry is allowed "
                f"{c:g} times the larger of that share of its scale and {change}"
            )
    rest = examined - cleared
    others = f"; the other {rest} it does not explain: {wrong}" if rest else ""
    where = "there" if one else f"at {cleared} of them"
    return (
        f"{head}; it agrees with the reference {where}: the rule is right, and its value "
        f"differs from it by the round-off of evaluating it in floating point{own}{others}"
    )


def _fine_sides(
    source: Target, prep: Prepared, st: Setting, blocks: list[Entries], method: str,
    opts: Options, allowances: Any, details: dict[str, Any],
) -> tuple[Setting, list[Entries]]:  # fmt: skip
    """Without mp, MISMATCH and INCONCLUSIVE entries judged again on one-sided
    derivatives at fine steps (see :mod:`polygrad.pipeline.sides`); a note says what
    changed."""
    rng = np.random.default_rng([opts.seed, 7])
    sharp = sharpen_sides(source, st.dd, blocks, _directions(st), method, st.s, rng)
    if sharp is None:
        return st, blocks
    st2 = replace(st, dd=sharp[0])
    blocks2 = judge_modes(prep.target, st2, prep.modes, opts, allowances)
    code = SEVERITY[Verdict.NONSMOOTH]
    kinks = sum(int(np.sum((b2.status == code) & (b.status != code)))
                for b, b2 in zip(blocks, blocks2, strict=True))  # fmt: skip
    if kinks == 0:
        return st, blocks
    details["notes"].append(
        f"the one-sided derivatives along the {len(sharp[1])} direction(s) of entries in "
        f"doubt (MISMATCH or INCONCLUSIVE) were estimated again in {method} at steps of "
        f"{FINE_STEP:g} to "
        f"{FINE_STEP * 2.0 ** (1 - FINE_LEVELS):g} times the direction, with the noise "
        f"measured there (mp did not re-examine them): {kinks} of those entries sit "
        f"at a kink of f that the first steps, crossing it, read as noise (NONSMOOTH)"
    )
    return st2, blocks2


def _directions(st: Setting) -> tuple[int, Callable[[np.ndarray], np.ndarray]]:
    """(number of directions, rows of the directions ``(k, n)`` by index): a full
    check's coordinate directions are built only for the rows asked for."""
    if not st.full:
        W = st.W
        assert W is not None
        return W.shape[0], lambda idx: W[idx]

    def rows(idx: np.ndarray) -> np.ndarray:
        out = np.zeros((len(idx), st.s.size))
        out[np.arange(len(idx)), idx] = st.s[idx]
        return out

    return st.s.size, rows


def _floats_or_none(y: Any) -> np.ndarray | None:
    """mpmath values as float64, or None where they are not real numbers."""
    try:
        return np.array([float(v) for v in np.ravel(y)], dtype=np.float64)
    except (TypeError, ValueError):
        return None


def _hidden(target: Target, st: Setting, opts: Options) -> bool:
    """Whether ``f`` itself lost far more digits than its dtype's round-off."""
    rel = f_accuracy(target, st)
    return rel is not None and bool(np.any(rel > opts.policy.c_ad * target.eps))


def hidden_cancellation(target: Target, st: Setting, opts: Options) -> HiddenCancellation | None:
    """What ``f`` itself lost to hidden cancellation in the working dtype, or None."""
    rel = f_accuracy(target, st)
    if rel is None or rel.size == 0 or not _hidden(target, st, opts):
        return None
    i = int(np.argmax(rel))
    best = st.f0_mp if st.f0_mp is not None else st.f0
    assert best is not None
    return HiddenCancellation(
        output=target.output_layout.name_of(i) if target.m > 1 else "f",
        value=float(np.ravel(np.asarray(target.y0, dtype=np.float64))[i]),
        accurate=float(np.ravel(np.asarray(best, dtype=np.float64))[i]),
        relative_error=float(rel[i]),
        source="mp" if st.f0_mp is not None else "float64",
        allowance=opts.policy.c_lost,
    )


def float64_lost_note(target: Target, st: Setting, opts: Options) -> str | None:
    """The note on ``f`` losing digits in float64 too, where that widens the float64
    evaluation's tolerance (see :meth:`polygrad.pipeline.judge._Rule.hidden64`)."""
    rho = f64_accuracy(target, st)
    if rho is None or rho.size == 0 or not np.any(rho > opts.policy.c_ad * F64_EPS):
        return None
    return (
        f"f loses digits in float64 too (relative error {float(np.max(rho)):.2g} against mp "
        "at the point); the float64 evaluation of the rule, which tells a wrong rule from an "
        "unstable one, resolves no more than that: each of its entries is allowed "
        f"{opts.policy.c_lost:g} times that share of its scale (its float64 tolerance)"
    )


def hidden_note(h: HiddenCancellation, dtype: str) -> str:
    """The note on ``f`` computed to far fewer digits than its dtype has."""
    none = " (no correct digit)" if h.relative_error >= 0.5 else ""
    why = (
        f"underflow, a value below {dtype}'s smallest normal number, which keeps fewer digits"
        if h.cause(dtype) == "underflow"
        else "hidden cancellation, a value made from intermediates far larger than itself"
    )
    return (
        f"{h.output} itself is computed here with a relative error of "
        f"{h.relative_error:.2g}{none} in {dtype} ({h.value:.6g}, against {h.accurate:.6g} "
        f"in {h.source}): {why}; a right rule computed in the same arithmetic can lose as "
        f"much, so where only the working dtype is off, each entry of that output is allowed "
        f"{h.allowance:g} times that share of its scale"
    )


def assess(
    prep: Prepared, st: Setting, method: str, opts: Options, ref_target: Target | None = None
) -> Assessment:
    """Judge ``prep``'s autodiff against ``st``; allowance for round-off; mp for doubt.

    Parameters
    ----------
    prep : Prepared
        The implementation judged.
    st : Setting
        The reference and its directions.
    method : str
        The reference's source (``"mp"`` is never escalated).
    opts : Options
        ``reference="auto"`` re-examines entries in doubt with mp; with
        ``mp_in_stages``, the directions of the worst MISMATCH entries first, stopping
        there where mp confirms one (see :func:`_worst_directions`); else every
        direction in doubt at once.
    ref_target : Target, optional
        The target the reference came from (default: ``prep.target``).
    """
    details: dict[str, Any] = {"notes": []}  # filled in by the escalation's functions
    blocks = judge_modes(prep.target, st, prep.modes, opts)
    blocks, allowances = _with_roundoff(prep, st, opts, blocks, details["notes"])
    source = prep.target if ref_target is None else ref_target
    if opts.reference == "auto" and method != "mp":
        # no entry fails on a finite-difference reference while a stronger one can be had
        kinks = _hidden(prep.target, st, opts)
        d = _directions(st)[0]
        doubt = directions_in_doubt(blocks, d, kinks)
        first = _worst_directions(blocks, d, doubt) if opts.mp_in_stages else None
        escalated = _escalated(source, prep, st, blocks, opts, allowances, details, kinks, first)
        if escalated is not None and first is not None:
            if mismatch_along(escalated[1], d, first):  # decided: the rest is deferred
                details["escalation"]["deferred"] = len(doubt) - len(first)
            else:
                rest = sorted(set(doubt) - set(first))
                escalated = _escalated(source, prep, escalated[0], escalated[1], opts,
                                       escalated[2], details, kinks, rest, first)  # fmt: skip
                if escalated is None:  # mp cannot take the rest (its note says why): as if
                    details.pop("escalation", None)  # it could take none: the fine sides
        if escalated is not None:
            st, blocks, allowances = escalated
        else:
            st, blocks = _fine_sides(source, prep, st, blocks, method, opts, allowances, details)
    if method == "mp":
        st, blocks = _with_f_in_mp(source, prep, st, blocks, opts, allowances)
    st, blocks = _with_rule_in_mp(prep, st, blocks, opts, allowances, details["notes"])
    leaning_note(blocks, opts, details["notes"])
    if "escalation" in details:
        name_deciders(blocks, details, method, prep.modes)
    hidden = hidden_cancellation(prep.target, st, opts)
    if hidden is not None:
        details["notes"].append(hidden_note(hidden, prep.target.working_dtype))
    lost64 = float64_lost_note(prep.target, st, opts)
    if lost64 is not None:
        details["notes"].append(lost64)
    esc = details.get("escalation")
    return Assessment(
        concat_entries(blocks, prep.modes), st, tuple(details["notes"]),
        None if esc is None else Escalation.from_dict(esc), hidden=hidden,
    )  # fmt: skip
