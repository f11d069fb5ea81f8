"""Text rendering of a :class:`~polygrad.report.Report`, coloured on a terminal.

Colour follows the usual conventions: it is used when standard output is a
terminal, never when output is piped or redirected, when the ``NO_COLOR``
environment variable is set (https://no-color.org), or when ``TERM`` is
``dumb``; ``FORCE_COLOR`` turns it on regardless.
"""

from __future__ import annotations

import os
import re
import sys
from typing import TYPE_CHECKING, Any

import numpy as np

from .render_terms import your_terms_lines

if TYPE_CHECKING:
    from .details import NaiveCentralDifference, ReferenceInfo, TaylorSummary
    from .report import Entries, Report

__all__ = ["render_text", "use_color", "strip_color"]

_COLORS = {
    "PASS": "32",  # green
    "NONSMOOTH": "33",  # yellow
    "INCONCLUSIVE": "33",
    "UNSTABLE": "35",  # magenta
    "NONFINITE": "31",  # red
    "MISMATCH": "31",
}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def use_color(stream: Any = None) -> bool:
    """Whether to colour text written to ``stream`` (default ``sys.stdout``).

    False when ``NO_COLOR`` is set (to anything non-empty), when ``TERM`` is
    ``dumb`` or when the stream is not a terminal; True when ``FORCE_COLOR``
    is set and ``NO_COLOR`` is not.
    """
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    if os.environ.get("TERM") == "dumb":
        return False
    stream = sys.stdout if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def strip_color(text: str) -> str:
    """Remove ANSI colour codes."""
    return _ANSI.sub("", text)


def _paint(text: str, code: str, color: bool) -> str:
    return f"\x1b[{code}m{text}\x1b[0m" if color else text


def _noise_vs_f(
    noise: float | None, f_abs: float | None, eps: float | None, kinks: bool = False
) -> str:
    """The noise against what rounding f's own value explains, worded by what was measured.

    A noise of a few ulps of ``|f|`` is the rounding of f's value; a far larger
    one (f computed as a difference of larger terms, or through a ``where``
    whose branches differ) is said to be larger, with ``|f|``, never that f
    is near 0 unless it is. With ``kinks`` (some entries are NONSMOOTH) the kink
    comes first: the noise sample steps across it, and its slopes differ.
    """
    if noise is None or f_abs is None or not np.isfinite(noise):
        return "not measured"
    if f_abs == 0:
        return "f = 0 here, so the noise comes from the terms that cancel to 0"
    ulps = noise / (eps * f_abs) if eps else np.inf
    if ulps < ULPS_BELOW:  # an mp evaluation carried more digits than its nominal ones
        return f"~{_g(noise / f_abs, 2)} of |f| = {_g(f_abs, 3)}, below its last digit"
    if ulps <= ULPS_EXPLAINED:
        return f"~{_g(ulps, 2)} ulp of |f| = {_g(f_abs, 3)}"
    why = (
        "f has a kink here (the NONSMOOTH entries below), which the noise sample steps across"
        if kinks
        else "so f is computed from larger terms that cancel (or branches that differ) here"
    )
    return (
        f"{_g(ulps, 2)} ulp of |f| = {_g(f_abs, 3)}: more than rounding f's value explains; {why}"
    )


ULPS_EXPLAINED = 1e3
"""Noise up to this many ulps of ``|f|`` is the rounding of f's value; beyond, cancellation."""
ULPS_BELOW = 1e-3
"""Noise below this many ulps of ``|f|`` is said relative to ``|f|`` (a fraction of an ulp
as small as 1e-25, of an mp evaluation at extra digits, reads as nothing)."""


def _step(ref: ReferenceInfo) -> str:
    """The reference's median step: relative, and absolute where the scale is known."""
    h = ref.median_step
    return f"{_g(h, 3)}{_times_scale(ref)}{_absolute(h, ref)}"


def _times_scale(ref: ReferenceInfo) -> str:
    s = ref.median_scale
    return "" if s is None else f" × s (s: powers of two nearest |x|, median {_g(s, 3)})"


def _absolute(h: float | None, ref: ReferenceInfo) -> str:
    s = ref.median_scale
    return "" if s is None or h is None else f" = {_g(h * s, 3)} in the input's units"


def _reference_noise(report: Report) -> str:
    """The reference's noise figure, named by its arithmetic, against |f|."""
    d = report.details
    ref = d.reference
    arith, eps = str(d.working_dtype), d.eps
    if ref.method == "mp":
        arith, eps = f"mpmath at {ref.dps} digits", 10.0 ** -float(ref.dps or 15)
    elif ref.method == "quad":
        arith, eps = "quad precision (IEEE binary128)", 2.0**-112
    elif ref.method == "float64":
        arith, eps = "float64", float(np.finfo(np.float64).eps)
    along = ref.noise_measured_along
    shared = along not in ("", "each direction") and ref.method not in ("mp", "quad")
    where = f"; measured along {along}" if shared else ""
    return (
        f"  noise of f in {arith} (the reference's arithmetic, which limits its error bar): "
        f"{_g(ref.noise, 3)} ({_noise_vs_f(ref.noise, ref.f_abs, eps, _has_kinks(report))})"
        f"{where}"
    )


def _severity(verdict: str) -> int:
    """The status code of ``verdict`` (see :data:`polygrad.report.SEVERITY`)."""
    from .verdicts import SEVERITY, Verdict

    return SEVERITY[Verdict(verdict)]


def _has_kinks(report: Report) -> bool:
    """Whether some entry of ``report`` is NONSMOOTH."""
    from .verdicts import SEVERITY, Verdict

    return bool(np.any(report.entries.status == SEVERITY[Verdict.NONSMOOTH]))


def _g(x: float | None, digits: int = 4) -> str:
    """``x`` to ``digits`` significant digits; ``nan`` for NaN, ``-`` for a missing value."""
    if x is None:
        return "-"
    x = float(x)
    if np.isnan(x):
        return "nan"
    if np.isinf(x):
        return "+inf" if x > 0 else "-inf"
    return f"{x:.{digits}g}"


def render_text(report: Report, max_rows: int = 5, color: bool | None = None) -> str:
    """The report as text: verdict, what was compared, worst entries, why.

    Parameters
    ----------
    report : Report
    max_rows : int
        Number of worst entries listed.
    color : bool, optional
        ANSI colours; default :func:`use_color` (on for a terminal only).

    Returns
    -------
    str
    """
    color = use_color() if color is None else bool(color)
    lines = [_headline(report, color)]
    loc = report.localization
    if loc is not None and loc.shown_first:  # the located node first, when localization ran
        lines += loc.lines()
    lines += _setup_lines(report)
    lines += _worst_lines(report, max_rows, color)
    lines += _surrogate_hint(report)
    if "NONSMOOTH" in report.counts():
        lines.append(_kinks(report))
    lines += _evidence_lines(report)
    lines += [f"  note: {note}" for note in report.details.notes]
    unresolved = _row_scale_only(report)
    if unresolved:
        lines.append(unresolved)
    if loc is not None and not loc.shown_first:  # run by default, nothing found: a line
        lines += loc.lines()
    return "\n".join(lines)


def _surrogate_hint(report: Report) -> list[str]:
    """Where every MISMATCH entry's reference is exactly 0 (f constant under small moves:
    a quantizer, floor, a step) while the rule is not: how to say that a rule differs by
    design (a straight-through estimator), if it does."""
    e = report.entries
    bad = e.status == _severity("MISMATCH")
    if not np.any(bad) or np.any(e.reference[bad] != 0):
        return []
    return [
        "  hint: the reference of every MISMATCH entry is exactly 0: f does not change under "
        "small moves of those inputs (a quantizer, floor, round, a step), and its derivative "
        "there is 0; if the rule is a surrogate by design (a straight-through estimator), "
        "check(..., surrogate=True) states it, and those entries are then not judged"
    ]


def _setup_lines(report: Report) -> list[str]:
    """What was checked, the reference, its noise, the tolerance."""
    d, e = report.details, report.entries
    ref = d.reference
    counts = ", ".join(f"{k} {v}" for k, v in sorted(report.counts().items()))
    how = {
        "mp": f"mpmath at {ref.dps} digits",
        "quad": "quad-precision (IEEE binary128) central differences",
        "float64": "float64 central differences",
        "working": f"{d.working_dtype} central differences (no float64 evaluation used)",
    }.get(ref.method, str(ref.method))
    lines = [
        f"  checked {len(e.names)} {report.quantity} of f: {d.inputs} input(s) "
        f"{tuple(d.input_names)} -> {d.outputs} output(s); "
        f"{d.backend}, {d.working_dtype}, mode {'+'.join(d.modes)}",
        f"  verdicts: {counts}",
        f"  reference: {how} + Richardson extrapolation; median step {_step(ref)}, "
        f"{_median_error(report)}; {ref.evaluations} evaluations in {ref.seconds or 0:.2f} s",
        _reference_noise(report),
        f"  tolerance: {d.rules.tolerance} (eps = {_g(d.eps, 3)} for {d.working_dtype})",
    ]
    if not d.rules.has_float64_autodiff and d.working_dtype != "float64":
        lines.append(
            "  note: no float64 evaluation of the gradient is used (none could be made, or its "
            "float64 run is another function: see the notes), so a wrong rule cannot be told "
            "apart from an unstable computation"
        )
    return lines


NAME_WIDTH = 48
"""Widest entry column of the table of worst entries; longer names keep their ends."""


def _worst_lines(report: Report, max_rows: int, color: bool) -> list[str]:
    """The table of the worst entries, with one-sided derivatives and float64 values."""
    e = report.entries
    rows = e.worst(max_rows)
    # the entry column fits the names shown (a Keras path, "sequential/dense/kernel[1, 3]"),
    # from 28 to NAME_WIDTH characters
    w = min(max([28, *(len(e.names[i]) for i in rows)]), NAME_WIDTH)
    lines = [
        "  worst entries:",
        f"  {'entry':<{w}} {'verdict':<12} {'autodiff':>12} {'reference':>12} {'± error':>10} "
        f"{'|diff|':>10} {'tolerance':>10}",
    ]
    verdicts = e.verdicts()
    for i in rows:
        name = e.names[i]
        if len(name) > w:  # keep the end: the index tells the entries of one leaf apart
            name = name[:16] + "..." + name[-(w - 19) :]
        v = str(verdicts[i])
        vtxt = _paint(f"{v:<12}", _COLORS.get(v, "0"), color)
        lines.append(
            f"  {name:<{w}} {vtxt} {_g(e.autodiff[i], 6):>12} {_g(e.reference[i], 6):>12} "
            f"{_g(e.reference_error[i], 2):>10} {_g(e.difference[i], 2):>10} "
            f"{_g(e.tolerance[i], 2):>10}"
        )
        if v == "NONSMOOTH":
            lines.append(_one_sided_line(e, i))
        if v in ("MISMATCH", "UNSTABLE") and np.isfinite(e.autodiff64[i]):
            lines.append(
                f"  {'':<28}   float64 evaluation of the rule: {_g(e.autodiff64[i], 10)} "
                f"(|diff| {_g(abs(e.autodiff64[i] - e.reference[i]), 2)}, tolerance "
                f"{_g(e.tolerance64[i], 2)})"
            )
    return lines


def _one_sided_line(e: Entries, i: int) -> str:
    """The one-sided derivatives of a NONSMOOTH entry, and where autodiff lies."""
    sides = [
        f"{word} derivative "
        + (_g(val, 6) if not np.isnan(val) else "undefined (f is not finite there)")
        for word, val in (("left", e.left[i]), ("right", e.right[i]))
    ]
    if not np.isfinite(e.autodiff[i]):
        value = "NaN" if np.isnan(e.autodiff[i]) else _g(e.autodiff[i])
        tail = f"; autodiff returned {value} at this kink"
    elif np.isnan(e.left[i]) or np.isnan(e.right[i]):
        tail = ""
    elif np.isinf(e.left[i]) or np.isinf(e.right[i]):
        tail = (
            "; f jumps or turns vertical here (a one-sided difference does not shrink like "
            "the step): no finite derivative exists for autodiff to match"
        )
    elif e.within_one_sided[i]:
        tail = "; autodiff lies between them"
    else:
        tail = "; autodiff lies outside them (possible at a composite kink, see below)"
    return f"  {'':<28}   {sides[0]}, {sides[1]}{tail}"


def _all_kinks_clause(report: Report) -> str:
    """What projections that all sit at a kink can say, and what can say more."""
    counts = report.counts()
    if set(counts) != {"NONSMOOTH"}:
        return ""
    return (
        "; here every one of them crosses a kink at x (ties, ReLUs at 0), so they "
        "verify nothing of the gradient: a full check (strategy='full') tests each input "
        "alone, and where most of them are smooth it can"
    )


def _evidence_lines(report: Report) -> list[str]:
    """Projections' detection power, round-off, your own check, the Taylor test."""
    d = report.details
    lines = []
    proj = d.projections
    if proj is not None:
        lines.append(
            f"  projections: {proj.count} random directions; a single wrong entry is caught "
            f"when off by more than ~{_g(proj.single_entry_error_caught, 2)}, an error spread "
            f"over many entries with 99% probability when its scaled 2-norm exceeds "
            f"{_g(proj.spread_error_norm_caught_99, 2)}" + _all_kinks_clause(report)
        )
    naive = d.naive_central_difference
    if naive is not None:
        lines.append(_roundoff_line(report, naive))
    if d.your_terms is not None:
        lines.extend(your_terms_lines(d.your_terms))
    taylor = d.taylor
    if taylor is not None and taylor.explanation:
        lines.append(_taylor_line(report, taylor))
    return lines


def _roundoff_line(report: Report, naive: NaiveCentralDifference) -> str:
    """What a plain central difference in the working dtype would be off by."""
    d = report.details
    wd, ref = d.working_dtype, d.reference
    f_abs = naive.noise / (d.eps * naive.noise_ulps) if naive.noise_ulps else 0.0
    # the estimates are along a direction of steps in units of s: per unit of the input,
    # a derivative's error is theirs divided by s
    per_input = 1.0 / float(ref.median_scale or 1.0)
    txt = (
        f"  round-off: noise of f in {wd} (your arithmetic: what a {wd} central difference "
        f"sees, unlike the reference's noise above) {_g(naive.noise, 2)} "
        f"({_noise_vs_f(naive.noise, f_abs, d.eps)}); a plain central difference "
        f"with step h is off by ~noise/h, e.g. {_g(naive.example_error * per_input, 2)} at "
        f"h = 2^-13{_times_scale(ref)}{_absolute(2.0**-13, ref)}"
    )
    if naive.optimal_step is not None and naive.optimal_error is not None:
        txt += (
            f"; its best step is h ≈ {_g(naive.optimal_step, 2)} × s"
            f"{_absolute(naive.optimal_step, ref)} (error "
            f"~{_g(naive.optimal_error * per_input, 2)})"
        )
    elif naive.third_derivative is not None and "NONSMOOTH" not in report.counts():
        txt += "; third derivative ≈ 0 here (no truncation error), so larger steps only help"
    elif naive.third_derivative is not None:
        txt += "; no curvature was measured along the sampled direction, but f has kinks"
    return txt


def _taylor_line(report: Report, taylor: TaylorSummary) -> str:
    """The Taylor test, read beside the verdict."""
    txt = f"  Taylor test (supporting evidence): {taylor.explanation}"
    if taylor.verdict == "wrong" and "NONSMOOTH" in report.counts():
        head = (
            "  Taylor test (supporting evidence): the Taylor remainder falls like "
            f"h^{float(taylor.slope or 0):.2f}, slower than h^2, "
        )
        passed = report.entries.status == _severity("PASS")
        if np.all(_kinks_of_intermediates(report) | passed):
            return head + (
                "as it must where autodiff's value at the point is not the derivative (at "
                "a kink of an intermediate, or where a rule special-cases this input): it "
                "adds nothing to the entries above"
            )
        return head + (
            "as it must where the steps cross a kink (the remainder there is of first "
            "order at best, slower still at an infinite slope): no evidence against the "
            "gradient"
        )
    if taylor.verdict == "wrong" and report.ok:
        return (
            "  Taylor test (supporting evidence): along its one random direction the "
            f"remainder falls like h^{float(taylor.slope or 0):.2f}, not h^2, over steps "
            "where it is near the round-off of f; every entry above agrees with a "
            "reference whose error is measured, which decides: no evidence against the "
            "gradient"
        )
    counts = report.counts()
    if taylor.verdict == "consistent" and "MISMATCH" in counts:
        few = 2 * counts["MISMATCH"] < len(report.entries.names)
        txt += (
            " — along one random direction only, which barely weighs a few wrong "
            "entries among many; the comparison of each entry above decides"
            if few
            else " — a Taylor remainder does not resolve an error this small next to the "
            "round-off of f; the comparison of each entry above decides"
        )
    return txt


def _row_scale_only(report: Report) -> str | None:
    """PASS entries whose reference error bar exceeds the entry: judged on their row's
    scale only. (A NONSMOOTH entry's error bar is that of a difference across a kink, an
    infinite one at an infinite slope: it says nothing of what a smooth entry allows.)"""
    from .verdicts import SEVERITY, Verdict

    e = report.entries
    if report.details.reference.method in ("mp", "quad"):
        return None
    judged = e.status == SEVERITY[Verdict.PASS]
    with np.errstate(invalid="ignore"):
        wide = judged & (np.abs(e.reference_error) > np.abs(e.reference))
    k = int(np.sum(wide))
    if k == 0:
        return None
    return (
        f"  resolution: {k} of {len(e.names)} entries have a reference error bar larger than the "
        "entry itself; they were judged on their row's scale (the size of the largest entries "
        f"beside them): an error up to {_g(float(np.max(e.tolerance[wide])), 2)} in them would "
        "still pass; an mp reference (reference='mp', where every operation of f runs on "
        "mpmath numbers) would resolve them"
    )


def _entries(k: int) -> str:
    return f"{k} entry" if k == 1 else f"{k} entries"


def _verb(k: int, one: str, many: str) -> str:
    return one if k == 1 else many


def _headline(report: Report, color: bool) -> str:
    """First line: the verdict, an explicit ok / NOT OK, and why in one sentence."""
    v = str(report.verdict)
    code = _COLORS.get(v, "0")
    mark = _paint("[ok]" if report.ok else "[NOT OK]", "1;" + ("32" if report.ok else "31"), color)
    return f"polygrad: {_paint(v, '1;' + code, color)} {mark} — {_why(report)}"


def _how_far_off(e: Any, i: int) -> str:
    """How far entry ``i`` is off, against the tolerance of the test it failed.

    In a narrow working dtype a rule error can hide inside the working-dtype
    tolerance and show only in the float64 evaluation of the rule (against its
    own, tighter tolerance); the sentence then quotes that one.
    """
    diff, tol = float(e.difference[i]), float(e.tolerance[i])
    diff64 = abs(float(e.autodiff64[i]) - float(e.reference[i]))
    tol64 = float(e.tolerance64[i])
    if np.isfinite(diff64) and tol64 > 0 and diff64 > tol64:
        # the float64 evaluation of the rule decides MISMATCH: quote it
        if not (tol > 0 and diff / tol >= diff64 / tol64):
            return (
                f"the float64 evaluation of the rule is off by {_g(diff64, 2)}, "
                f"{_g(diff64 / tol64, 2)} times its tolerance"
            )
    times = diff / tol if tol > 0 else float("inf")
    return f"off by {_g(diff, 2)}, {_g(times, 2)} times its tolerance"


def _worst_of(e: Entries, verdict: str) -> int:
    """Index of the worst entry whose verdict is ``verdict`` (a NaN elsewhere is no MISMATCH)."""
    from .verdicts import SEVERITY, Verdict

    code = SEVERITY[Verdict(verdict)]
    return next(int(i) for i in e.worst(len(e.names)) if int(e.status[i]) == code)


def _hidden_clause(report: Report) -> str:
    """``"."``, or where f itself lost digits in the working dtype, what that means here."""
    h = getattr(report.details, "hidden_cancellation", None)
    if h is None:
        return "."
    return (
        f", to the digits {h.output} itself keeps in {report.details.working_dtype} here "
        f"(relative error {h.relative_error:.2g}: {h.cause(report.details.working_dtype)}, "
        "see the note)."
    )


def _why(report: Report) -> str:
    """One sentence: why this verdict, with the entry counts behind it."""
    e, c = report.entries, report.counts()
    n = len(e.names)
    v = str(report.verdict)
    k = c.get(v, 0)
    if v == "PASS":
        return (
            "autodiff agrees with the reference within the combined error bars on "
            + (f"all {n} entries" if n > 1 else "its only entry")
            + _hidden_clause(report)
        )
    if v == "MISMATCH":
        i = _worst_of(e, v)
        return (
            f"the gradient rule is wrong: {k} of {_entries(n)} "
            f"{_verb(k, 'differs', 'differ')} from the reference by far more "
            f"than round-off and the reference's error bar allow (worst {e.names[i]}: "
            f"{_how_far_off(e, i)})."
        )
    if v == "NONSMOOTH":
        return _why_nonsmooth(report, k, n)
    if v == "UNSTABLE":
        return (
            f"the rule's float64 evaluation agrees with the reference, but at {k} of "
            f"{_entries(n)} the {report.details.working_dtype} gradient has lost far more "
            f"digits than round-off explains: its {report.details.working_dtype} arithmetic "
            "is unstable, or its code differs from the float64 one (a branch on the dtype)."
        )
    if v == "NONFINITE":
        return (
            f"autodiff and the reference disagree on finiteness at {k} of {_entries(n)} "
            f"(NaN or Inf on one side only){_overflow(report)}."
        )
    return _why_undecided(report, k, n)


def _why_undecided(report: Report, k: int, n: int) -> str:
    """INCONCLUSIVE: a surrogate rule by design, a tolerance as wide as the entries (no
    float64 evaluation of a narrow rule), or a reference too coarse."""
    from .pipeline.prepare import SURROGATE_NOTE

    e = report.entries
    undecided = np.array([str(v) == "INCONCLUSIVE" for v in e.verdicts()], dtype=bool)
    if any(str(note).startswith(SURROGATE_NOTE) for note in report.notes):
        return (
            f"the rule is a surrogate by design (surrogate=True): at {k} of {_entries(n)} it "
            "differs from f's derivative, which is shown, not judged; the values of f and of "
            "the rule are finite."
        )
    leaning = undecided & (np.zeros(undecided.shape, bool) if e.leaning is None else e.leaning)
    if np.any(leaning):
        return _why_leaning(report, int(np.flatnonzero(leaning)[0]), int(np.sum(leaning)), n)
    with np.errstate(all="ignore"):
        # the tolerance, not the reference's error bar, is what is as wide as the entry
        wide = undecided & (e.tolerance > 8 * e.reference_error) & np.isfinite(e.tolerance)
        rel = e.tolerance / np.abs(e.reference)
    if np.any(wide):
        i = int(np.flatnonzero(wide)[np.nanargmax(np.where(np.isfinite(rel[wide]), rel[wide], -1))])
        dtype = report.details.working_dtype
        return (
            f"the round-off allowed is of the size of the entries, so a wrong rule cannot be "
            f"told from round-off at {k} of {_entries(n)} (at {e.names[i]} the tolerance is "
            f"±{_g(e.tolerance[i], 2)}, {_share(float(rel[i]))}, in {dtype}; "
            f"{_what_would_decide(dtype)}; the notes below say more)."
        )
    return (
        f"no reference accurate enough could be obtained for {k} of {_entries(n)}, so "
        f"{_verb(k, 'it was', 'they were')} not judged ({_why_unresolved(report)})."
    )


def _why_leaning(report: Report, i: int, k: int, n: int) -> str:
    """INCONCLUSIVE entries whose rule passes only by the round-off a rule computed from
    terms of the size of f can lose, not measured (the rule did not run on mpmath numbers)."""
    e = report.entries
    return (
        f"the rule is off by more than round-off of its own scale at {k} of {_entries(n)}, but "
        f"within what a rule computed from terms of the size of f can lose (at {e.names[i]}: "
        f"|diff| {_g(abs(e.autodiff[i] - e.reference[i]), 2)}, allowed "
        f"{_g(e.tolerance[i], 2)}), and whether it loses that much was not measured: its "
        "re-execution on mpmath numbers, which would tell, did not run (see the note); "
        "a check at a point where |x| is not far below f's own length scale decides."
    )


def _share(rel: float) -> str:
    """A width relative to the entry, in words: "0.037 of the entry", "680 times the entry"."""
    return f"{_g(rel, 2)} of the entry" if rel < 1 else f"{_g(rel, 2)} times the entry"


def _overflow(report: Report) -> str:
    """Where autodiff is infinite and the derivative is beyond the working dtype's largest
    finite number: it overflows there, which no rule in that dtype can avoid."""
    from .backends.base import numpy_dtype

    e = report.entries
    try:
        largest = float(np.finfo(numpy_dtype(report.details.working_dtype)).max)
    except (TypeError, ValueError, ImportError):
        return ""
    with np.errstate(invalid="ignore"):
        over = np.isinf(e.autodiff) & (np.abs(e.reference) > largest)
    if not np.any(over):
        return ""
    i = int(np.flatnonzero(over)[0])
    return (
        f"; at {_entries(int(over.sum()))} the derivative ({_g(float(e.reference[i]), 3)} at "
        f"{e.names[i]}) is beyond {report.details.working_dtype}'s largest finite number "
        f"({_g(largest, 3)}): the gradient overflows in {report.details.working_dtype}"
    )


def _what_would_decide(dtype: str) -> str:
    """What would resolve an entry whose allowed round-off is as large as itself."""
    if dtype == "float64":  # the rule's own values moved that far over a few ulps
        return (
            "the rule's values moved that far when the input moved by a few ulps: a rule "
            "that jumps at the point, or whose round-off is that large; the Taylor test "
            "below and a check at a point a little away from here tell which"
        )
    return "a float64 evaluation of the rule, or a wider working dtype, would decide"


def _why_unresolved(report: Report) -> str:
    """Why the reference decided nothing: the widest relative error bar, and the notes."""
    e = report.entries
    undecided = np.array([i for i, v in enumerate(e.verdicts()) if str(v) == "INCONCLUSIVE"])
    notes = "; the notes below say more" if report.notes else ""
    if undecided.size == 0:
        return "the notes below say why" if report.notes else "no entry could be compared"
    with np.errstate(all="ignore"):
        rel = np.abs(e.reference_error[undecided]) / np.abs(e.reference[undecided])
    if not np.any(np.isfinite(rel)):
        return _unresolved_zero(report, undecided) + notes
    i = int(undecided[int(np.nanargmax(np.where(np.isfinite(rel), rel, -1.0)))])
    return (
        f"at {e.names[i]} the reference's error bar is ±{_g(e.reference_error[i], 2)}, "
        f"{_share(float(rel[undecided == i][0]))}: too coarse to tell a gradient error "
        f"from round-off in {report.details.working_dtype}{notes}"
    )


def _unresolved_zero(report: Report, undecided: np.ndarray) -> str:
    """Why entries whose reference is 0 (or not finite) decided nothing: the widest finite
    error bar among them, against the rule's value there."""
    e = report.entries
    err = np.abs(np.asarray(e.reference_error, dtype=np.float64)[undecided])
    if not np.any(np.isfinite(err)):
        return "the reference's error bars are unbounded"
    i = int(undecided[int(np.argmax(np.where(np.isfinite(err), err, -1.0)))])
    return (
        f"at {e.names[i]} the reference is {_g(e.reference[i], 3)} ± "
        f"{_g(e.reference_error[i], 2)} against autodiff's {_g(e.autodiff[i], 3)}: too "
        f"coarse to tell a gradient error from round-off in {report.details.working_dtype}"
    )


def _median_error(report: Report) -> str:
    """The reference's median relative error bar; where every reference value is 0 (a
    function constant along every direction checked), the median error bar itself."""
    rel = report.details.reference.median_relative_error
    if np.isfinite(rel):
        return f"median relative error bar {_g(rel, 2)}"
    err = np.asarray(report.entries.reference_error, dtype=float)
    err = err[np.isfinite(err)]
    median = float(np.median(err)) if err.size else float("nan")
    return f"every reference value is 0, median error bar {_g(median, 2)}"


def _kinks_of_intermediates(report: Report) -> np.ndarray:
    """Per entry: NONSMOOTH although f's left and right derivatives agree (within twice
    their error bars, both finite), i.e. f is differentiable there and an intermediate
    of f sits at its kink (see :func:`polygrad.pipeline.kinks.kinks_of_intermediates`).
    An infinite one-sided derivative (``sqrt`` at 0, whose error bar is infinite too)
    agrees with nothing."""
    e = report.entries
    at_kink = np.array([str(v) == "NONSMOOTH" for v in e.verdicts()], dtype=bool)
    with np.errstate(all="ignore"):
        finite = np.isfinite(e.left) & np.isfinite(e.right)
        agree = finite & (np.abs(e.left - e.right) <= 2 * (e.left_error + e.right_error))
    return at_kink & agree


def _why_nonsmooth(report: Report, k: int, n: int) -> str:
    e = report.entries
    option = report.details.nonsmooth
    at_kink = np.array([str(v) == "NONSMOOTH" for v in e.verdicts()], dtype=bool)
    outside = int(np.sum(~np.asarray(e.within_one_sided, dtype=bool)[at_kink]))
    smooth = (
        f"the gradient agrees with the reference at the {_entries(n - k)} where f is smooth; "
        if k < n
        else "none of the entries lies where f is smooth: "
    )
    k_i = int(np.sum(_kinks_of_intermediates(report)))
    k_j = int(np.sum(_jumps(report)))
    parts = []
    if k > k_i + k_j:
        k_k = k - k_i - k_j
        parts.append(
            f"{k_k} of {_entries(n)} {_verb(k_k, 'sits', 'sit')} at a kink of f, "
            "where f has no derivative (its left and right derivatives differ)"
        )
    if k_j:
        parts.append(
            f"{k_j} of {_entries(n)} {_verb(k_j, 'sits', 'sit')} where f jumps or turns "
            "vertical (a one-sided derivative is infinite), so f has no derivative there"
        )
    if k_i:
        parts.append(
            f"at {k_i} of {_entries(n)} f is differentiable (its left and right derivatives "
            "agree) but the rule takes another value at this exact input than a few ulps "
            "away: an intermediate of f at its kink (a tie, an abs or ReLU at 0), where the "
            "framework takes one side of it, or a rule that special-cases this input, which "
            "would be a bug (see the note)"
        )
    txt = smooth + "; ".join(parts)
    txt += ", which is not a gradient error" if k > k_i else ""
    nan = int(np.sum(at_kink & ~np.isfinite(np.asarray(e.autodiff, dtype=float))))
    if nan:
        txt += (
            f"; but autodiff returned NaN or Inf at {nan} of them, which poisons any step "
            "that uses this gradient there"
        )
    if option == "allow":
        return txt + (
            ': NONSMOOTH passes by default (check(..., nonsmooth="allow"); '
            'nonsmooth="within" fails a value outside the one-sided derivatives, NaN included).'
            if nan
            else ': NONSMOOTH passes by default (check(..., nonsmooth="allow")).'
        )
    if option == "fail":
        return txt + ', but nonsmooth="fail" fails any kink.'
    if outside == 0:
        return txt + (
            ': autodiff lies between the one-sided derivatives at each, as nonsmooth="within" '
            "requires."
        )
    return txt + (
        f'; nonsmooth="within" fails it because autodiff lies outside the one-sided '
        f'derivatives at {outside} of them (the default, nonsmooth="allow", passes it).'
    )


def _jumps(report: Report) -> np.ndarray:
    """``(K,)`` bool: NONSMOOTH entries with an infinite one-sided derivative (the one-sided
    difference does not shrink like the step: a jump of f, or an infinite slope)."""
    e = report.entries
    at_kink = np.array([str(v) == "NONSMOOTH" for v in e.verdicts()], dtype=bool)
    return at_kink & (np.isinf(e.left) | np.isinf(e.right))


JUMP_WORDS = (
    "a one-sided derivative is infinite: f jumps there (sign, floor, a where between "
    "branches that differ at the point) or turns vertical (sqrt at 0), so no derivative "
    "exists, and autodiff differentiates the branch it took."
)

OPTIONS_WORDS = (
    'NONSMOOTH passes by default (nonsmooth="allow"); nonsmooth="within" requires autodiff '
    'between the one-sided derivatives, nonsmooth="fail" fails any kink.'
)


def _kinks(report: Report) -> str:
    """The NONSMOOTH explanation printed below the worst entries."""
    k = report.counts()["NONSMOOTH"]
    k_i = int(np.sum(_kinks_of_intermediates(report)))
    k_j = int(np.sum(_jumps(report)))
    head = f"  kinks: {_entries(k)} {_verb(k, 'is', 'are')} NONSMOOTH."
    if k_j == k:
        return f"{head} At each, {JUMP_WORDS} {OPTIONS_WORDS}"
    where = (
        "f itself is differentiable there, but an intermediate of f sits exactly at a kink"
        " (a tie of max, abs or ReLU at 0), and autodiff takes one side of it."
        if k_i == k
        else "f has a kink there (ReLU, abs, max, max-pooling ties): its left and right "
        "derivatives differ, and a central difference across the kink returns neither."
        + (f" At {k_i} of them f itself is differentiable and an intermediate sits at a kink."
           if k_i else "")
        + (f" At {k_j} of them {JUMP_WORDS}" if k_j else "")
    )  # fmt: skip
    return " ".join(
        [
            f"{head} {where}",
            "Autodiff returns one element of the generalized derivative: at a single",
            "elementary kink, one of the one-sided derivatives or a value between them; at a",
            "kink of a composition (ReLU inside max-pooling, products of kinks) it may lie",
            "outside them, because autodiff computes a conservative gradient (Bolte & Pauwels,",
            "NeurIPS 2020), so a value outside is not evidence of a wrong rule. Frameworks",
            "pick differently (relu at 0: 0 in each; maximum(x, 0) at 0: 1 in TensorFlow, 0.5",
            "in PyTorch and JAX), so at a kink an autodiff value that agrees with a central",
            "difference is no more right than one that does not.",
            OPTIONS_WORDS,
        ]
    )
