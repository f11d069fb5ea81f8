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

if TYPE_CHECKING:
    from .report import Report

__all__ = ["render_text", "use_color", "strip_color"]

_EXPLAIN = {
    "PASS": "autodiff agrees with the reference within the combined error bars.",
    "MISMATCH": "the gradient rule is wrong: the difference is far outside what round-off "
    "and the reference's error bar allow.",
    "UNSTABLE": "the rule is right (its float64 evaluation agrees with the reference), but the "
    "working-dtype gradient has lost far more digits than round-off explains.",
    "NONSMOOTH": "the function is not differentiable here (a kink or a jump within the "
    "smallest step); the left and right derivatives differ.",
    "NONFINITE": "autodiff and the reference disagree on finiteness (NaN/Inf on one side only).",
    "INCONCLUSIVE": "no reference accurate enough could be obtained for some entries.",
}


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


_NEAR_ZERO = "f is near 0 here: the noise comes from the terms that cancel"


def _relative(r: float | None) -> str:
    """A noise relative to |f|, or a plain statement when f is near 0 (cancellation)."""
    if r is None or not np.isfinite(r) or r > 1e-3:
        return _NEAR_ZERO
    return f"{_g(r, 2)} relative"


def _ulps(u: float) -> str:
    if not np.isfinite(u) or u > 1e4:
        return _NEAR_ZERO
    return f"~{_g(u, 2)} ulp of f"


def _g(x: float | None, digits: int = 4) -> str:
    x = float("nan") if x is None else float(x)
    if np.isnan(x):
        return "-"
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
    d = report.details
    e = report.entries
    ref = d.get("reference", {})
    lines = []
    code = _COLORS.get(str(report.verdict), "0")
    lines.append(
        "polygrad: "
        + _paint(str(report.verdict), "1;" + code, color)
        + ("" if report.ok else _paint("  (check failed)", code, color))
    )
    lines.append(f"  {_EXPLAIN[str(report.verdict)]}")
    counts = ", ".join(f"{k} {v}" for k, v in sorted(report.counts().items()))
    lines.append(
        f"  checked {len(e.names)} {report.quantity} of f: {d.get('inputs')} input(s) "
        f"{tuple(d.get('input_names', []))} -> {d.get('outputs')} output(s); "
        f"{d.get('backend')}, {d.get('working_dtype')}, mode {'+'.join(d.get('modes', []))}"
    )
    lines.append(f"  verdicts: {counts}")
    method = ref.get("method")
    how = {
        "mp": f"mpmath at {ref.get('dps')} digits",
        "float64": "float64 central differences",
        "working": f"{d.get('working_dtype')} central differences (no float64 evaluation)",
    }.get(method, str(method))
    lines.append(
        f"  reference: {how} + Richardson extrapolation; "
        f"median step {_g(ref.get('median_step'), 3)} "
        f"(relative to |x|), median relative error bar {_g(ref.get('median_relative_error'), 2)}; "
        f"function noise {_g(ref.get('noise'), 3)} ({_relative(ref.get('noise_relative'))}); "
        f"{ref.get('evaluations')} evaluations in {ref.get('seconds', 0):.2f} s"
    )
    lines.append(
        f"  tolerance: {d.get('rules', {}).get('tolerance')} (eps = {_g(d.get('eps'), 3)} for "
        f"{d.get('working_dtype')})"
    )
    if not d.get("rules", {}).get("has_float64_autodiff") and d.get("working_dtype") != "float64":
        lines.append(
            "  note: the gradient could not be evaluated in float64, so a wrong rule cannot be "
            "told apart from an unstable computation"
        )
    order = e.worst(max_rows)
    header = (
        f"  {'entry':<28} {'verdict':<12} {'autodiff':>12} {'reference':>12} {'± error':>10} "
        f"{'|diff|':>10} {'tolerance':>10}"
    )
    lines.append("  worst entries:")
    lines.append(header)
    for i in order:
        name = e.names[i]
        if len(name) > 28:
            name = name[:25] + "..."
        v = e.verdicts()[i]
        vtxt = _paint(f"{str(v):<12}", _COLORS.get(str(v), "0"), color)
        lines.append(
            f"  {name:<28} {vtxt} {_g(e.autodiff[i], 6):>12} {_g(e.reference[i], 6):>12} "
            f"{_g(e.reference_error[i], 2):>10} {_g(e.difference[i], 2):>10} "
            f"{_g(e.tolerance[i], 2):>10}"
        )
        if str(v) == "NONSMOOTH":
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
            else:
                tail = (
                    "; autodiff "
                    + ("lies" if e.within_one_sided[i] else "does NOT lie")
                    + " between them"
                )
            lines.append(f"  {'':<28}   {sides[0]}, {sides[1]}{tail}")
        if str(v) in ("MISMATCH", "UNSTABLE") and np.isfinite(e.autodiff64[i]):
            lines.append(
                f"  {'':<28}   float64 evaluation of the rule: {_g(e.autodiff64[i], 10)} "
                f"(|diff| {_g(abs(e.autodiff64[i] - e.reference[i]), 2)}, tolerance "
                f"{_g(e.tolerance64[i], 2)})"
            )
    proj = d.get("projections")
    if proj:
        lines.append(
            f"  projections: {proj['count']} random directions; a single wrong entry is caught "
            f"when off by more than ~{_g(proj['single_entry_error_caught'], 2)}, an error spread "
            f"over many entries with 99% probability when its scaled 2-norm exceeds "
            f"{_g(proj['spread_error_norm_caught_99'], 2)}"
        )
    naive = d.get("naive_central_difference")
    if naive:
        txt = (
            f"  round-off: f has noise {_g(naive['noise'], 2)} in {d.get('working_dtype')} "
            f"({_ulps(naive['noise_ulps'])}); a plain central difference with step h "
            f"is off by ~noise/h, e.g. {_g(naive['example_error'], 2)} at h = 2^-13"
        )
        if "optimal_step" in naive:
            txt += (
                f"; its best step is h ≈ {_g(naive['optimal_step'], 2)} (error "
                f"~{_g(naive['optimal_error'], 2)})"
            )
        elif naive.get("third_derivative") is not None and "NONSMOOTH" not in report.counts():
            txt += "; third derivative ≈ 0 here (no truncation error), so larger steps only help"
        elif naive.get("third_derivative") is not None:
            txt += "; no curvature was measured along the sampled direction, but f has kinks"
        lines.append(txt)
    taylor = d.get("taylor")
    if taylor and taylor.get("explanation"):
        txt = f"  Taylor test (supporting evidence): {taylor['explanation']}"
        if taylor.get("verdict") == "wrong" and "NONSMOOTH" in report.counts():
            txt += (
                " — expected here: the function has kinks next to this point, and a kink "
                "crossed by the steps leaves a first-order remainder"
            )
        elif taylor.get("verdict") == "consistent" and "MISMATCH" in report.counts():
            txt += (
                " — along one random direction only, which barely weighs a few wrong "
                "entries among many; the comparison of each entry above decides"
            )
        lines.append(txt)
    for note in d.get("notes", []):
        lines.append(f"  note: {note}")
    return "\n".join(lines)
